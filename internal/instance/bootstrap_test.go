package instance

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestTimelineEnd(t *testing.T) {
	history := "1\t0/3000158\tno recovery target specified\n\n2\t0/5086BF0\tno recovery target specified\n"
	for tli, want := range map[int64]struct {
		end   uint64
		found bool
	}{1: {0x3000158, true}, 2: {0x5086BF0, true}, 3: {0, false}} {
		end, found := timelineEnd(history, tli)
		if end != want.end || found != want.found {
			t.Errorf("timeline %d: ended at %x (%t), want %x (%t)", tli, end, found, want.end, want.found)
		}
	}
}

// A private server that exits before it answers is reported with the
// caller's error, its exit taken once (a second wait would block
// forever); one still starting when the context ends is stopped.
func TestStartPrivateReportsAServerThatExits(t *testing.T) {
	bin := t.TempDir()
	script := func(name, body string) {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script("pg_isready", "exit 2")
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	m := &manager{c: Config{Port: "5432"}, procs: startReaper()}
	defer m.procs.stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	script("postgres", "exit 1")
	exited := errors.New("the data does not start")
	if server, err := m.startPrivate(ctx, nil, t.TempDir(), exited); server != nil || !errors.Is(err, exited) {
		t.Fatalf("a server that exits at start: %v, %v; want no server and %q", server, err, exited)
	}

	script("postgres", "exec sleep 600")
	short, stop := context.WithTimeout(ctx, time.Second)
	defer stop()
	if server, err := m.startPrivate(short, nil, t.TempDir(), exited); server != nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a server that never answers: %v, %v; want no server and the context's end", server, err)
	}
	if ctx.Err() != nil {
		t.Fatal("the server that never answered was not stopped in time")
	}
}

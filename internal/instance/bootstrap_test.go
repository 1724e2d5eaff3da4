package instance

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
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

// A replica whose WAL receiver is gone is on the timeline its WAL is on,
// by the newest history file it holds with entries, not on its last
// restartpoint's.
func TestReplicaTimeline(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if got := replicaTimeline(dir, 0x9000000, 1); got != 1 {
		t.Errorf("no history file: timeline %d, want the checkpoint's, 1", got)
	}
	write("00000002.history", "1\t0/3000158\tno recovery target specified\n")
	write("00000003.history", "1\t0/3000158\tno recovery target specified\n\n2\t0/5086BF0\tno recovery target specified\n")
	// What reserveTimelines writes for a number another instance used.
	write("00000004.history", "# timeline used by another instance; reserved by the instance manager\n")
	for _, c := range []struct {
		lsn        uint64
		checkpoint int64
		want       int64
	}{
		{0x9000000, 1, 3}, // past every switch point: the timeline followed
		{0x5086BF1, 2, 3}, // just past the fork of 3
		{0x5086BF0, 1, 2}, // at the fork: nothing of 3 yet
		{0x4000000, 1, 2}, // between the two forks
		{0x3000158, 1, 1}, // at the first fork
		{0x3000158, 2, 2}, // never below the checkpoint's
		{0x9000000, 5, 5}, // nor above a newer checkpoint's
	} {
		if got := replicaTimeline(dir, c.lsn, c.checkpoint); got != c.want {
			t.Errorf("WAL to %X, checkpoint on %d: timeline %d, want %d", c.lsn, c.checkpoint, got, c.want)
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
	m := &pgServer{c: Config{Port: "5432"}, procs: startReaper()}
	defer m.procs.stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	script("postgres", "exit 1")
	exited := errors.New("the data does not start")
	if server, err := m.startPrivate(ctx, nil, t.TempDir(), exited, 0); server != nil || !errors.Is(err, exited) {
		t.Fatalf("a server that exits at start: %v, %v; want no server and %q", server, err, exited)
	}

	script("postgres", "exec sleep 600")
	short, stop := context.WithTimeout(ctx, time.Second)
	defer stop()
	if server, err := m.startPrivate(short, nil, t.TempDir(), exited, 0); server != nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a server that never answers: %v, %v; want no server and the context's end", server, err)
	}
	if ctx.Err() != nil {
		t.Fatal("the server that never answered was not stopped in time")
	}
}

// TestStartPrivateStopsAStalledReplay: a server whose startup process
// reads the same WAL file for longer than the stall is stopped with
// errReplayStalled; one that moves on from file to file is waited for.
func TestStartPrivateStopsAStalledReplay(t *testing.T) {
	bin := t.TempDir()
	postgres := func(body string) {
		// The postmaster's child titled as PostgreSQL's startup process;
		// stopped with its parent.
		script := "#!/bin/bash\ntrap 'kill $child 2>/dev/null; exit 0' INT TERM QUIT\n" +
			"title() { (exec -a \"postgres: startup recovering $1\" sleep \"$2\") & child=$!; wait $child; }\n" + body + "\n"
		if err := os.WriteFile(filepath.Join(bin, "postgres"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(bin, "pg_isready"), []byte("#!/bin/sh\nexit 2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	m := &pgServer{c: Config{Port: "5432"}, procs: startReaper()}
	defer m.procs.stop()
	exited := errors.New("the data does not start")

	postgres("title 00000002000000000000000C 30")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if server, err := m.startPrivate(ctx, nil, t.TempDir(), exited, time.Second); server != nil || !errors.Is(err, errReplayStalled) ||
		!strings.Contains(err.Error(), "00000002000000000000000C") {
		t.Fatalf("a replay that reads one file for ever: %v, %v; want no server and %v naming the file", server, err, errReplayStalled)
	}

	postgres("for i in $(seq 10 40); do title 0000000200000000000000$i 0.3; done")
	moving, stop := context.WithTimeout(ctx, 3*time.Second)
	defer stop()
	if server, err := m.startPrivate(moving, nil, t.TempDir(), exited, time.Second); server != nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a replay that moves on: %v, %v; want it waited for until the context's end", server, err)
	}
}

// TestAHalfDoneRewindLeavesNoData: while pg_rewind runs, and after one
// that failed when the clone that follows failed too (the source lost
// half way), the data counts as none: never started, never a candidate.
// A rewind or a clone that succeeds makes it data again.
func TestAHalfDoneRewindLeavesNoData(t *testing.T) {
	bin, dir := t.TempDir(), t.TempDir()
	script := func(name, body string) {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	c := Config{PGData: filepath.Join(dir, "pgdata"), SocketDir: filepath.Join(dir, "run"), ReplicationTLSDir: filepath.Join(dir, "tls")}
	for _, d := range []string{c.PGData, c.SocketDir, c.ReplicationTLSDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{c.PGData + "/PG_VERSION", c.ReplicationTLSDir + "/tls.crt", c.ReplicationTLSDir + "/tls.key", c.ReplicationTLSDir + "/ca.crt"} {
		if err := os.WriteFile(f, []byte("17\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	m := &pgServer{c: c, log: func(string, ...any) {}, procs: startReaper()}
	defer m.procs.stop()
	ctx := context.Background()

	rewind := func() error {
		conninfo, err := m.replicationConninfo(ctx, "10.0.0.2:5432")
		if err != nil {
			return err
		}
		return m.rewind(ctx, conninfo, "the primary", func() error { return m.cloneReplica(ctx, "10.0.0.2:5432") })
	}
	script("pg_rewind", `touch "$(echo "$1" | sed 's/^--target-pgdata=//')/half-rewound"; exit 1`)
	script("pg_basebackup", "exit 1")
	if err := rewind(); err == nil {
		t.Fatal("a rewind and a clone that both failed: no error")
	}
	if c.initialised() {
		t.Fatal("data a failed pg_rewind changed counts as data")
	}
	if a := decide(situation{me: "db-1", hasData: c.initialised(), leaseRead: true, lease: leaseView{holder: "db-0", expired: true}}); a == stand || a == runReplica {
		t.Fatalf("an instance whose rewind failed would %s", a)
	}

	// The clone that follows succeeds: data again.
	script("pg_basebackup", `d="$(echo "$1" | sed 's/^--pgdata=//')"; mkdir -p "$d" && echo 17 > "$d/PG_VERSION"`)
	if err := rewind(); err != nil {
		t.Fatal(err)
	}
	if !c.initialised() {
		t.Fatal("a fresh clone does not count as data")
	}
	if _, err := os.Stat(c.PGData + "/half-rewound"); !os.IsNotExist(err) {
		t.Fatal("the clone kept the half-rewound data")
	}
	script("pg_rewind", "echo Done!")
	if err := rewind(); err != nil || !c.initialised() {
		t.Fatalf("a rewind that succeeds: %v, data %t", err, c.initialised())
	}
}

package instance

import (
	"context"
	"io"
	"os"
	"testing"
	"time"

	"example.com/myoperator/internal/contract"
)

// TestBridgeWhoseWitnessFails: a bridge that cannot stream (here, no
// server) says so at once by closing its ready pipe without "streaming",
// and ends with the witness's error, rather than holding the instance
// manager that waits for it until the fence's deadline.
func TestBridgeWhoseWitnessFails(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	until := monotonicNow() + int64(10*time.Second)
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		done <- RunBridge(context.Background(), Config{SocketDir: t.TempDir(), Port: "5432"}, until, contract.Quorum{}, w,
			func(string, ...any) {})
	}()
	said, err := io.ReadAll(r)
	if err != nil || len(said) != 0 {
		t.Errorf("ready said %q (%v), want nothing", said, err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Error("RunBridge returned no error with no server to stream from")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("RunBridge still runs 5 s after its witness failed")
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("ready closed after %s", waited)
	}
}

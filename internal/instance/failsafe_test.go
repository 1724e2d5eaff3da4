package instance

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPromises: a member promises only the holder it knows, never while it
// takes the Lease itself, and takes nothing while its promise holds.
func TestPromises(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	f := newFailsafe("db-1")
	f.now = func() time.Time { return now }
	if ok, _ := f.grant("db-0", 4*time.Second); ok {
		t.Fatal("granted before this instance saw any holder")
	}
	f.observe("db-0")
	if ok, why := f.grant("db-2", 4*time.Second); ok || !strings.Contains(why, `"db-0"`) {
		t.Fatalf("granted db-2, which does not hold the Lease here: %t %q", ok, why)
	}
	if ok, _ := f.grant("db-0", 4*time.Second); !ok || !f.promised() {
		t.Fatal("the holder's request refused")
	}
	if f.beginTake() {
		t.Fatal("a take while the promise holds")
	}
	now = now.Add(4 * time.Second)
	if f.promised() {
		t.Fatal("the promise outlived its duration")
	}
	if !f.beginTake() {
		t.Fatal("no take once the promise ended")
	}
	if ok, why := f.grant("db-0", 4*time.Second); ok || !strings.Contains(why, "taking") {
		t.Fatalf("granted while taking the Lease: %t %q", ok, why)
	}
	f.endTake(true)
	if ok, _ := f.grant("db-0", 4*time.Second); ok {
		t.Fatal("granted the old holder after this instance took the Lease")
	}
	if ok, _ := f.grant("db-1", 4*time.Second); ok {
		t.Fatal("promised itself")
	}
}

// TestPromiseOverTheWire: a primary gets the promise of a member over
// HTTP with the shared key; without it, nothing is granted, either way.
func TestPromiseOverTheWire(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "tls.key")
	if err := os.WriteFile(keyFile, []byte("the replication client key"), 0o600); err != nil {
		t.Fatal(err)
	}
	member := &manager{c: Config{PodName: "db-1", ReplicationTLSDir: dir}, failsafe: newFailsafe("db-1")}
	member.failsafe.observe("db-0")
	srv := httptest.NewServer(member.failsafeHandler(func() time.Duration { return 4 * time.Second }))
	defer srv.Close()
	address := strings.TrimPrefix(srv.URL, "http://")
	primary := &manager{c: Config{PodName: "db-0", ReplicationTLSDir: dir}}
	ctx := context.Background()

	if err := primary.askPromises(ctx, []string{"db-1"}, map[string]string{"db-1": address}, time.Second); err != nil {
		t.Fatalf("a member's promise: %v", err)
	}
	if !member.failsafe.promised() {
		t.Fatal("granted, but the member holds no promise")
	}
	if err := primary.askPromises(ctx, []string{"db-1", "db-2"}, map[string]string{"db-1": address}, time.Second); err == nil {
		t.Fatal("a round with a member whose address is unknown succeeded")
	}
	stranger := &manager{c: Config{PodName: "db-0", ReplicationTLSDir: t.TempDir()}}
	if err := os.WriteFile(filepath.Join(stranger.c.ReplicationTLSDir, "tls.key"), []byte("another key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := stranger.askPromises(ctx, []string{"db-1"}, map[string]string{"db-1": address}, time.Second); err == nil ||
		!strings.Contains(err.Error(), "403") {
		t.Fatalf("a request without the key: %v, want it refused", err)
	}
	// A member that refuses says why.
	member.failsafe.observe("db-2")
	if err := primary.askPromises(ctx, []string{"db-1"}, map[string]string{"db-1": address}, time.Second); err == nil ||
		!strings.Contains(err.Error(), "db-1 refused") {
		t.Fatalf("a member that takes another for the holder: %v", err)
	}
}

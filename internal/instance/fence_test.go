package instance

import (
	"context"
	"slices"
	"testing"
	"time"
)

func TestFenceClosesAtItsDeadline(t *testing.T) {
	f := newFence(time.Now)
	now := f.now()
	f.now = func() time.Time { return now }
	if f.open() {
		t.Fatal("a new fence is open: a server would acknowledge commits before any renewal")
	}
	f.extend(now, 3*time.Second)
	if !f.open() {
		t.Fatal("closed right after a renewal")
	}
	f.extend(now.Add(-time.Second), 3*time.Second) // an older renewal never shortens it
	f.now = func() time.Time { return now.Add(2999 * time.Millisecond) }
	if !f.open() || f.left() != time.Millisecond {
		t.Fatalf("closed before its deadline, or open for %s more, not 1ms (the fence bridge's deadline)", f.left())
	}
	f.now = func() time.Time { return now.Add(3 * time.Second) }
	if f.open() || f.left() != 0 {
		t.Fatalf("open at its deadline, for %s more", f.left())
	}
	f.now = func() time.Time { return now }
	f.close()
	if f.open() {
		t.Fatal("open after close")
	}
}

// TestQuorumCountsMembersOnly: the fence counts the other instances of
// spec.replicas, by the application names they stream under, and nothing
// else (a re-clone's pg_basebackup streams as "pg_basebackup").
func TestQuorumCountsMembersOnly(t *testing.T) {
	c := Config{PodName: "shop-1", BootstrapPod: "shop-0"}
	if got, want := c.members(3), []string{"shop-0", "shop-2"}; !slices.Equal(got, want) {
		t.Errorf("members of 3 seen from shop-1: %q, want %q", got, want)
	}
	c = Config{PodName: "shop-10", BootstrapPod: "shop-0"}
	if got, want := c.members(12), []string{"shop-0", "shop-1", "shop-2", "shop-3", "shop-4", "shop-5", "shop-6", "shop-7",
		"shop-8", "shop-9", "shop-11"}; !slices.Equal(got, want) {
		t.Errorf("members of 12 seen from shop-10: %q, want %q", got, want)
	}
	for name, want := range map[string]bool{"shop-0": true, "shop-11": true, "shop-": false, "shop-x": false, "shop-01": false,
		"pg_basebackup": false, "pg_receivewal": false, "shop-1-clone": false} {
		if got := c.isInstance(name); got != want {
			t.Errorf("isInstance(%q) = %t, want %t", name, got, want)
		}
	}
	if got := (Config{PodName: "shop-0", BootstrapPod: "shop-0"}).members(1); len(got) != 0 {
		t.Errorf("members of a single instance: %q, want none", got)
	}
}

// TestAwaitStreaming: a promotion reports the primary only once the
// fence's standby streams; it waits for it, within a bound.
func TestAwaitStreaming(t *testing.T) {
	f := newFence(time.Now)
	if f.awaitStreaming(context.Background(), 20*time.Millisecond) {
		t.Fatal("streaming before the witness started")
	}
	time.AfterFunc(30*time.Millisecond, func() { f.setStreaming(true) })
	if !f.awaitStreaming(context.Background(), time.Second) {
		t.Fatal("the witness streams, but the wait did not see it")
	}
	f.setStreaming(false)
	if f.awaitStreaming(context.Background(), 10*time.Millisecond) {
		t.Fatal("streaming after the witness ended")
	}
}

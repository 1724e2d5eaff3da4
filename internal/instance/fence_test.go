package instance

import (
	"testing"
	"time"
)

func TestFenceClosesAtItsDeadline(t *testing.T) {
	f := newFence()
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
	if !f.open() {
		t.Fatal("closed before its deadline")
	}
	f.now = func() time.Time { return now.Add(3 * time.Second) }
	if f.open() {
		t.Fatal("open at its deadline")
	}
	f.now = func() time.Time { return now }
	f.close()
	if f.open() {
		t.Fatal("open after close")
	}
}

package leader

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
	clocktesting "k8s.io/utils/clock/testing"
)

const validFor = 10 * time.Second

// fakeLock stands for the API server: its writes succeed unless failing,
// and take took on the clock; the lease names holder.
type fakeLock struct {
	clock   *clocktesting.FakeClock
	took    time.Duration
	failing bool
	holder  string
	writes  int
}

func (f *fakeLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	return &resourcelock.LeaderElectionRecord{HolderIdentity: f.holder}, nil, nil
}
func (f *fakeLock) Create(_ context.Context, r resourcelock.LeaderElectionRecord) error {
	return f.write(r)
}
func (f *fakeLock) Update(_ context.Context, r resourcelock.LeaderElectionRecord) error {
	return f.write(r)
}
func (f *fakeLock) RecordEvent(string) {}
func (f *fakeLock) Identity() string   { return "me" }
func (f *fakeLock) Describe() string   { return "ns/lock" }

func (f *fakeLock) write(r resourcelock.LeaderElectionRecord) error {
	f.writes++
	f.clock.Step(f.took)
	if f.failing {
		return errors.New("server unavailable")
	}
	f.holder = r.HolderIdentity
	return nil
}

// Each case is a history of the elector's writes and of time passing; then
// a write is attempted.
type step func(*testing.T, *Lease, *fakeLock)

func acquire(t *testing.T, l *Lease, _ *fakeLock) {
	if err := l.Create(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"}); err != nil {
		t.Fatal(err)
	}
}

func renew(t *testing.T, l *Lease, f *fakeLock) {
	err := l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"})
	if (err != nil) != f.failing {
		t.Fatalf("renewal: %v", err)
	}
}

// release is client-go's: a Get, then an Update naming no holder.
func release(t *testing.T, l *Lease, _ *fakeLock) {
	if _, _, err := l.Get(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.Update(context.Background(), resourcelock.LeaderElectionRecord{}); err != nil {
		t.Fatal(err)
	}
}

func wait(d time.Duration) step {
	return func(_ *testing.T, _ *Lease, f *fakeLock) { f.clock.Step(d) }
}

func failing(on bool) step { return func(_ *testing.T, _ *Lease, f *fakeLock) { f.failing = on } }

func slowWrites(d time.Duration) step {
	return func(_ *testing.T, _ *Lease, f *fakeLock) { f.took = d }
}

func TestCheck(t *testing.T) {
	cases := map[string]struct {
		history []step
		allowed bool
	}{
		"never acquired":                   {nil, false},
		"just acquired":                    {[]step{acquire}, true},
		"at the renew deadline":            {[]step{acquire, wait(validFor)}, true},
		"past the renew deadline (paused)": {[]step{acquire, wait(validFor + time.Millisecond)}, false},
		"each renewal extends":             {[]step{acquire, wait(8 * time.Second), renew, wait(8 * time.Second)}, true},
		"failed renewals extend nothing": {
			[]step{acquire, wait(5 * time.Second), failing(true), renew, wait(5 * time.Second), renew, wait(time.Second)}, false},
		"renewed again after failures": {
			[]step{acquire, failing(true), wait(9 * time.Second), renew, failing(false), renew, wait(9 * time.Second)}, true},
		// The others may count from the moment the write reached the
		// server, never earlier than when it was sent: count from then.
		"counted from when the renewal was sent": {
			[]step{slowWrites(4 * time.Second), acquire, wait(7 * time.Second)}, false},
		"released": {[]step{acquire, release}, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &fakeLock{clock: clocktesting.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))}
			l := Wrap(f, validFor, f.clock)
			for _, s := range tc.history {
				s(t, l, f)
			}
			err := l.Check()
			if tc.allowed != (err == nil) {
				t.Fatalf("allowed = %v, want %v (error: %v)", err == nil, tc.allowed, err)
			}
			if err != nil && !errors.Is(err, ErrNotLeader) {
				t.Fatalf("the refusal does not wrap ErrNotLeader: %v", err)
			}
		})
	}
}

// stale returns a lease acquired and then not renewed past its deadline.
func stale(t *testing.T) *Lease {
	t.Helper()
	l, f := fresh(t)
	f.clock.Step(validFor + time.Second)
	return l
}

func fresh(t *testing.T) (*Lease, *fakeLock) {
	t.Helper()
	f := &fakeLock{clock: clocktesting.NewFakeClock(time.Now())}
	l := Wrap(f, validFor, f.clock)
	acquire(t, l, f)
	return l, f
}

// A leader resumed after a pause may release on its way out while the lease
// is already another's: it must leave it alone.
func TestReleaseOnlyWhatWeHold(t *testing.T) {
	l, f := fresh(t)
	f.holder = "successor"
	if _, _, err := l.Get(context.Background()); err != nil {
		t.Fatal(err)
	}
	writes := f.writes
	err := l.Update(context.Background(), resourcelock.LeaderElectionRecord{})
	if !errors.Is(err, ErrNotLeader) {
		t.Fatalf("got %v, want a refusal", err)
	}
	if f.writes != writes || f.holder != "successor" {
		t.Fatalf("the release reached the lease: holder %q", f.holder)
	}
}

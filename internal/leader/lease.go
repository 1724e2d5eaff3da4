// Package leader fences an operator process's writes to the time it can
// prove that it holds the leader lease.
//
// controller-runtime's elector notices a lost lease only when it next tries
// to renew. A leader that was paused (SIGSTOP, a long stall) or cut off past
// its lease resumes with its workers already running, and they can write
// before the elector runs, racing the leader that took over meanwhile. The
// guard here does not wait for the elector: wrapped around the manager's
// transport (Lease.WrapTransport), it refuses every write once the renew
// deadline has passed since the last renewal this process saw succeed,
// measured on the monotonic clock.
//
// Another candidate takes the lease no sooner than the lease duration after
// it saw our last renewal, and it cannot see a renewal before we sent it.
// Counting from the moment we sent it, and stopping at the renew deadline
// rather than the lease duration, leaves their difference as the margin for
// a write already on the wire. A write that passed the check and was then
// paused before reaching the server is the one gap left: closing it needs
// fencing on the server side, which Kubernetes does not offer.
package leader

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/leaderelection"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

// ErrNotLeader is wrapped by every refusal, for errors.Is.
var ErrNotLeader = errors.New("not the leader")

// Lease is the lock the elector renews, remembering when this process last
// renewed it successfully. Give it to the manager as
// LeaderElectionResourceLockInterface.
type Lease struct {
	resourcelock.Interface
	validFor time.Duration
	clock    clock.PassiveClock

	mu sync.Mutex
	// renewed is when the last successful Create or Update that named us
	// holder was sent; zero while we do not hold the lease.
	renewed time.Time
	// holder is who held the lease at the last successful Get.
	holder string
}

// NewLease builds controller-runtime's Lease lock (same identity, client
// timeout and in-cluster namespace detection as the manager would use) and
// wraps it. validFor is the manager's renew deadline.
func NewLease(cfg *rest.Config, namespace, name string, validFor time.Duration) (*Lease, error) {
	lock, err := leaderelection.NewResourceLock(cfg, noEvents{}, leaderelection.Options{
		LeaderElection:          true,
		LeaderElectionID:        name,
		LeaderElectionNamespace: namespace,
		RenewDeadline:           validFor,
	})
	if err != nil {
		return nil, err
	}
	return Wrap(lock, validFor, clock.RealClock{}), nil
}

// Wrap wraps lock; writes are allowed for validFor after each renewal. clk
// must measure elapsed time monotonically (clock.RealClock does).
func Wrap(lock resourcelock.Interface, validFor time.Duration, clk clock.PassiveClock) *Lease {
	return &Lease{Interface: lock, validFor: validFor, clock: clk}
}

// Get is the elector reading the lease.
func (l *Lease) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := l.Interface.Get(ctx)
	if err == nil {
		l.mu.Lock()
		l.holder = rec.HolderIdentity
		l.mu.Unlock()
	}
	return rec, raw, err
}

// Create is the elector acquiring a lease that does not exist yet.
func (l *Lease) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.record(ler, func() error { return l.Interface.Create(ctx, ler) })
}

// Update is the elector acquiring, renewing or releasing the lease. The
// lock updates with the resourceVersion it last read, so success means no
// one else took the lease in between.
func (l *Lease) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if ler.HolderIdentity != l.Identity() {
		// A release. client-go reads the lease just before, but decides
		// from the record it observed earlier: a leader resumed after a
		// pause may still believe it holds the lease and, with the fresh
		// resourceVersion, would free its successor's.
		l.mu.Lock()
		holder := l.holder
		l.mu.Unlock()
		if holder != l.Identity() {
			return fmt.Errorf("%w: not releasing the lease %s, which %q holds", ErrNotLeader, l.Describe(), holder)
		}
	}
	return l.record(ler, func() error { return l.Interface.Update(ctx, ler) })
}

func (l *Lease) record(ler resourcelock.LeaderElectionRecord, write func() error) error {
	sent := l.clock.Now() // before the write: the others count from no earlier
	err := write()
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err != nil:
		// Nothing learned: others still count from the last success.
	case ler.HolderIdentity == l.Identity():
		l.renewed = sent
	default:
		l.renewed = time.Time{} // released
	}
	return err
}

// Check returns nil while this process may write, else an error wrapping
// ErrNotLeader that says why.
func (l *Lease) Check() error {
	l.mu.Lock()
	renewed := l.renewed
	l.mu.Unlock()
	if renewed.IsZero() {
		return fmt.Errorf("%w: refusing to write, this process does not hold the lease %s", ErrNotLeader, l.Describe())
	}
	if age := l.clock.Since(renewed); age > l.validFor {
		return fmt.Errorf("%w: refusing to write, this process last renewed the lease %s %s ago, "+
			"more than the renew deadline (%s): another process may lead now",
			ErrNotLeader, l.Describe(), age.Round(time.Millisecond), l.validFor)
	}
	return nil
}

// noEvents gives the lock no event recorder (the lock skips its "became
// leader" events then): the manager's recorders do not exist yet when the
// lock is built.
type noEvents struct{}

func (noEvents) GetEventRecorderFor(string) record.EventRecorder { return nil }
func (noEvents) GetEventRecorder(string) recorder.EventRecorder  { return nil }

var _ recorder.Provider = noEvents{}

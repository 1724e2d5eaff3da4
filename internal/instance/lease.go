package instance

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"example.com/myoperator/internal/contract"
)

// timing holds every delay of the HA loop. They all derive from one
// number, the Lease duration L (spec.failover.leaseDurationSeconds), so
// that this argument holds for any L:
//
//   - The primary renews every L/5. Its fence (fence.go) stays open until
//     3L/5 after the start of its last successful renewal, t0 on its clock.
//   - The API server wrote that renewal at t1 >= t0. Another instance sees
//     the new renewTime at t2 >= t1, and takes the Lease only when it has
//     seen no change for L on its own clock: at t2 + L >= t0 + L at the
//     earliest. L there is the holder's, the leaseDurationSeconds it
//     wrote, whatever the other instance's own (leases.duration).
//   - So the primary stops acknowledging commits at t0 + 3L/5, 2L/5 before
//     anyone can take the Lease (1.6 s with the default L of 4 s). The margin
//     covers the difference between the clocks' rates (parts per million),
//     not their offsets, which do not enter: each side measures intervals
//     on its own monotonic clock, never compares timestamps.
//   - A request to the API server may take at most L/5, so a hung one
//     cannot keep the loop from noticing its deadline.
type timing struct {
	lease    time.Duration // L
	tick     time.Duration // L/5: the HA loop's period
	deadline time.Duration // 3L/5: how long the fence stays open after a renewal starts
}

func newTiming(lease time.Duration) timing {
	return timing{lease: lease, tick: lease / 5, deadline: lease * 3 / 5}
}

// leaseView is what this instance knows of the primary Lease.
type leaseView struct {
	holder  string
	version string // resourceVersion: the term of an election
	// expired: no holder, or no renewal seen for a whole Lease duration.
	expired bool
	// transitions counts the holders so far: 0 only for a new MyDatabase,
	// whose bootstrap pod makes the data.
	transitions int32
	// timeline is the newest timeline a holder has reported.
	timeline int64
	// switchoverTo is the instance the operator asks the primary to hand
	// the Lease to (a planned switchover), "" when none.
	switchoverTo string
	// handoff is where the WAL of the primary that handed the Lease over
	// ended: its holder promotes only once it has received more (0 when
	// the Lease was taken, not handed over).
	handoff uint64
	// quorum is what the operator asks of replication and elections;
	// quorumErr says why it could not be read (it is then asynchronous).
	quorum    contract.Quorum
	quorumErr error
	// failsafeSet is the members the holder asks for failsafe promises
	// (failsafeSetAnnotation); nil when none is written.
	failsafeSet []string
	// declared is what the MyDatabase declares inside PostgreSQL
	// (contract.AnnotationDeclared), as written.
	declared string
	// promote: the operator asks the designated primary of a replica
	// MyDatabase to promote (contract.AnnotationReplica); follow, that the
	// MyDatabase follow its source (a primary that takes writes demotes).
	promote, follow bool
	// promotionToken is where the WAL of the demoted source ended
	// (contract.AnnotationPromotionToken): a promotion waits until it is
	// replayed. Empty: none.
	promotionToken string
}

// timelineAnnotation on the Lease is the newest timeline any primary has
// run on, which each holder writes with its renewals. A candidate reserves
// every number up to it before it promotes (reserveTimelines), so that
// two instances never run distinct histories under one timeline number.
const timelineAnnotation = "database.example.com/timeline"

// handoffAnnotation on the Lease is the end of the WAL of the primary that
// handed the Lease over (contract.AnnotationSwitchoverTo asked it
// to), which the new holder must have received before it promotes; its
// first renewal removes it.
const handoffAnnotation = "database.example.com/handoff-lsn"

// failsafeSetAnnotation on the Lease is the members its holder asks for
// failsafe promises (failsafe.go), comma-separated, written with every
// renewal: an instance outside it is never asked, so never bound, and
// must not stand while the holder may hold the Lease on promises.
const failsafeSetAnnotation = "database.example.com/failsafe-members"

// electionAnnotation on the Lease is the last term (the Lease's version)
// a candidate ended because no one took the Lease in it (newTerm).
const electionAnnotation = "database.example.com/election-ended"

// leases takes, renews, releases and observes the primary Lease. It
// measures expiry from when it saw a renewal, on the local monotonic clock.
type leases struct {
	api    apiServer
	me     string
	t      timing
	now    func() time.Time
	lease  *coordinationv1.Lease
	seen   string    // holder and renewTime last seen
	seenAt time.Time // when they last changed, local clock
	// failsafeSet is what take writes as the failsafe set, with the
	// instances of the quorum of the Lease it writes (setFor); members
	// names them (Config.members).
	failsafeSet []string
	members     func(instances int32) []string
	// written is the leaseDurationSeconds of the Lease last seen (0: none),
	// which the failsafe endpoint reads beside the loop (promiseFor).
	written atomic.Int32
}

func newLeases(api apiServer, me string, t timing, now clock) *leases {
	return &leases{api: api, me: me, t: t, now: now}
}

// observe reads the Lease.
func (l *leases) observe(ctx context.Context) (leaseView, error) {
	lease, err := l.api.getLease(ctx)
	if err != nil {
		return leaseView{}, err
	}
	l.record(lease)
	return l.view(), nil
}

// record keeps lease as the last one seen, unless it is older than that
// one (a watch event behind a read). It reports whether the holder
// changed.
func (l *leases) record(lease *coordinationv1.Lease) bool {
	if l.lease != nil && older(lease.ResourceVersion, l.lease.ResourceVersion) {
		return false
	}
	changed := l.lease == nil || holderOf(lease) != holderOf(l.lease)
	l.lease = lease
	l.written.Store(ptr.Deref(lease.Spec.LeaseDurationSeconds, 0))
	var renewed time.Time
	if lease.Spec.RenewTime != nil {
		renewed = lease.Spec.RenewTime.Time
	}
	seen := holderOf(lease) + "@" + renewed.Format(time.RFC3339Nano)
	if seen != l.seen {
		l.seen, l.seenAt = seen, l.now()
	}
	return changed
}

// expiresIn is how long until the Lease another instance holds expires,
// by this instance's clock; false when there is no such Lease.
func (l *leases) expiresIn() (time.Duration, bool) {
	if l.lease == nil || holderOf(l.lease) == "" || holderOf(l.lease) == l.me {
		return 0, false
	}
	d := l.duration() - l.now().Sub(l.seenAt)
	return d, d > 0
}

// promiseFor is how long a failsafe promise lasts: the Lease duration,
// the holder's or this instance's own, whichever is longer. It is called
// from the failsafe endpoint, beside the HA loop: it reads only what the
// loop publishes for it.
func (l *leases) promiseFor() time.Duration { return max(l.duration(), l.t.lease) }

// duration is the Lease duration of the Lease last seen: the one its
// holder wrote, by which that holder's fence closes (3/5 of it after its
// renewal), not this instance's own. The two differ while a change of
// spec.failover.leaseDurationSeconds rolls through the pods, replicas
// first: a replica on a shorter duration must still wait out the longer
// one the primary fences by. This instance's own when none is written.
func (l *leases) duration() time.Duration {
	if s := l.written.Load(); s > 0 {
		return time.Duration(s) * time.Second
	}
	return l.t.lease
}

func holderOf(lease *coordinationv1.Lease) string { return ptr.Deref(lease.Spec.HolderIdentity, "") }

// older tells whether resourceVersion a is before b. Resource versions
// are opaque, but the API server's are integers that grow (etcd's
// revision); anything else is taken as not older.
func older(a, b string) bool {
	x, errX := strconv.ParseUint(a, 10, 64)
	y, errY := strconv.ParseUint(b, 10, 64)
	return errX == nil && errY == nil && x < y
}

func (l *leases) view() leaseView {
	spec := l.lease.Spec
	holder := ptr.Deref(spec.HolderIdentity, "")
	tli, _ := strconv.ParseInt(l.lease.Annotations[timelineAnnotation], 10, 64)
	handoff, _ := contract.LSN(l.lease.Annotations[handoffAnnotation])
	quorum, qerr := contract.ParseQuorum(l.lease.Annotations[contract.AnnotationQuorum])
	set, written := l.lease.Annotations[failsafeSetAnnotation]
	return leaseView{
		holder:         holder,
		version:        l.lease.ResourceVersion,
		expired:        holder == "" || l.now().Sub(l.seenAt) >= l.duration(),
		transitions:    ptr.Deref(spec.LeaseTransitions, 0),
		timeline:       tli,
		switchoverTo:   l.lease.Annotations[contract.AnnotationSwitchoverTo],
		handoff:        handoff,
		quorum:         quorum,
		quorumErr:      qerr,
		failsafeSet:    parseFailsafeSet(set, written),
		declared:       l.lease.Annotations[contract.AnnotationDeclared],
		promote:        l.lease.Annotations[contract.AnnotationReplica] == contract.ReplicaPromote,
		follow:         l.lease.Annotations[contract.AnnotationReplica] == contract.ReplicaFollow,
		promotionToken: l.lease.Annotations[contract.AnnotationPromotionToken],
	}
}

// take makes this instance the holder, if the Lease is still the version
// it last read (an election's term): of several candidates, one wins, the
// others get a conflict. It returns when the request started, for the
// fence.
//
// A take from another holder (an election) drops a switchover request
// made of that holder: handing over from the new primary would move the
// primary a second time (the operator withdraws the switchover).
func (l *leases) take(ctx context.Context, timeline int64) (time.Time, error) {
	taken := holderOf(l.lease) != l.me
	lease := l.held(l.me)
	if taken {
		delete(lease.Annotations, contract.AnnotationSwitchoverTo)
	}
	if known, _ := strconv.ParseInt(lease.Annotations[timelineAnnotation], 10, 64); timeline > known {
		lease.Annotations[timelineAnnotation] = strconv.FormatInt(timeline, 10)
	}
	delete(lease.Annotations, handoffAnnotation)
	lease.Annotations[failsafeSetAnnotation] = strings.Join(l.setFor(lease), ",")
	return l.update(ctx, lease)
}

// setFor is the failsafe set to write into lease: the one the loop worked
// out, and every instance of the quorum lease names, which can be newer
// than the quorum it worked it out from (a renewal that conflicted with
// the operator's change of spec.replicas reads the Lease again, then
// writes). An instance the operator made since must be in the set: one
// outside it never stands while this holder may hold on promises, so
// however far its WAL went, a less advanced member would win and an
// acknowledged write it alone held would be rewound (the simulator's
// scaling seed 4247).
func (l *leases) setFor(lease *coordinationv1.Lease) []string {
	set := slices.Clone(l.failsafeSet)
	q, err := contract.ParseQuorum(lease.Annotations[contract.AnnotationQuorum])
	if l.members == nil || err != nil {
		return set
	}
	for _, name := range l.members(q.Instances) {
		if name != l.me && !slices.Contains(set, name) {
			set = append(set, name)
		}
	}
	return set
}

// held is the Lease held by holder from now on: a new holder counts as a
// transition.
func (l *leases) held(holder string) *coordinationv1.Lease {
	lease := l.lease.DeepCopy()
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	now := metav1.NewMicroTime(l.now())
	if ptr.Deref(lease.Spec.HolderIdentity, "") != holder {
		lease.Spec.AcquireTime = &now
		lease.Spec.LeaseTransitions = new(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
	}
	lease.Spec.HolderIdentity = new(holder)
	lease.Spec.LeaseDurationSeconds = new(int32(l.t.lease / time.Second))
	lease.Spec.RenewTime = &now
	return lease
}

// renew extends this instance's hold, and records its timeline. It
// returns when the request started. When the Lease changed since this
// instance's last renewal without being taken (the operator asking for a
// switchover, a user's label, or a renewal of its own whose answer was
// lost on the way back), it renews the newer version: only a take or a
// hand-over, which count a transition, makes the Lease another's.
func (l *leases) renew(ctx context.Context, timeline int64) (time.Time, error) {
	if l.lease == nil || ptr.Deref(l.lease.Spec.HolderIdentity, "") != l.me {
		return time.Time{}, errNotHolder
	}
	start, err := l.take(ctx, timeline)
	if !errors.Is(err, errLostRace) {
		return start, err
	}
	mine := l.lease.Spec
	lease, gerr := l.api.getLease(ctx)
	if gerr != nil {
		return start, err
	}
	if ptr.Deref(lease.Spec.HolderIdentity, "") != l.me ||
		ptr.Deref(lease.Spec.LeaseTransitions, 0) != ptr.Deref(mine.LeaseTransitions, 0) {
		return start, err // taken, or handed over and back: lost
	}
	l.lease = lease
	return l.take(ctx, timeline)
}

// handOver gives the Lease to target, in a planned switchover, with where
// this primary's WAL ended, and how many pods of each pooler paused for
// it: only once this server has stopped.
func (l *leases) handOver(ctx context.Context, target string, end uint64, poolersPaused map[string]int) error {
	if l.lease == nil || ptr.Deref(l.lease.Spec.HolderIdentity, "") != l.me {
		return errNotHolder
	}
	lease := l.held(target)
	lease.Annotations[handoffAnnotation] = contract.FormatLSN(end)
	lease.Annotations[contract.AnnotationPoolersPaused] = contract.FormatPoolersPaused(poolersPaused)
	delete(lease.Annotations, contract.AnnotationSwitchoverTo)
	_, err := l.update(ctx, lease)
	return err
}

// newTerm ends the election of term, the Lease's version, if it still is
// that version: a write that changes only electionAnnotation, so that the
// Lease's version, the next term, is new. Who holds the Lease, its renewal
// time and so its expiry stay as they were.
func (l *leases) newTerm(ctx context.Context, term string) error {
	if l.lease == nil || l.lease.ResourceVersion != term {
		return errLostRace
	}
	lease := l.lease.DeepCopy()
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[electionAnnotation] = term
	_, err := l.update(ctx, lease)
	return err
}

// release gives the Lease up at once, so that another instance need not
// wait for it to expire: only after the server has stopped.
func (l *leases) release(ctx context.Context) error {
	if l.lease == nil || ptr.Deref(l.lease.Spec.HolderIdentity, "") != l.me {
		return nil
	}
	lease := l.lease.DeepCopy()
	lease.Spec.HolderIdentity = nil
	lease.Spec.RenewTime = nil
	_, err := l.update(ctx, lease)
	return err
}

func (l *leases) update(ctx context.Context, lease *coordinationv1.Lease) (time.Time, error) {
	start := l.now()
	updated, err := l.api.updateLease(ctx, lease)
	if err != nil {
		if apierrors.IsConflict(err) {
			return start, errLostRace
		}
		return start, err
	}
	l.record(updated)
	return start, nil
}

// parseFailsafeSet reads the failsafe set: nil when none is written, empty
// when the holder asks no one.
func parseFailsafeSet(value string, written bool) []string {
	if !written {
		return nil
	}
	set := []string{}
	for name := range strings.SplitSeq(value, ",") {
		if name = strings.TrimSpace(name); name != "" {
			set = append(set, name)
		}
	}
	return set
}

package instance

import (
	"context"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
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
//     earliest.
//   - So the primary stops acknowledging commits at t0 + 3L/5, 2L/5 before
//     anyone can take the Lease (2 s with the default L of 5 s). The margin
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
}

// timelineAnnotation on the Lease is the newest timeline any primary has
// run on, which each holder writes with its renewals. A candidate reserves
// every number up to it before it promotes (reserveTimelines), so that
// two instances never run distinct histories under one timeline number.
const timelineAnnotation = "database.example.com/timeline"

// leases takes, renews, releases and observes the primary Lease. It
// measures expiry from when it saw a renewal, on the local monotonic clock.
type leases struct {
	k      *kube
	t      timing
	now    func() time.Time
	lease  *coordinationv1.Lease
	seen   string    // holder and renewTime last seen
	seenAt time.Time // when they last changed, local clock
}

func newLeases(k *kube, t timing) *leases { return &leases{k: k, t: t, now: time.Now} }

// observe reads the Lease.
func (l *leases) observe(ctx context.Context) (leaseView, error) {
	ctx, cancel := context.WithTimeout(ctx, l.k.timeout)
	defer cancel()
	lease, err := l.k.leases.Get(ctx, l.k.c.LeaseName, metav1.GetOptions{})
	if err != nil {
		return leaseView{}, err
	}
	l.record(lease)
	return l.view(), nil
}

func (l *leases) record(lease *coordinationv1.Lease) {
	l.lease = lease
	var renewed time.Time
	if lease.Spec.RenewTime != nil {
		renewed = lease.Spec.RenewTime.Time
	}
	seen := ptr.Deref(lease.Spec.HolderIdentity, "") + "@" + renewed.Format(time.RFC3339Nano)
	if seen != l.seen {
		l.seen, l.seenAt = seen, l.now()
	}
}

func (l *leases) view() leaseView {
	spec := l.lease.Spec
	holder := ptr.Deref(spec.HolderIdentity, "")
	tli, _ := strconv.ParseInt(l.lease.Annotations[timelineAnnotation], 10, 64)
	return leaseView{
		holder:      holder,
		version:     l.lease.ResourceVersion,
		expired:     holder == "" || l.now().Sub(l.seenAt) >= l.t.lease,
		transitions: ptr.Deref(spec.LeaseTransitions, 0),
		timeline:    tli,
	}
}

// take makes this instance the holder, if the Lease is still the version
// it last read (an election's term): of several candidates, one wins, the
// others get a conflict. It returns when the request started, for the
// fence.
func (l *leases) take(ctx context.Context, timeline int64) (time.Time, error) {
	lease := l.lease.DeepCopy()
	if known, _ := strconv.ParseInt(lease.Annotations[timelineAnnotation], 10, 64); timeline > known {
		if lease.Annotations == nil {
			lease.Annotations = map[string]string{}
		}
		lease.Annotations[timelineAnnotation] = strconv.FormatInt(timeline, 10)
	}
	now := metav1.NewMicroTime(time.Now())
	if ptr.Deref(lease.Spec.HolderIdentity, "") != l.k.c.PodName {
		lease.Spec.AcquireTime = &now
		lease.Spec.LeaseTransitions = new(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
	}
	lease.Spec.HolderIdentity = new(l.k.c.PodName)
	lease.Spec.LeaseDurationSeconds = new(int32(l.t.lease / time.Second))
	lease.Spec.RenewTime = &now
	return l.update(ctx, lease)
}

// renew extends this instance's hold, and records its timeline. It
// returns when the request started.
func (l *leases) renew(ctx context.Context, timeline int64) (time.Time, error) {
	if l.lease == nil || ptr.Deref(l.lease.Spec.HolderIdentity, "") != l.k.c.PodName {
		return time.Time{}, errNotHolder
	}
	return l.take(ctx, timeline)
}

// release gives the Lease up at once, so that another instance need not
// wait for it to expire: only after the server has stopped.
func (l *leases) release(ctx context.Context) error {
	if l.lease == nil || ptr.Deref(l.lease.Spec.HolderIdentity, "") != l.k.c.PodName {
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
	ctx, cancel := context.WithTimeout(ctx, l.k.timeout)
	defer cancel()
	updated, err := l.k.leases.Update(ctx, lease, metav1.UpdateOptions{FieldManager: fieldManager})
	if err != nil {
		if apierrors.IsConflict(err) {
			return start, errLostRace
		}
		return start, err
	}
	l.record(updated)
	return start, nil
}

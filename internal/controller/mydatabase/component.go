package mydatabase

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// A component aligns one feature of a MyDatabase with its spec: the
// children that feature owns, and its own part of the observation the
// status is computed from (its fields of observation say which component
// sets them). It reads the pass's scope and never changes it.
//
// Components never hold one another nor call one another's methods. What
// one needs from another is a small typed result (result, below): components
// makes each one, hands its producer the *result to fill in, and each
// consumer an input to read, the producer earlier in the pass than every
// consumer (TestComponentWiring checks both). The results:
//
//	tlsResult         tlsCerts       → credentials, roles, caRotation: the CA clients verify the servers with; the CA and certificate Secrets as the pass left them
//	upgradeResult     majorUpgrade   → hibernation, servers, switchover: an upgrade is active; the MyDatabase the StatefulSet is built from
//	hibernationResult hibernation    → servers, switchover: the servers are stopped; the switchover it asks for
//	serversResult     servers        → podCreation, rollout, managerUpdate, replicationPassword: the applied StatefulSet
//	switchoverResult  switchover     → rollout, managerUpdate: no switchover runs, and one may start
//	rolloutResult     rollout        → managerUpdate: the rollout asked for a switchover
//
// Adding a feature is adding a component: a type with its builders in
// internal/specs, its reconcile, its part of the observation, and its
// place in components (docs/architecture.md walks through one).
type component interface {
	// reconcile aligns the feature, recording in out what the status must
	// say (a blocker, its part of the status, a wish to look again soon).
	// An error ends the pass; classify turns it into the status.
	reconcile(ctx context.Context, out *observation) error
}

// scope is what every component of a pass reads: the MyDatabase, and what
// the pass found of its servers before any component ran.
type scope struct {
	db *databasev1alpha1.MyDatabase
	// sts is the live StatefulSet, nil when there is none yet.
	sts *appsv1.StatefulSet
	// lease is the primary Lease, nil when there is none.
	lease *coordinationv1.Lease
	// pods are the MyDatabase's pods, with their instance reports, in
	// ordinal order.
	pods []corev1.Pod
	// mode is what the MyDatabase's modes are for this pass (mode.go).
	mode mode
}

// holder is the holder of the primary Lease, "" when it has none.
func (s *scope) holder() string {
	if s.lease == nil {
		return ""
	}
	return ptr.Deref(s.lease.Spec.HolderIdentity, "")
}

// primaryPod is the pod that runs the primary: the Lease's holder, else
// the last one reported (specs.PrimaryPod). Without a holder (a new
// MyDatabase, pods that run no instance manager, or a Lease between
// holders) the last known primary stays.
func (s *scope) primaryPod() string {
	return cmp.Or(s.holder(), specs.PrimaryPod(s.db))
}

// components are the features of a MyDatabase, in the order a pass aligns
// them. The prerequisites come first: when one of them is blocked (a
// Secret the data needs is gone, a class or a store's credentials are
// missing) the pass writes no other child: pods must never start against a
// password the data does not know, nor claim volumes no class can
// provision.
func (k *kit) components(s *scope) (prerequisites, features []component) {
	tls, upgrade, hibernated := &result[tlsResult]{}, &result[upgradeResult]{}, &result[hibernationResult]{}
	applied, switchedOver, rolled := &result[serversResult]{}, &result[switchoverResult]{}, &result[rolloutResult]{}
	return []component{
			&storageClass{kit: k, scope: s},
			&objectStores{kit: k, scope: s},
			&tlsCerts{kit: k, scope: s, out: tls},
			&credentials{kit: k, scope: s, tls: tls.input()},
		}, []component{
			&serverConfig{kit: k, scope: s},
			&services{kit: k, scope: s},
			&instanceAccess{kit: k, scope: s},
			&majorUpgrade{kit: k, scope: s, out: upgrade},
			&hibernation{kit: k, scope: s, upgrade: upgrade.input(), out: hibernated},
			&servers{kit: k, scope: s, upgrade: upgrade.input(), hibernation: hibernated.input(), out: applied},
			&disruptionBudget{kit: k, scope: s},
			&networkPolicy{kit: k, scope: s},
			&podMonitor{kit: k, scope: s},
			&podRoles{kit: k, scope: s},
			&podCreation{kit: k, scope: s, servers: applied.input()},
			&switchover{kit: k, scope: s, upgrade: upgrade.input(), hibernation: hibernated.input(), out: switchedOver},
			&rollout{kit: k, scope: s, servers: applied.input(), switchover: switchedOver.input(), out: rolled},
			&managerUpdate{kit: k, scope: s, servers: applied.input(), switchover: switchedOver.input(), rollout: rolled.input()},
			&replicationPassword{kit: k, scope: s, servers: applied.input()},
			&retainedVolumes{kit: k, scope: s},
			&rotation{kit: k, scope: s},
			&roles{kit: k, scope: s, tls: tls.input()},
			&caRotation{kit: k, scope: s, tls: tls.input()},
			&schedule{kit: k, scope: s},
			&verifySchedule{kit: k, scope: s},
			&replica{kit: k, scope: s},
		}
}

// A result is what one component of a pass hands over to the components
// after it. Its producer is given the *result and calls produce first
// thing in its reconcile, which marks it produced and returns the value to
// fill in as the reconcile goes; each consumer is given an input, which
// reads it. Reading a result whose producer has not run is a mistake in
// the order of components and panics (TestComponentWiring finds it
// without a pass).
type result[T any] struct {
	value    T
	produced bool
}

// produce marks the result produced and returns its value to fill in.
func (r *result[T]) produce() *T {
	r.produced = true
	return &r.value
}

// input is the read-only side of r, for a consumer.
func (r *result[T]) input() input[T] { return input[T]{r} }

// input is a consumer's read-only handle on a result.
type input[T any] struct{ r *result[T] }

// get is the result as its producer left it.
func (in input[T]) get() T {
	if in.r == nil || !in.r.produced {
		var zero T
		panic(fmt.Sprintf("%T read before its producer ran: see the order of components", zero))
	}
	return in.r.value
}

// observe reads the scope of a pass: the StatefulSet, the primary Lease
// and the pods, from the cache.
func (k *kit) observe(ctx context.Context, db *databasev1alpha1.MyDatabase) (*scope, error) {
	s := &scope{db: db, mode: modeOf(db)}
	sts := &appsv1.StatefulSet{}
	switch err := k.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: specs.StatefulSetName(db)}, sts); {
	case err == nil && metav1.IsControlledBy(sts, db):
		s.sts = sts
	case err != nil && !apierrors.IsNotFound(err):
		return s, objectError("get", sts, specs.StatefulSetName(db), err)
	}
	lease := &coordinationv1.Lease{}
	switch err := k.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: specs.LeaseName(db)}, lease); {
	case err == nil && metav1.IsControlledBy(lease, db):
		s.lease = lease
	case err != nil && !apierrors.IsNotFound(err):
		return s, objectError("get", lease, specs.LeaseName(db), err)
	}
	pods, err := k.serverPods(ctx, db)
	if err != nil {
		return s, err
	}
	// A list comes in no particular order; the rollout and the status go
	// by ordinal. The names share their prefix, so the shorter is the
	// lower ("db-9" before "db-10").
	slices.SortFunc(pods, func(a, b corev1.Pod) int {
		return cmp.Or(cmp.Compare(len(a.Name), len(b.Name)), cmp.Compare(a.Name, b.Name))
	})
	s.pods = pods
	if !k.poolers {
		return s, nil
	}
	// A namespace holds few poolers: a list of them all costs less than
	// an index every pooler would keep.
	poolers := &databasev1alpha1.MyDatabasePoolerList{}
	if err := k.List(ctx, poolers, client.InNamespace(db.Namespace)); err != nil {
		return s, objectError("list", &databasev1alpha1.MyDatabasePooler{}, "", err)
	}
	s.mode.pooled = slices.ContainsFunc(poolers.Items, func(p databasev1alpha1.MyDatabasePooler) bool {
		return p.Spec.Database == db.Name && p.DeletionTimestamp.IsZero()
	})
	return s, nil
}

// align observes db, then runs its components in their order, and fills
// obs with what the pass found and did. A paused MyDatabase is only
// observed.
func (k *kit) align(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation) error {
	defer k.recordCreated(db, obs)
	s, err := k.observe(ctx, db)
	obs.sts = s.sts
	if err != nil || s.mode.paused {
		return err
	}
	obs.pods, obs.primary, obs.pooled = s.pods, s.holder(), s.mode.pooled
	prerequisites, features := k.components(s)
	for _, c := range prerequisites {
		if err := c.reconcile(ctx, obs); err != nil || obs.blocked() {
			return err
		}
	}
	for _, c := range features {
		if err := c.reconcile(ctx, obs); err != nil {
			return err
		}
	}
	return nil
}

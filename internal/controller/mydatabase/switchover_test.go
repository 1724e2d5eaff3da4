package mydatabase

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
)

// instancePod plays the StatefulSet controller and the instance manager:
// a ready pod of revision with the report of a ready server in role, at
// lsn.
func instancePod(t *testing.T, db *databasev1alpha1.MyDatabase, name, revision, role, lsn string) {
	t.Helper()
	labels := specs.Labels(db, specs.ComponentDatabase)
	labels[appsv1.ControllerRevisionHashLabelKey] = revision
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: name, Labels: labels, Annotations: map[string]string{
			contract.AnnotationInstance: fmt.Sprintf(`{"role":%q,"ready":true,"timeline":1,"lsn":%q,"replayed":%q,"time":"2026-01-02T03:04:05Z"}`, role, lsn, lsn)}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "postgres:17"}}},
	}
	// Its claims, as the StatefulSet controller mounts them.
	for _, v := range specs.Volumes(db) {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.Name + "-" + name}}})
	}
	// AlreadyExists: client-go retries a create the API server answered
	// with Retry-After (a loaded machine's timeout), which may have
	// created the pod the first time.
	if err := k8s.Create(context.Background(), pod); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// The operator labels the pod meanwhile: read it again on a conflict.
	eventually(t, name+" ready", func() error {
		if err := get(db.Namespace, name, pod); err != nil {
			return err
		}
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		return k8s.Status().Update(context.Background(), pod)
	})
}

// reportRole plays an instance manager: pod name reports a ready server
// in role, at lsn.
func reportRole(t *testing.T, db *databasev1alpha1.MyDatabase, name, role, lsn string) {
	t.Helper()
	eventually(t, name+" reporting "+role, func() error {
		pod := &corev1.Pod{}
		if err := get(db.Namespace, name, pod); err != nil {
			return err
		}
		pod.Annotations[contract.AnnotationInstance] = fmt.Sprintf(
			`{"role":%q,"ready":true,"timeline":2,"lsn":%q,"replayed":%q,"time":"2026-01-02T03:04:06Z"}`, role, lsn, lsn)
		return k8s.Update(context.Background(), pod)
	})
}

// holdLease plays the instance managers: holder takes the Lease, and the
// switchover request, if any, is taken off it.
func holdLease(t *testing.T, db *databasev1alpha1.MyDatabase, holder string) {
	t.Helper()
	handLease(t, db, holder, nil)
}

// handLease is holdLease with the poolers' pods that paused, by pooler ID,
// as a primary that hands the Lease over writes them.
func handLease(t *testing.T, db *databasev1alpha1.MyDatabase, holder string, poolersPaused map[string]int) {
	t.Helper()
	eventually(t, "the Lease held by "+holder, func() error {
		lease := &coordinationv1.Lease{}
		if err := get(db.Namespace, specs.LeaseName(db), lease); err != nil {
			return err
		}
		lease.Spec.HolderIdentity = new(holder)
		delete(lease.Annotations, contract.AnnotationSwitchoverTo)
		if poolersPaused != nil {
			lease.Annotations[contract.AnnotationPoolersPaused] = contract.FormatPoolersPaused(poolersPaused)
		}
		return k8s.Update(context.Background(), lease)
	})
}

// switchoverAsked waits until the Lease asks for a switchover to target.
func switchoverAsked(t *testing.T, db *databasev1alpha1.MyDatabase, target string) {
	t.Helper()
	eventually(t, "the Lease to ask for a switchover to "+target, func() error {
		lease := &coordinationv1.Lease{}
		if err := get(db.Namespace, specs.LeaseName(db), lease); err != nil {
			return err
		}
		if got := lease.Annotations[contract.AnnotationSwitchoverTo]; got != target {
			return fmt.Errorf("the Lease asks for %q", got)
		}
		return nil
	})
}

// TestRequestedSwitchover: a new spec.switchover.requestedAt asks the
// primary, through the Lease, to hand over; status.targetPrimary and
// status.switchover follow until the target holds the Lease. A request
// for an instance that cannot take over fails at once, with the reason.
func TestRequestedSwitchover(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "sw", func(db *databasev1alpha1.MyDatabase) { db.Spec.Replicas = ptr.To[int32](3) }))
	eventually(t, "the StatefulSet", exists(ns, "sw", &appsv1.StatefulSet{}))
	instancePod(t, db, "sw-0", "r1", databasev1alpha1.RolePrimary, "0/5000100")
	instancePod(t, db, "sw-1", "r1", databasev1alpha1.RoleReplica, "0/5000000")
	instancePod(t, db, "sw-2", "r1", databasev1alpha1.RoleReplica, "0/5000080")
	holdLease(t, db, "sw-0")

	asked := metav1.NewTime(time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC))
	update(t, db, func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Switchover = &databasev1alpha1.SwitchoverSpec{RequestedAt: asked}
	})
	// No target named: the replica with the most WAL.
	switchoverAsked(t, db, "sw-2")
	waitFor(t, db, "a switchover in progress", func(db *databasev1alpha1.MyDatabase) error {
		sw := db.Status.Switchover
		if db.Status.TargetPrimary != "sw-2" || sw == nil || sw.Phase != databasev1alpha1.SwitchoverRunning || sw.From != "sw-0" {
			return fmt.Errorf("targetPrimary %q, switchover %+v", db.Status.TargetPrimary, sw)
		}
		return nil
	})
	// The target holds the Lease before it has promoted: not done yet. The
	// old primary counted the paused pods of a pooler of this database,
	// and 1 of a pooler it cannot name (deleted, or older).
	pooler := &databasev1alpha1.MyDatabasePooler{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sw-pool"},
		Spec: databasev1alpha1.MyDatabasePoolerSpec{Database: "sw", PoolMode: databasev1alpha1.PoolModeTransaction}}
	if err := k8s.Create(context.Background(), pooler); err != nil {
		t.Fatal(err)
	}
	handLease(t, db, "sw-2", map[string]int{contract.PoolerID(string(pooler.UID)): 2, "0f0f0f0f": 1})
	waitFor(t, db, "the target promoting", func(db *databasev1alpha1.MyDatabase) error {
		sw := db.Status.Switchover
		if db.Status.CurrentPrimary != "sw-2" || sw == nil || sw.Phase != databasev1alpha1.SwitchoverRunning ||
			sw.Message != "sw-2 holds the primary Lease and is being promoted" {
			return fmt.Errorf("currentPrimary %q, switchover %+v", db.Status.CurrentPrimary, sw)
		}
		return nil
	})
	reportRole(t, db, "sw-0", databasev1alpha1.RoleReplica, "0/5000100")
	reportRole(t, db, "sw-2", databasev1alpha1.RolePrimary, "0/5000100")
	waitFor(t, db, "the switchover done", func(db *databasev1alpha1.MyDatabase) error {
		sw := db.Status.Switchover
		if db.Status.TargetPrimary != "" || db.Status.CurrentPrimary != "sw-2" || sw == nil ||
			sw.Phase != databasev1alpha1.SwitchoverSucceeded || sw.RequestedAt == nil || !sw.RequestedAt.Equal(&asked) ||
			!slices.Equal(sw.Poolers, []databasev1alpha1.SwitchoverPooler{{Name: "sw-pool", PausedPods: 2}}) ||
			!strings.HasSuffix(sw.Message, "(PgBouncer pods paused: 2 of sw-pool, 1 more)") {
			return fmt.Errorf("targetPrimary %q, currentPrimary %q, switchover %+v", db.Status.TargetPrimary, db.Status.CurrentPrimary, sw)
		}
		return nil
	})
	eventually(t, "a SwitchedOver event", eventWith(ns, "SwitchedOver", "from sw-0 to sw-2; the poolers held their clients' transactions through it (PgBouncer pods paused: 2 of sw-pool, 1 more)"))

	// A request for a server that is not a ready replica: refused, and the
	// Lease asks nothing.
	again := metav1.NewTime(asked.Add(time.Minute))
	update(t, db, func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Switchover = &databasev1alpha1.SwitchoverSpec{To: "sw-7", RequestedAt: again}
	})
	waitFor(t, db, "the request refused", func(db *databasev1alpha1.MyDatabase) error {
		sw := db.Status.Switchover
		if sw == nil || sw.Phase != databasev1alpha1.SwitchoverFailed || !strings.Contains(sw.Message, "sw-7 is not an instance") ||
			!sw.RequestedAt.Equal(&again) || db.Status.TargetPrimary != "" {
			return fmt.Errorf("switchover %+v", sw)
		}
		return nil
	})
	eventually(t, "a SwitchoverFailed event", eventWith(ns, "SwitchoverFailed", "sw-7"))
	switchoverAsked(t, db, "")

	// A failover elects another instance while a switchover runs: the
	// switchover is withdrawn, not carried out from the new primary.
	third := metav1.NewTime(asked.Add(2 * time.Minute))
	update(t, db, func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Switchover = &databasev1alpha1.SwitchoverSpec{To: "sw-1", RequestedAt: third}
	})
	switchoverAsked(t, db, "sw-1")
	holdLease(t, db, "sw-0") // elected: its take drops the request
	reportRole(t, db, "sw-2", databasev1alpha1.RoleReplica, "0/5000100")
	reportRole(t, db, "sw-0", databasev1alpha1.RolePrimary, "0/5000200")
	waitFor(t, db, "the switchover withdrawn after the failover", func(db *databasev1alpha1.MyDatabase) error {
		sw := db.Status.Switchover
		if sw == nil || sw.Phase != databasev1alpha1.SwitchoverFailed || !strings.Contains(sw.Message, "a failover made sw-0 the primary") ||
			db.Status.TargetPrimary != "" {
			return fmt.Errorf("targetPrimary %q, switchover %+v", db.Status.TargetPrimary, sw)
		}
		return nil
	})
	switchoverAsked(t, db, "")
}

// countRevisions plays the StatefulSet controller of three ready pods
// with a new revision r2, which updated of them run, once check passes.
func countRevisions(t *testing.T, ns, name string, updated int32, check func(*appsv1.StatefulSet) error) {
	t.Helper()
	eventually(t, "the StatefulSet's status", func() error {
		sts := &appsv1.StatefulSet{}
		if err := get(ns, name, sts); err != nil {
			return err
		}
		if err := check(sts); err != nil {
			return err
		}
		sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, Replicas: 3, ReadyReplicas: 3,
			CurrentRevision: "r1", UpdateRevision: "r2", CurrentReplicas: 3 - updated, UpdatedReplicas: updated}
		return k8s.Status().Update(context.Background(), sts)
	})
}

// TestRollingUpdateForANewVolumeGoesInOrdinalOrder: pods that lack the
// WAL volume the StatefulSet gained are replaced lowest ordinal first (the
// StatefulSet controller stops at the first such pod), the primary at
// ordinal 0 after a switchover to the highest ordinal, which goes last.
func TestRollingUpdateForANewVolumeGoesInOrdinalOrder(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "vol", func(db *databasev1alpha1.MyDatabase) { db.Spec.Replicas = ptr.To[int32](3) }))
	old := &appsv1.StatefulSet{}
	eventually(t, "the StatefulSet", exists(ns, "vol", old))
	for i, role := range []string{databasev1alpha1.RolePrimary, databasev1alpha1.RoleReplica, databasev1alpha1.RoleReplica} {
		instancePod(t, db, fmt.Sprintf("vol-%d", i), "r1", role, "0/5000100")
	}
	holdLease(t, db, "vol-0")
	update(t, db, func(db *databasev1alpha1.MyDatabase) { db.Spec.WALStorage = &databasev1alpha1.StorageSpec{} })
	collectStatefulSet(t, old)
	updated := int32(0)
	counted := func() {
		t.Helper()
		countRevisions(t, ns, "vol", updated, func(sts *appsv1.StatefulSet) error {
			if len(sts.Spec.VolumeClaimTemplates) != 2 {
				return fmt.Errorf("%d volumeClaimTemplates, want data and WAL", len(sts.Spec.VolumeClaimTemplates))
			}
			return nil
		})
	}
	counted()
	switchoverAsked(t, db, "vol-2")
	for _, name := range []string{"vol-1", "vol-2"} {
		pod := &corev1.Pod{}
		if err := get(ns, name, pod); err != nil || !pod.DeletionTimestamp.IsZero() {
			t.Fatalf("%s was deleted before the primary, vol-0 (err %v): the StatefulSet controller would never bring it back", name, err)
		}
	}
	holdLease(t, db, "vol-2")
	reportRole(t, db, "vol-2", databasev1alpha1.RolePrimary, "0/5000100")
	eventually(t, "vol-0 deleted first", gone(ns, "vol-0", &corev1.Pod{}))
	instancePod(t, db, "vol-0", "r2", databasev1alpha1.RoleReplica, "0/5000100")
	updated++
	counted()
	eventually(t, "then vol-1", gone(ns, "vol-1", &corev1.Pod{}))
	if pod := (&corev1.Pod{}); get(ns, "vol-2", pod) != nil || !pod.DeletionTimestamp.IsZero() {
		t.Fatal("vol-2, the primary, was deleted with vol-1")
	}
}

// TestRollingUpdateSwitchesOverOnce: a new template restarts the replicas
// first, one at a time, then switches over to an updated replica, and
// only then restarts the old primary: the primary is never restarted.
func TestRollingUpdateSwitchesOverOnce(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "roll", func(db *databasev1alpha1.MyDatabase) { db.Spec.Replicas = ptr.To[int32](3) }))
	eventually(t, "the StatefulSet", exists(ns, "roll", &appsv1.StatefulSet{}))
	instancePod(t, db, "roll-0", "r1", databasev1alpha1.RolePrimary, "0/5000100")
	instancePod(t, db, "roll-1", "r1", databasev1alpha1.RoleReplica, "0/5000100")
	instancePod(t, db, "roll-2", "r1", databasev1alpha1.RoleReplica, "0/5000100")
	holdLease(t, db, "roll-0")
	// The StatefulSet controller has a new revision, which it counts the
	// pods of as they come back ready.
	updated := int32(0)
	counted := func() {
		t.Helper()
		countRevisions(t, ns, "roll", updated, func(*appsv1.StatefulSet) error { return nil })
	}
	counted()
	replaced := func(name string) {
		t.Helper()
		eventually(t, name+" deleted", gone(ns, name, &corev1.Pod{}))
		instancePod(t, db, name, "r2", databasev1alpha1.RoleReplica, "0/5000100")
		updated++
		counted()
	}
	replaced("roll-2")
	replaced("roll-1")
	switchoverAsked(t, db, "roll-1")
	primary := &corev1.Pod{}
	if err := get(ns, "roll-0", primary); err != nil || !primary.DeletionTimestamp.IsZero() {
		t.Fatalf("the primary was deleted before the switchover (err %v)", err)
	}
	// The old primary is restarted only once the new one runs.
	holdLease(t, db, "roll-1")
	waitFor(t, db, "the target promoting", func(db *databasev1alpha1.MyDatabase) error {
		if sw := db.Status.Switchover; sw == nil || sw.Phase != databasev1alpha1.SwitchoverRunning || db.Status.CurrentPrimary != "roll-1" {
			return fmt.Errorf("currentPrimary %q, switchover %+v", db.Status.CurrentPrimary, sw)
		}
		return nil
	})
	if err := get(ns, "roll-0", primary); err != nil || !primary.DeletionTimestamp.IsZero() {
		t.Fatalf("the old primary was deleted before the new one reported as the primary (err %v)", err)
	}
	reportRole(t, db, "roll-1", databasev1alpha1.RolePrimary, "0/5000100")
	eventually(t, "the old primary deleted once a replica", gone(ns, "roll-0", &corev1.Pod{}))
	waitFor(t, db, "the switchover reported", func(db *databasev1alpha1.MyDatabase) error {
		sw := db.Status.Switchover
		if sw == nil || sw.Reason != databasev1alpha1.SwitchoverRollingUpdate || sw.Phase != databasev1alpha1.SwitchoverSucceeded {
			return fmt.Errorf("switchover %+v", sw)
		}
		return nil
	})
}

package mydatabasebackup

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/testenv"
)

func TestChoose(t *testing.T) {
	pod := func(name, role string, ready bool, replayed string, mutate ...func(*corev1.Pod, *contract.Report)) corev1.Pod {
		rep := contract.Report{Role: role, Ready: ready, Replayed: replayed, Time: testNow.Add(-5 * time.Second)}
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{databasev1alpha1.LabelRole: role,
			appsv1.ControllerRevisionHashLabelKey: "db-2"}}}
		for _, m := range mutate {
			m(&p, &rep)
		}
		if p.Annotations == nil {
			p.Annotations = map[string]string{contract.AnnotationInstance: rep.String()}
		}
		return p
	}
	stale := func(_ *corev1.Pod, r *contract.Report) { r.Time = testNow.Add(-reportFresh) }
	deleting := func(p *corev1.Pod, _ *contract.Report) { p.DeletionTimestamp = &metav1.Time{Time: testNow} }
	unlabelled := func(p *corev1.Pod, _ *contract.Report) { delete(p.Labels, databasev1alpha1.LabelRole) }
	outdated := func(p *corev1.Pod, _ *contract.Report) { p.Labels[appsv1.ControllerRevisionHashLabelKey] = "db-1" }
	garbled := func(p *corev1.Pod, _ *contract.Report) {
		p.Annotations = map[string]string{contract.AnnotationInstance: "{"}
	}
	primary := pod("db-0", databasev1alpha1.RolePrimary, true, "")
	const (
		prefer = databasev1alpha1.BackupTargetPreferReplica
		onPrim = databasev1alpha1.BackupTargetPrimary
	)
	for name, tc := range map[string]struct {
		pods   []corev1.Pod
		target databasev1alpha1.BackupTarget
		want   string // the pod's name, "" for none
		why    string
	}{
		"a ready replica by default": {[]corev1.Pod{primary, pod("db-1", databasev1alpha1.RoleReplica, true, "0/5000100")},
			prefer, "db-1", "a ready replica"},
		"the replica that replayed most": {[]corev1.Pod{primary, pod("db-1", databasev1alpha1.RoleReplica, true, "0/5000000"),
			pod("db-2", databasev1alpha1.RoleReplica, true, "0/5000100"), pod("db-3", databasev1alpha1.RoleReplica, true, "0/4FFFFFF")},
			prefer, "db-2", "a ready replica"},
		"the primary when asked": {[]corev1.Pod{pod("db-1", databasev1alpha1.RoleReplica, true, "0/5000100"), primary},
			onPrim, "db-0", "the primary"},
		"the primary when no replica is ready": {[]corev1.Pod{primary, pod("db-1", databasev1alpha1.RoleReplica, false, "0/5000100")},
			prefer, "db-0", "the primary: no replica is ready"},
		"not a replica whose instance manager stopped reporting": {[]corev1.Pod{primary,
			pod("db-1", databasev1alpha1.RoleReplica, true, "0/5000100", stale)}, prefer, "db-0", "the primary: no replica is ready"},
		"not a replica being deleted": {[]corev1.Pod{primary, pod("db-1", databasev1alpha1.RoleReplica, true, "0/5000100", deleting)},
			prefer, "db-0", "the primary: no replica is ready"},
		"not a replica whose replay position does not parse": {[]corev1.Pod{primary,
			pod("db-1", databasev1alpha1.RoleReplica, true, "nonsense")}, prefer, "db-0", "the primary: no replica is ready"},
		"not a primary the operator has not labelled (not the Lease's holder)": {[]corev1.Pod{
			pod("db-0", databasev1alpha1.RolePrimary, true, "", unlabelled)}, prefer, "",
			"waiting for a ready primary or replica to take the backup: no instance reports one"},
		"not a pod whose report does not parse": {[]corev1.Pod{pod("db-0", databasev1alpha1.RolePrimary, true, "", garbled)},
			onPrim, "", "waiting for a ready primary to take the backup: no instance reports one"},
		"no one, for Primary": {[]corev1.Pod{pod("db-0", databasev1alpha1.RolePrimary, false, ""),
			pod("db-1", databasev1alpha1.RoleReplica, true, "0/5000100")}, onPrim, "",
			"waiting for a ready primary to take the backup: no instance reports one"},
		"no pod at all": {nil, prefer, "", "waiting for a ready primary or replica to take the backup: no instance reports one"},
		"not a replica the rollout is still to update": {[]corev1.Pod{primary,
			pod("db-1", databasev1alpha1.RoleReplica, true, "0/5000100", outdated)}, prefer, "db-0", "the primary: no replica is ready"},
		"no one while the rollout is still to update them": {[]corev1.Pod{pod("db-0", databasev1alpha1.RolePrimary, true, "", outdated),
			pod("db-1", databasev1alpha1.RoleReplica, true, "0/5000100", outdated)}, prefer, "",
			"waiting for a ready primary or replica to take the backup: ready instances the rollout is still to update to the current spec: 2"},
	} {
		got, why := choose(tc.pods, "db-2", tc.target, testNow)
		name0 := ""
		if got != nil {
			name0 = got.Name
		}
		if name0 != tc.want || why != tc.why {
			t.Errorf("%s: chose %q (%s), want %q (%s)", name, name0, why, tc.want, tc.why)
		}
	}
}

// TestFinishedWithoutConditions: a backup an operator without conditions
// finished gets them in one write, and nothing else about it changes; it
// gives no second event, and the next pass writes nothing.
func TestFinishedWithoutConditions(t *testing.T) {
	stopped := metav1.NewTime(testNow.Add(-time.Hour))
	for _, tc := range []struct {
		status    databasev1alpha1.MyDatabaseBackupStatus
		condition string // True
	}{
		{databasev1alpha1.MyDatabaseBackupStatus{Phase: databasev1alpha1.BackupCompleted, Instance: "db-1", InstanceUID: "u1",
			BackupID: "20260102T020405Z", Size: 42, StoppedAt: &stopped}, databasev1alpha1.ConditionReady},
		{databasev1alpha1.MyDatabaseBackupStatus{Phase: databasev1alpha1.BackupFailed, Message: "pg_basebackup: no space left",
			StoppedAt: &stopped}, databasev1alpha1.ConditionStalled},
	} {
		t.Run(string(tc.status.Phase), func(t *testing.T) {
			// No MyDatabase: a pass that moved the backup on would fail it.
			old := &databasev1alpha1.MyDatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "b", Generation: 1},
				Spec: databasev1alpha1.MyDatabaseBackupSpec{Database: "db"}, Status: tc.status}
			c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(old).WithStatusSubresource(old).Build()
			recorder := events.NewFakeRecorder(10)
			r := &Reconciler{Client: c, APIReader: c, Recorder: recorder, Clock: clocktesting.NewFakePassiveClock(testNow)}
			pass := func() *databasev1alpha1.MyDatabaseBackup {
				t.Helper()
				if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(old)}); err != nil {
					t.Fatal(err)
				}
				b := &databasev1alpha1.MyDatabaseBackup{}
				if err := c.Get(context.Background(), client.ObjectKeyFromObject(old), b); err != nil {
					t.Fatal(err)
				}
				return b
			}
			b := pass()
			if !meta.IsStatusConditionTrue(b.Status.Conditions, tc.condition) || b.Status.ObservedGeneration != 1 {
				t.Errorf("conditions %v at observedGeneration %d, want %s True at 1", conditionsOf(b), b.Status.ObservedGeneration, tc.condition)
			}
			kept := b.Status.DeepCopy()
			kept.Conditions, kept.ObservedGeneration = nil, 0
			if !equality.Semantic.DeepEqual(*kept, tc.status) {
				t.Errorf("the status changed beyond its conditions: %+v, was %+v", *kept, tc.status)
			}
			if again := pass(); again.ResourceVersion != b.ResourceVersion {
				t.Errorf("the next pass wrote again: %+v", again.Status)
			}
			if len(recorder.Events) != 0 {
				t.Errorf("an event for a backup finished before: %s", <-recorder.Events)
			}
		})
	}
}

// firstFinished runs start and returns the first version of backup name
// that the API server shows finished: the one written by the pass that
// finished it.
func firstFinished(t *testing.T, ns, name string, start func()) *databasev1alpha1.MyDatabaseBackup {
	t.Helper()
	wc, err := client.NewWithWatch(testConfig, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := wc.Watch(ctx, &databasev1alpha1.MyDatabaseBackupList{}, client.InNamespace(ns),
		client.MatchingFields{"metadata.name": name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	start()
	for ev := range w.ResultChan() {
		if b, ok := ev.Object.(*databasev1alpha1.MyDatabaseBackup); ok && ev.Type != watch.Deleted && b.Status.Finished() {
			return b
		}
	}
	t.Fatalf("%s did not finish within 30 s", name)
	return nil
}

// finishedAs checks the backup as the write that finished it left it: the
// final conditions (sorted) at its generation, as kstatus reads them.
func finishedAs(t *testing.T, b *databasev1alpha1.MyDatabaseBackup, want status.Status, conditions ...string) {
	t.Helper()
	if got := conditionsOf(b); !slices.Equal(got, conditions) {
		t.Errorf("the write that finished %s left the conditions %v, want %v", b.Name, got, conditions)
	}
	if b.Status.ObservedGeneration != b.Generation || b.Generation == 0 {
		t.Errorf("observedGeneration %d, generation %d", b.Status.ObservedGeneration, b.Generation)
	}
	if s := kstatusOf(t, b); s != want {
		t.Errorf("kstatus %s, want %s", s, want)
	}
}

// TestCacheBehindTheAPIServer: a MyDatabase created, or given
// spec.backup, a moment before its backup may not be in the cache yet (one
// `kubectl apply` of both): the backup waits for an instance instead of
// failing for good on what the cache says. Only the API server's answer
// fails it.
func TestCacheBehindTheAPIServer(t *testing.T) {
	backedUp := testenv.NewDatabase("shop", "db")
	withBackup(backedUp)
	for name, tc := range map[string]struct {
		cached, live *databasev1alpha1.MyDatabase // nil: not there
		want         string                       // the message the pass leaves
	}{
		"created a moment before":           {nil, backedUp, `waiting for MyDatabase "db"'s StatefulSet`},
		"given spec.backup a moment before": {testenv.NewDatabase("shop", "db"), backedUp, `waiting for MyDatabase "db"'s StatefulSet`},
		"gone from the API server too":      {nil, nil, `there is no MyDatabase "db"`},
		"without spec.backup in both":       {testenv.NewDatabase("shop", "db"), testenv.NewDatabase("shop", "db"), "has no spec.backup"},
	} {
		t.Run(name, func(t *testing.T) {
			b := &databasev1alpha1.MyDatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "b", Generation: 1},
				Spec: databasev1alpha1.MyDatabaseBackupSpec{Database: "db"}}
			objects := func(db *databasev1alpha1.MyDatabase) client.Client {
				o := []client.Object{b.DeepCopy()}
				if db != nil {
					o = append(o, db.DeepCopy())
				}
				return fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(o...).WithStatusSubresource(b).Build()
			}
			cache := objects(tc.cached)
			r := &Reconciler{Client: cache, APIReader: objects(tc.live), Recorder: events.NewFakeRecorder(10),
				Clock: clocktesting.NewFakePassiveClock(testNow)}
			if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)}); err != nil {
				t.Fatal(err)
			}
			got := &databasev1alpha1.MyDatabaseBackup{}
			if err := cache.Get(context.Background(), client.ObjectKeyFromObject(b), got); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(got.Status.Message, tc.want) {
				t.Errorf("phase %s, message %q, want it to say %q", got.Status.Phase, got.Status.Message, tc.want)
			}
			if failed := got.Status.Phase == databasev1alpha1.BackupFailed; failed != (tc.live == nil || tc.live.Spec.Backup == nil) {
				t.Errorf("phase %s: want Failed exactly when the API server has no MyDatabase with spec.backup", got.Status.Phase)
			}
		})
	}
}

// TestMissingDatabaseStalls: a backup of a MyDatabase that does not exist
// fails, and the write that fails it makes it Stalled with the reason.
func TestMissingDatabaseStalls(t *testing.T) {
	ns := namespace(t)
	got := firstFinished(t, ns, "orphan", func() { backupObject(t, ns, "orphan", "nowhere", "") })
	if err := failedWith(`there is no MyDatabase "nowhere"`)(got.Status); err != nil {
		t.Error(err)
	}
	finishedAs(t, got, status.FailedStatus, "Ready=False/BackupFailed", "Stalled=True/BackupFailed")
	want := got.Status.Message + "; a failed backup is not retried: create a new MyDatabaseBackup once the cause is fixed"
	if stalled := meta.FindStatusCondition(got.Status.Conditions, databasev1alpha1.ConditionStalled); stalled == nil || stalled.Message != want {
		t.Errorf("Stalled %+v, want the message %q", stalled, want)
	}
}

// TestCompletedIsReady: the write that copies an instance's Completed
// report makes the backup Ready, at its generation, with neither
// Reconciling nor Stalled.
func TestCompletedIsReady(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "db", withBackup))
	instancePod(t, db, "db-0", databasev1alpha1.RolePrimary, "0/5000100")
	b := backupObject(t, ns, "b", "db", databasev1alpha1.BackupTargetPrimary)
	askedOf(t, b, "db-0")
	started := testNow.Add(-time.Minute)
	got := firstFinished(t, ns, "b", func() {
		publishReport(t, ns, "db-0", contract.Report{Role: databasev1alpha1.RolePrimary, Ready: true, Time: testNow,
			Backup: &contract.BackupRun{Name: "b", Phase: "Completed", Started: &started, Stopped: &testNow,
				ID: "20260102T030305Z", Size: 2048, Timeline: 1, BeginLSN: "0/6000028", EndLSN: "0/6000138"}})
	})
	if got.Status.Phase != databasev1alpha1.BackupCompleted {
		t.Fatalf("phase %s: %s", got.Status.Phase, got.Status.Message)
	}
	finishedAs(t, got, status.CurrentStatus, "Ready=True/BackupCompleted")
}

// TestPendingIsReconciling: a backup waiting for an instance, asked of
// one, then running, is Reconciling with the phase's reason and
// status.message, and not Ready.
func TestPendingIsReconciling(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "db", withBackup))
	b := backupObject(t, ns, "b", "db", "")
	reconciling := func(phase databasev1alpha1.BackupPhase, reason, message string) func(databasev1alpha1.MyDatabaseBackupStatus) error {
		return func(st databasev1alpha1.MyDatabaseBackupStatus) error {
			rec := meta.FindStatusCondition(st.Conditions, databasev1alpha1.ConditionReconciling)
			ready := meta.FindStatusCondition(st.Conditions, databasev1alpha1.ConditionReady)
			switch {
			case st.Phase != phase || st.Message != message:
				return fmt.Errorf("%s: %s, want %s: %s", st.Phase, st.Message, phase, message)
			case rec == nil || rec.Status != metav1.ConditionTrue || rec.Reason != reason || rec.Message != message:
				return fmt.Errorf("Reconciling %+v, want True %s", rec, reason)
			case ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != reason || ready.Message != message:
				return fmt.Errorf("Ready %+v, want False %s", ready, reason)
			case meta.FindStatusCondition(st.Conditions, databasev1alpha1.ConditionStalled) != nil:
				return fmt.Errorf("Stalled with %v", st.Conditions)
			}
			return nil
		}
	}
	waitBackup(t, b, "Reconciling, no instance", reconciling(databasev1alpha1.BackupPending, databasev1alpha1.ReasonBackupPending,
		"waiting for a ready primary or replica to take the backup: no instance reports one"))
	if s := kstatusOf(t, b); s != status.InProgressStatus || b.Status.ObservedGeneration != b.Generation {
		t.Errorf("kstatus %s at observedGeneration %d (generation %d), want InProgress", s, b.Status.ObservedGeneration, b.Generation)
	}

	instancePod(t, db, "db-0", databasev1alpha1.RolePrimary, "0/5000100")
	waitBackup(t, b, "Reconciling, asked", reconciling(databasev1alpha1.BackupPending, databasev1alpha1.ReasonBackupPending,
		"asked db-0 (the primary: no replica is ready) to take the backup"))
	publishReport(t, ns, "db-0", contract.Report{Role: databasev1alpha1.RolePrimary, Ready: true, Time: testNow,
		Backup: &contract.BackupRun{Name: "b", Phase: "Running", Message: "pg_basebackup is copying the data"}})
	waitBackup(t, b, "Reconciling, running", reconciling(databasev1alpha1.BackupRunning, databasev1alpha1.ReasonBackupRunning,
		"pg_basebackup is copying the data"))
}

// TestMyDatabaseBackup: a MyDatabaseBackup is assigned to one instance (a
// replica unless it says Primary), which its annotation asks; what the
// instance reports becomes its status, and it fails with the reason when
// it cannot be taken.
func TestMyDatabaseBackup(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "bk", withBackup, func(db *databasev1alpha1.MyDatabase) { db.Spec.Replicas = ptr.To[int32](2) }))
	instancePod(t, db, "bk-0", databasev1alpha1.RolePrimary, "0/5000100")
	instancePod(t, db, "bk-1", databasev1alpha1.RoleReplica, "0/5000100")

	// On the replica by default.
	b1 := backupObject(t, ns, "b1", "bk", "")
	if b1.Spec.Target != databasev1alpha1.BackupTargetPreferReplica {
		t.Errorf("the default target is %q", b1.Spec.Target)
	}
	askedOf(t, b1, "bk-1")
	replica := func(run *contract.BackupRun) contract.Report {
		return contract.Report{Role: databasev1alpha1.RoleReplica, Ready: true, Replayed: "0/5000100", Time: time.Now().UTC(), Backup: run}
	}
	started := time.Date(2026, 1, 2, 3, 5, 0, 0, time.UTC)
	publishReport(t, ns, "bk-1", replica(&contract.BackupRun{Name: "b1", Phase: "Running", Started: &started, Message: "pg_basebackup is copying the data"}))
	waitBackup(t, b1, "Running", func(st databasev1alpha1.MyDatabaseBackupStatus) error {
		if st.Phase != databasev1alpha1.BackupRunning || st.StartedAt == nil || !st.StartedAt.Time.Equal(started) {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	stopped := started.Add(time.Minute)
	publishReport(t, ns, "bk-1", replica(&contract.BackupRun{Name: "b1", Phase: "Completed", Started: &started, Stopped: &stopped,
		ID: "20260102T030500Z", Size: 1234567, Timeline: 1, BeginLSN: "0/6000028", EndLSN: "0/6000138",
		BeginWAL: "000000010000000000000006", EndWAL: "000000010000000000000006"}))
	waitBackup(t, b1, "Completed", func(st databasev1alpha1.MyDatabaseBackupStatus) error {
		if st.Phase != databasev1alpha1.BackupCompleted || st.BackupID != "20260102T030500Z" || st.Size != 1234567 ||
			st.BeginLSN != "0/6000028" || st.EndLSN != "0/6000138" || st.BeginWAL != "000000010000000000000006" ||
			st.Timeline != 1 || st.StoppedAt == nil || !st.StoppedAt.Time.Equal(stopped) || st.Message != "" {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	// A finished backup stays as it is, whatever the pod says next.
	publishReport(t, ns, "bk-1", replica(&contract.BackupRun{Name: "b1", Phase: "Failed", Message: "not this"}))

	// On the primary when asked; and the instance that waits for another
	// backup of its own is not asked meanwhile.
	b2 := backupObject(t, ns, "b2", "bk", databasev1alpha1.BackupTargetPrimary)
	askedOf(t, b2, "bk-0")
	if err := get(ns, "b1", b1); err != nil || b1.Status.Phase != databasev1alpha1.BackupCompleted {
		t.Errorf("the finished b1 changed: %+v, %v", b1.Status, err)
	}

	// The pod replaced before it reports: the backup fails, never waits
	// forever on a pod that never heard of it.
	b3 := backupObject(t, ns, "b3", "bk", "")
	askedOf(t, b3, "bk-1")
	deletePod(t, ns, "bk-1")
	instancePod(t, db, "bk-1", databasev1alpha1.RoleReplica, "0/5000100")
	waitBackup(t, b3, "Failed", failedWith("was deleted or replaced"))

	// What cannot be backed up fails at once, saying why.
	plain := create(t, newDB(ns, "plain"))
	waitBackup(t, backupObject(t, ns, "b4", plain.Name, ""), "Failed", failedWith(`MyDatabase "plain" has no spec.backup`))
	waitBackup(t, backupObject(t, ns, "b5", "nowhere", ""), "Failed", failedWith(`there is no MyDatabase "nowhere"`))

	// The spec is immutable.
	b1.Spec.Database = "plain"
	if err := k8s.Update(context.Background(), b1); err == nil || !strings.Contains(err.Error(), "immutable") {
		t.Errorf("changing a MyDatabaseBackup's spec: %v", err)
	}
}

// TestBackupWaitsForTheRollout: a backup is taken by a pod that runs the
// MyDatabase's current spec, never by one the rollout is still to replace:
// spec.backup added to a running MyDatabase brings the schedule's first
// backup at once, while the pods still run without it (a make dev run
// failed its first backup so: the pod asked was replaced under it).
func TestBackupWaitsForTheRollout(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "db", withBackup))
	instancePod(t, db, "db-0", databasev1alpha1.RolePrimary, "0/5000100")
	pending := func(what string) func(databasev1alpha1.MyDatabaseBackupStatus) error {
		return func(st databasev1alpha1.MyDatabaseBackupStatus) error {
			if st.Phase != databasev1alpha1.BackupPending || st.Instance != "" || !strings.Contains(st.Message, what) {
				return fmt.Errorf("%s on %q: %s", st.Phase, st.Instance, st.Message)
			}
			return nil
		}
	}

	// A new template its controller has not taken in yet.
	sts := &appsv1.StatefulSet{}
	if err := get(ns, "db", sts); err != nil {
		t.Fatal(err)
	}
	sts.Spec.Template.Spec.Containers[0].Image = "postgres:17.12"
	if err := k8s.Update(context.Background(), sts); err != nil {
		t.Fatal(err)
	}
	b := backupObject(t, ns, "b", "db", "")
	waitBackup(t, b, "Pending for the StatefulSet", pending(`waiting for StatefulSet "db" to take in its current pod template`))

	// Taken in: a new revision, which the pod does not run yet.
	rollout(t, db, "db-2")
	waitBackup(t, b, "Pending for the rollout", pending("ready instances the rollout is still to update to the current spec: 1"))

	// The rollout replaces the pod: the new one takes the backup.
	deletePod(t, ns, "db-0")
	instancePod(t, db, "db-0", databasev1alpha1.RolePrimary, "0/5000100")
	askedOf(t, b, "db-0")
}

// TestHibernatedDatabaseWaits: a backup of a hibernated MyDatabase asks no
// instance, even one still stopping, and waits with the reason.
func TestHibernatedDatabaseWaits(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "db", withBackup, func(db *databasev1alpha1.MyDatabase) { db.Spec.Hibernate = true }))
	instancePod(t, db, "db-0", databasev1alpha1.RolePrimary, "0/5000100")
	b := backupObject(t, ns, "b", "db", "")
	waitBackup(t, b, "Pending for the hibernation", func(st databasev1alpha1.MyDatabaseBackupStatus) error {
		if st.Phase != databasev1alpha1.BackupPending || !strings.Contains(st.Message, "is hibernated") || st.Instance != "" {
			return fmt.Errorf("%s on %q: %s", st.Phase, st.Instance, st.Message)
		}
		return nil
	})
}

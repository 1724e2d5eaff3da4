package reliability

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
)

// upgradeWorld plays what a major upgrade needs besides the operator: the
// StatefulSet controller (pods and claims follow the StatefulSet's
// replicas, each pod running its template's image), the instance managers
// (pg-0 holds the Lease) and the Job controller with the Job's pod (a Job
// runs pg_upgrade on the claim it mounts and succeeds). It tracks which
// major each claim's data is on, and fails the test the moment a server
// runs an image of another major than its data, or pg_upgrade runs while a
// server is up.
type upgradeWorld struct {
	ns string
	// failCheck makes the Job fail as pg_upgrade --check does: exit 10,
	// the data untouched.
	failCheck bool
	// data is the major each claim's data is on, by claim UID.
	data     map[types.UID]int
	upgrades int // pg_upgrade runs
}

func (w *upgradeWorld) turn(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	sts := &appsv1.StatefulSet{}
	mustSucceed(t, env.Client.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: "pg"}, sts))
	image := sts.Spec.Template.Spec.Containers[0].Image
	pods := &corev1.PodList{}
	mustSucceed(t, env.Client.List(ctx, pods, client.InNamespace(w.ns), client.MatchingLabels(sts.Spec.Selector.MatchLabels)))
	for i := range pods.Items {
		if pod := &pods.Items[i]; podOrdinal(pod.Name) >= *sts.Spec.Replicas {
			mustSucceed(t, client.IgnoreNotFound(env.Client.Delete(ctx, pod)))
		}
	}
	claims := w.claims(t)
	for i := range *sts.Spec.Replicas {
		name := fmt.Sprintf("pg-%d", i)
		claimName := "data-" + name
		pvc, ok := claims[claimName]
		if !ok {
			tmpl := sts.Spec.VolumeClaimTemplates[0]
			pvc = &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: claimName, Labels: tmpl.Labels}, Spec: tmpl.Spec}
			mustSucceed(t, env.Client.Create(ctx, pvc))
			w.data[pvc.UID] = 0 // empty: the server makes or clones it
		}
		if !pvc.DeletionTimestamp.IsZero() {
			continue // the StatefulSet controller waits for it to go
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: name}, &corev1.Pod{}); err == nil {
			continue
		}
		major := specs.Major(image[len("postgres:"):])
		switch on := w.data[pvc.UID]; {
		case on == 0:
			w.data[pvc.UID] = major
		case on != major:
			t.Fatalf("pod %s started with %s on data of PostgreSQL %d", name, image, on)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name, Labels: sts.Spec.Template.Labels},
			Spec: *sts.Spec.Template.Spec.DeepCopy()}
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: specs.DataVolumeName, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName}}})
		mustSucceed(t, env.Client.Create(ctx, pod))
	}
	w.runJob(t)
}

func podOrdinal(name string) int32 {
	var n int32
	_, _ = fmt.Sscanf(name, "pg-%d", &n)
	return n
}

// claims are the data claims by name; deleted ones lose their protection
// finalizer (no pod uses them once the StatefulSet went down) and go.
func (w *upgradeWorld) claims(t *testing.T) map[string]*corev1.PersistentVolumeClaim {
	t.Helper()
	ctx := context.Background()
	list := &corev1.PersistentVolumeClaimList{}
	mustSucceed(t, env.Client.List(ctx, list, client.InNamespace(w.ns)))
	out := map[string]*corev1.PersistentVolumeClaim{}
	for i := range list.Items {
		pvc := &list.Items[i]
		if !pvc.DeletionTimestamp.IsZero() && len(pvc.Finalizers) > 0 {
			patch := client.MergeFrom(pvc.DeepCopy())
			pvc.Finalizers = nil
			mustSucceed(t, client.IgnoreNotFound(env.Client.Patch(ctx, pvc, patch)))
			continue
		}
		out[pvc.Name] = pvc
	}
	return out
}

// runJob plays the upgrade Job to its success: pg_upgrade on the claim it
// mounts, which must be on the old major, with no server up.
func (w *upgradeWorld) runJob(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	job := &batchv1.Job{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: "pg-upgrade"}, job); err != nil || job.Status.StartTime != nil {
		return
	}
	pods := &corev1.PodList{}
	mustSucceed(t, env.Client.List(ctx, pods, client.InNamespace(w.ns)))
	if len(pods.Items) > 0 {
		t.Fatalf("the upgrade Job exists while %d servers are up", len(pods.Items))
	}
	claim := job.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim.ClaimName
	pvc := w.claims(t)[claim]
	if pvc == nil || w.data[pvc.UID] != 15 {
		t.Fatalf("the upgrade Job mounts %s, which is not a claim with data on 15", claim)
	}
	w.upgrades++
	now := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	if w.failCheck {
		w.failJob(t, job, now)
		return
	}
	w.data[pvc.UID] = 17
	job.Status = batchv1.JobStatus{StartTime: &now, CompletionTime: &now, Succeeded: 1, Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now}}}
	mustSucceed(t, env.Client.Status().Update(ctx, job))
}

// failJob fails the Job as the kubelet and the Job controller report an
// upgrade container that exited 10.
func (w *upgradeWorld) failJob(t *testing.T, job *batchv1.Job, now metav1.Time) {
	t.Helper()
	ctx := context.Background()
	labels := maps.Clone(job.Spec.Template.Labels)
	labels[batchv1.JobNameLabel], labels[batchv1.ControllerUidLabel] = job.Name, string(job.UID)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: job.Name + "-x", Labels: labels},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: specs.UpgradeContainerName, Image: "postgres:17"}}}}
	mustSucceed(t, env.Client.Create(ctx, pod))
	pod.Status = corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: specs.UpgradeContainerName,
		Image: "postgres:17", ImageID: "x", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: contract.UpgradeExitOldDataUntouched, Reason: "Error", Message: "pg_upgrade --check failed: reg*",
			StartedAt: now, FinishedAt: now}}}}}
	mustSucceed(t, env.Client.Status().Update(ctx, pod))
	job.Status = batchv1.JobStatus{StartTime: &now, Failed: 1, Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "PodFailurePolicy", LastTransitionTime: now},
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "PodFailurePolicy", LastTransitionTime: now}}}
	mustSucceed(t, env.Client.Status().Update(ctx, job))
}

// twoServers is a converged MyDatabase of two servers on version under
// deletionPolicy Delete, with pg-0 holding the Lease, in w's world.
func twoServers(t *testing.T, version string, w *upgradeWorld) (client.ObjectKey, *databasev1alpha1.MyDatabase, *operator) {
	t.Helper()
	ctx := context.Background()
	w.ns = namespace(t)
	w.data = map[types.UID]int{}
	db := newDB(w.ns, func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Replicas, db.Spec.Version = ptr.To[int32](2), version
		db.Spec.DeletionPolicy = databasev1alpha1.DeletionPolicyDelete
	})
	key := client.ObjectKeyFromObject(db)
	o := newOperator(env.Client, env.Client)
	o.converge(t, key)
	w.turn(t)
	lease := &coordinationv1.Lease{}
	mustSucceed(t, env.Client.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: "pg-primary"}, lease))
	lease.Spec.HolderIdentity = new("pg-0")
	mustSucceed(t, env.Client.Update(ctx, lease))
	o.converge(t, key)
	return key, db, o
}

// upgradeSetup is a converged MyDatabase of two servers on 15, with pg-0
// holding the Lease, then spec.version raised to 17.
func upgradeSetup(t *testing.T, failCheck bool) (client.ObjectKey, *upgradeWorld, types.UID) {
	t.Helper()
	ctx := context.Background()
	w := &upgradeWorld{failCheck: failCheck}
	key, db, _ := twoServers(t, "15", w)
	// The servers ran the spec: what status.currentVersion says once Ready
	// (envtest has no StatefulSet controller to make them ready).
	mustSucceed(t, env.Client.Get(ctx, key, db))
	db.Status.CurrentVersion = "15"
	mustSucceed(t, env.Client.Status().Update(ctx, db))
	mustSucceed(t, env.Client.Get(ctx, key, db))
	db.Spec.Version = "17"
	mustSucceed(t, env.Client.Update(ctx, db))
	primary := w.claims(t)["data-pg-0"]
	return key, w, primary.UID
}

// Scenario 1 for a major upgrade: the operator dies right after its k-th
// write, for every k through an upgrade, while the StatefulSet and Job
// controllers go on; a restarted operator finishes it: pg_upgrade ran
// exactly once, on the primary's claim (the same UID), with no server up;
// no server ever ran an image of another major than its data; the end
// state is the one of an undisturbed run (the replica's claim made again,
// the StatefulSet at two servers of postgres:17, status.currentVersion 17,
// the Job gone).
func TestCrashAtEveryWriteDuringMajorUpgrade(t *testing.T) {
	crashAtEveryUpgradeWrite(t, false, 8, func(_ int, key client.ObjectKey, w *upgradeWorld, primary, _ types.UID) {
		assertUpgraded(t, key, w, primary)
	})
}

// crashAtEveryUpgradeWrite runs an upgrade (failing: one whose Job fails
// before the point of no return) with the operator crashing after its
// k-th write, for k = 0, 1, ... until a run needs fewer writes than k
// (at least least of them), then a fresh operator converging; check
// asserts the end state of each.
func crashAtEveryUpgradeWrite(t *testing.T, failing bool, least int,
	check func(k int, key client.ObjectKey, w *upgradeWorld, primary, replica types.UID)) {
	t.Helper()
	for k := 0; ; k++ {
		key, w, primary := upgradeSetup(t, failing)
		replica := w.claims(t)["data-pg-1"].UID
		if !crashAt(t, key, w, k, 30, 12) {
			t.Logf("the upgrade takes %d writes; crashed after each of them", k)
			if k < least {
				t.Fatalf("only %d writes: the crash points were not exercised", k)
			}
			return
		}
		check(k, key, w, primary, replica)
	}
}

// crashAt runs up to passes passes of an operator that crashes after its
// k-th write, w's controllers acting between them; once it has crashed, a
// fresh operator converges rounds times, w acting after each. It tells
// whether the crash happened: false when the change takes fewer than k
// writes.
func crashAt(t *testing.T, key client.ObjectKey, w *upgradeWorld, k, passes, rounds int) bool {
	t.Helper()
	c := &crash{left: k}
	crashing := newOperator(crashingClient(env.Client, c), env.Client)
	for i := 0; i < passes && !c.happened(); i++ {
		_, _ = crashing.pass(key)
		w.turn(t)
	}
	if !c.happened() {
		return false
	}
	o := newOperator(env.Client, env.Client)
	for range rounds {
		o.converge(t, key)
		w.turn(t)
	}
	return true
}

func assertUpgraded(t *testing.T, key client.ObjectKey, w *upgradeWorld, primary types.UID) {
	t.Helper()
	ctx := context.Background()
	db := &databasev1alpha1.MyDatabase{}
	mustSucceed(t, env.Client.Get(ctx, key, db))
	if up := db.Status.MajorUpgrade; up == nil || up.Phase != databasev1alpha1.MajorUpgradeSucceeded || db.Status.CurrentVersion != "17" {
		t.Fatalf("currentVersion %q, majorUpgrade %+v; want Succeeded on 17", db.Status.CurrentVersion, up)
	}
	if w.upgrades != 1 {
		t.Fatalf("pg_upgrade ran %d times, want once", w.upgrades)
	}
	claims := w.claims(t)
	if pvc := claims["data-pg-0"]; pvc == nil || pvc.UID != primary || w.data[primary] != 17 {
		t.Fatal("the primary's claim was lost or is not on 17")
	}
	if pvc := claims["data-pg-1"]; pvc == nil || pvc.UID == primary || w.data[pvc.UID] != 17 {
		t.Fatal("the replica's claim was not made again and cloned on 17")
	}
	sts := &appsv1.StatefulSet{}
	mustSucceed(t, env.Client.Get(ctx, key, sts))
	if got := sts.Spec.Template.Spec.Containers[0].Image; *sts.Spec.Replicas != 2 || got != "postgres:17" {
		t.Fatalf("StatefulSet at %d servers of %s, want 2 of postgres:17", *sts.Spec.Replicas, got)
	}
	if p := sts.Spec.PersistentVolumeClaimRetentionPolicy; p.WhenScaled != appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
		t.Fatalf("claim retention %+v, want deletionPolicy Delete's back", p)
	}
	jobs := &batchv1.JobList{}
	mustSucceed(t, env.Client.List(ctx, jobs, client.InNamespace(key.Namespace)))
	if slices.ContainsFunc(jobs.Items, func(j batchv1.Job) bool { return j.DeletionTimestamp.IsZero() }) {
		t.Fatal("the upgrade Job is left")
	}
}

// The same through an upgrade whose Job fails before the point of no
// return (exit 10): the restarted operator ends with the servers back on
// postgres:15 at two servers, both claims the same ones (UIDs) on 15,
// Stalled MajorUpgradeFailed with the Job's reason, status.currentVersion
// 15; pg_upgrade ran once.
func TestCrashAtEveryWriteDuringAFailedMajorUpgrade(t *testing.T) {
	crashAtEveryUpgradeWrite(t, true, 6, func(k int, key client.ObjectKey, w *upgradeWorld, primary, replica types.UID) {
		ctx := context.Background()
		db := &databasev1alpha1.MyDatabase{}
		mustSucceed(t, env.Client.Get(ctx, key, db))
		stalled := meta.FindStatusCondition(db.Status.Conditions, databasev1alpha1.ConditionStalled)
		if up := db.Status.MajorUpgrade; up == nil || up.Phase != databasev1alpha1.MajorUpgradeFailed || !up.OldDataUntouched ||
			db.Status.CurrentVersion != "15" || stalled == nil || stalled.Reason != databasev1alpha1.ReasonMajorUpgradeFailed ||
			!strings.Contains(stalled.Message, "reg*") {
			t.Fatalf("crash after write %d: currentVersion %q, majorUpgrade %+v, Stalled %+v", k, db.Status.CurrentVersion, up, stalled)
		}
		if w.upgrades != 1 {
			t.Fatalf("crash after write %d: pg_upgrade ran %d times, want once", k, w.upgrades)
		}
		claims := w.claims(t)
		for name, uid := range map[string]types.UID{"data-pg-0": primary, "data-pg-1": replica} {
			if pvc := claims[name]; pvc == nil || pvc.UID != uid || w.data[uid] != 15 {
				t.Fatalf("crash after write %d: claim %s lost or not on 15", k, name)
			}
		}
		sts := &appsv1.StatefulSet{}
		mustSucceed(t, env.Client.Get(ctx, key, sts))
		if got := sts.Spec.Template.Spec.Containers[0].Image; *sts.Spec.Replicas != 2 || got != "postgres:15" {
			t.Fatalf("crash after write %d: StatefulSet at %d servers of %s, want 2 of postgres:15", k, *sts.Spec.Replicas, got)
		}
	})
}

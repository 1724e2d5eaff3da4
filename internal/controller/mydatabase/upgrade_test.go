package mydatabase

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
)

// readyPair makes a MyDatabase of 2 servers on 15 Ready, with the
// servers' pods and claims (envtest runs no StatefulSet controller), the
// primary at ordinal 0.
func readyPair(t *testing.T, ns, name string, mutate ...func(*databasev1alpha1.MyDatabase)) *databasev1alpha1.MyDatabase {
	t.Helper()
	db := create(t, newDB(ns, name, append([]func(*databasev1alpha1.MyDatabase){func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Version, db.Spec.Replicas = "15", ptr.To[int32](2)
	}}, mutate...)...))
	eventually(t, "the StatefulSet", exists(ns, name, &appsv1.StatefulSet{}))
	for i := range int32(2) {
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: specs.DataVolumeClaimName(db, i), Labels: specs.Labels(db, specs.ComponentDatabase)},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
		}
		if err := k8s.Create(context.Background(), pvc); err != nil {
			t.Fatal(err)
		}
	}
	instancePod(t, db, name+"-0", "r1", databasev1alpha1.RolePrimary, "0/5000100")
	instancePod(t, db, name+"-1", "r1", databasev1alpha1.RoleReplica, "0/5000100")
	holdLease(t, db, name+"-0")
	markReady(t, db)
	waitFor(t, db, "Ready on 15", func(db *databasev1alpha1.MyDatabase) error {
		if db.Status.Phase != databasev1alpha1.PhaseReady || db.Status.CurrentVersion != "15" {
			return fmt.Errorf("phase %s, currentVersion %q", db.Status.Phase, db.Status.CurrentVersion)
		}
		return nil
	})
	return db
}

func upgradePhase(phase databasev1alpha1.MajorUpgradePhase) func(*databasev1alpha1.MyDatabase) error {
	return func(db *databasev1alpha1.MyDatabase) error {
		if up := db.Status.MajorUpgrade; up == nil || up.Phase != phase {
			return fmt.Errorf("majorUpgrade %+v, want phase %s", up, phase)
		}
		return nil
	}
}

// statefulSetIs waits for the StatefulSet's replicas and image.
func statefulSetIs(t *testing.T, db *databasev1alpha1.MyDatabase, replicas int32, image string) *appsv1.StatefulSet {
	t.Helper()
	sts := &appsv1.StatefulSet{}
	eventually(t, fmt.Sprintf("the StatefulSet at %d servers of %s", replicas, image), func() error {
		if err := get(db.Namespace, db.Name, sts); err != nil {
			return err
		}
		if got := ptr.Deref(sts.Spec.Replicas, -1); got != replicas || containerImage(sts) != image {
			return fmt.Errorf("%d servers of %s", got, containerImage(sts))
		}
		return nil
	})
	return sts
}

// stopPods plays the StatefulSet controller scaling to zero.
func stopPods(t *testing.T, db *databasev1alpha1.MyDatabase) {
	t.Helper()
	for _, name := range []string{db.Name + "-0", db.Name + "-1"} {
		pod := &corev1.Pod{}
		if err := get(db.Namespace, name, pod); err == nil {
			if err := k8s.Delete(context.Background(), pod); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// finishJob plays the Job controller (and, for a failure, the kubelet
// with the upgrade container's exit code and termination message).
func finishJob(t *testing.T, db *databasev1alpha1.MyDatabase, exitCode int32, message string) {
	t.Helper()
	job := &batchv1.Job{}
	eventually(t, "the upgrade Job", exists(db.Namespace, specs.UpgradeJobName(db), job))
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	if exitCode != 0 {
		labels := specs.Labels(db, databasev1alpha1.ComponentUpgrade)
		labels[batchv1.JobNameLabel], labels[batchv1.ControllerUidLabel] = job.Name, string(job.UID)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: fmt.Sprintf("%s-%d", job.Name, exitCode), Labels: labels},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: specs.UpgradeContainerName, Image: "postgres:17"}}}}
		if err := k8s.Create(context.Background(), pod); err != nil {
			t.Fatal(err)
		}
		pod.Status = corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: specs.UpgradeContainerName,
			Image: "postgres:17", ImageID: "x", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: exitCode, Reason: "Error", Message: message, StartedAt: now, FinishedAt: now}}}}}
		if err := k8s.Status().Update(context.Background(), pod); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the upgrade Job finished", func() error {
		if err := get(db.Namespace, specs.UpgradeJobName(db), job); err != nil {
			return err
		}
		job.Status.StartTime = &now
		if exitCode == 0 {
			job.Status.CompletionTime, job.Status.Succeeded = &now, 1
			job.Status.Conditions = []batchv1.JobCondition{
				{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now}}
		} else {
			job.Status.Failed = 1
			job.Status.Conditions = []batchv1.JobCondition{
				{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "PodFailurePolicy", LastTransitionTime: now},
				{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "PodFailurePolicy", LastTransitionTime: now}}
		}
		return k8s.Status().Update(context.Background(), job)
	})
}

// TestMajorUpgrade: spec.version 15 → 17 stops the servers (the claims
// retained even under deletionPolicy Delete), runs the upgrade Job with
// the old image staging its binaries and the new one running pg_upgrade
// on ordinal 0's claim, then deletes the replica's claim and runs the new
// image at spec.replicas, with status.currentVersion 17.
func TestMajorUpgrade(t *testing.T) {
	ns := namespace(t)
	db := readyPair(t, ns, "up", func(db *databasev1alpha1.MyDatabase) { db.Spec.DeletionPolicy = databasev1alpha1.DeletionPolicyDelete })
	update(t, db, func(db *databasev1alpha1.MyDatabase) { db.Spec.Version = "17" })

	waitFor(t, db, "Stopping", upgradePhase(databasev1alpha1.MajorUpgradeStopping))
	sts := statefulSetIs(t, db, 0, "postgres:15")
	if p := sts.Spec.PersistentVolumeClaimRetentionPolicy; p == nil || p.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
		t.Fatalf("scaled to zero with claim retention %+v, want WhenScaled Retain", p)
	}
	if rec := condition(db, databasev1alpha1.ConditionReconciling); rec == nil || rec.Reason != databasev1alpha1.ReasonMajorUpgrade {
		t.Fatalf("Reconciling %+v, want reason %s", rec, databasev1alpha1.ReasonMajorUpgrade)
	}
	stopPods(t, db)
	waitFor(t, db, "Upgrading", upgradePhase(databasev1alpha1.MajorUpgradeUpgrading))
	job := &batchv1.Job{}
	eventually(t, "the upgrade Job", exists(ns, "up-upgrade", job))
	pod := job.Spec.Template.Spec
	if got := pod.InitContainers[1].Image; got != "postgres:15" {
		t.Errorf("staging init container runs %s, want the old image postgres:15", got)
	}
	if c := pod.Containers[0]; c.Image != "postgres:17" || !strings.Contains(strings.Join(c.Command, " "), "upgrade --old-major 15 --new-major 17") {
		t.Errorf("upgrade container %s %v", c.Image, c.Command)
	}
	if claim := pod.Volumes[0].PersistentVolumeClaim; claim == nil || claim.ClaimName != "data-up-0" {
		t.Errorf("the Job mounts %+v, want data-up-0", pod.Volumes[0])
	}
	finishJob(t, db, 0, "")
	eventually(t, "the replica's claim deleted", gone(ns, "data-up-1", &corev1.PersistentVolumeClaim{}))
	releaseClaim(t, ns, "data-up-1")
	waitFor(t, db, "Succeeded", func(db *databasev1alpha1.MyDatabase) error {
		if err := upgradePhase(databasev1alpha1.MajorUpgradeSucceeded)(db); err != nil {
			return err
		}
		if db.Status.CurrentVersion != "17" {
			return fmt.Errorf("currentVersion %q", db.Status.CurrentVersion)
		}
		return nil
	})
	statefulSetIs(t, db, 2, "postgres:17")
	// up-0's data is the only data left: it may be elected alone until it
	// has taken the Lease (with a required quorum, the replicas, which
	// have none, would never stand).
	quorumSole(t, db, "up-0")
	holdLease(t, db, "") // the old primary gave it up when it stopped
	eventually(t, "up-0 takes the Lease", func() error {
		lease := &coordinationv1.Lease{}
		if err := get(ns, specs.LeaseName(db), lease); err != nil {
			return err
		}
		lease.Spec.HolderIdentity, lease.Spec.LeaseTransitions = new("up-0"), new(ptr.Deref(lease.Spec.LeaseTransitions, 0)+1)
		return k8s.Update(context.Background(), lease)
	})
	quorumSole(t, db, "")
	eventually(t, "the upgrade Job deleted", gone(ns, "up-upgrade", &batchv1.Job{}))
	if err := get(ns, "data-up-0", &corev1.PersistentVolumeClaim{}); err != nil {
		t.Fatalf("the primary's claim: %v", err)
	}
	markReady(t, db)
	waitFor(t, db, "Ready on 17", phaseIs(databasev1alpha1.PhaseReady))
}

// TestMajorUpgradeFailure: a Job that fails before the point of no return
// (exit code 10) puts the servers back on 15 at spec.replicas with their
// claims, Stalled with the Job's reason; setting spec.version back to 15
// calls the upgrade off. One that fails past it (exit 11) keeps the
// servers stopped.
func TestMajorUpgradeFailure(t *testing.T) {
	ns := namespace(t)
	db := readyPair(t, ns, "upf")
	update(t, db, func(db *databasev1alpha1.MyDatabase) { db.Spec.Version = "17" })
	statefulSetIs(t, db, 0, "postgres:15")
	stopPods(t, db)
	reason := "pg_upgrade --check failed: Checking for reg* data types in user tables"
	finishJob(t, db, contract.UpgradeExitOldDataUntouched, reason)
	waitFor(t, db, "Stalled MajorUpgradeFailed", func(db *databasev1alpha1.MyDatabase) error {
		st := condition(db, databasev1alpha1.ConditionStalled)
		if st == nil || st.Reason != databasev1alpha1.ReasonMajorUpgradeFailed || !strings.Contains(st.Message, reason) ||
			!strings.Contains(st.Message, "the data is untouched") {
			return fmt.Errorf("Stalled %+v", st)
		}
		if up := db.Status.MajorUpgrade; up == nil || up.Phase != databasev1alpha1.MajorUpgradeFailed || !up.OldDataUntouched {
			return fmt.Errorf("majorUpgrade %+v", up)
		}
		if db.Status.CurrentVersion != "15" {
			return fmt.Errorf("currentVersion %q", db.Status.CurrentVersion)
		}
		return nil
	})
	statefulSetIs(t, db, 2, "postgres:15")
	for _, claim := range []string{"data-upf-0", "data-upf-1"} {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := get(ns, claim, pvc); err != nil || !pvc.DeletionTimestamp.IsZero() {
			t.Fatalf("claim %s after a failure before the point of no return: %v, deleted %v", claim, err, pvc.DeletionTimestamp)
		}
	}
	// Another change of the spec does not retry: the database would go
	// down again for it.
	update(t, db, func(db *databasev1alpha1.MyDatabase) { db.Spec.Parameters = map[string]string{"work_mem": "8MB"} })
	waitFor(t, db, "still Stalled at the new generation", phaseIs(databasev1alpha1.PhaseStalled))
	statefulSetIs(t, db, 2, "postgres:15")
	// Called off: back to 15, the failure stays in status as history.
	update(t, db, func(db *databasev1alpha1.MyDatabase) { db.Spec.Version = "15" })
	markReady(t, db)
	waitFor(t, db, "Ready on 15 again", phaseIs(databasev1alpha1.PhaseReady))
	waitFor(t, db, "Cancelled", upgradePhase(databasev1alpha1.MajorUpgradeCancelled))

	// Retried, and this time it fails past the point of no return.
	update(t, db, func(db *databasev1alpha1.MyDatabase) { db.Spec.Version = "17" })
	waitFor(t, db, "Upgrading again", upgradePhase(databasev1alpha1.MajorUpgradeUpgrading))
	finishJob(t, db, contract.UpgradeExitPastPointOfNoReturn, "pg_upgrade was interrupted after it began linking")
	waitFor(t, db, "Stalled, stopped", func(db *databasev1alpha1.MyDatabase) error {
		st := condition(db, databasev1alpha1.ConditionStalled)
		if st == nil || !strings.Contains(st.Message, "the servers stay stopped") {
			return fmt.Errorf("Stalled %+v", st)
		}
		return nil
	})
	statefulSetIs(t, db, 0, "postgres:15")
}

// quorumSole waits for the quorum on the Lease to name sole as the member
// that alone holds data.
func quorumSole(t *testing.T, db *databasev1alpha1.MyDatabase, sole string) {
	t.Helper()
	eventually(t, fmt.Sprintf("the Lease's quorum with sole %q", sole), func() error {
		lease := &coordinationv1.Lease{}
		if err := get(db.Namespace, specs.LeaseName(db), lease); err != nil {
			return err
		}
		q, err := contract.ParseQuorum(lease.Annotations[contract.AnnotationQuorum])
		if err != nil || q.Sole != sole {
			return fmt.Errorf("quorum %+v (%v)", q, err)
		}
		return nil
	})
}

// releaseClaim removes the protection finalizer the API server's admission
// puts on a claim (no controller runs here to lift it).
func releaseClaim(t *testing.T, ns, name string) {
	t.Helper()
	eventually(t, "claim "+name+" released", func() error {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := get(ns, name, pvc); err != nil {
			return nil
		}
		pvc.Finalizers = nil
		return k8s.Update(context.Background(), pvc)
	})
}

// TestMajorUpgradeMovesThePrimaryToOrdinalZero: with the primary at
// ordinal 1, the upgrade first asks it, through the Lease, to hand over to
// ordinal 0 (which the StatefulSet stops last), and stops nothing before.
func TestMajorUpgradeMovesThePrimaryToOrdinalZero(t *testing.T) {
	ns := namespace(t)
	db := readyPair(t, ns, "upm")
	holdLease(t, db, "upm-1")
	waitFor(t, db, "upm-1 the primary", func(db *databasev1alpha1.MyDatabase) error {
		if db.Status.CurrentPrimary != "upm-1" {
			return fmt.Errorf("currentPrimary %q", db.Status.CurrentPrimary)
		}
		return nil
	})
	update(t, db, func(db *databasev1alpha1.MyDatabase) { db.Spec.Version = "17" })
	waitFor(t, db, "Preparing", upgradePhase(databasev1alpha1.MajorUpgradePreparing))
	switchoverAsked(t, db, "upm-0")
	statefulSetIs(t, db, 2, "postgres:15")
	holdLease(t, db, "upm-0")
	waitFor(t, db, "Stopping", upgradePhase(databasev1alpha1.MajorUpgradeStopping))
	statefulSetIs(t, db, 0, "postgres:15")
	switchoverAsked(t, db, "")
}

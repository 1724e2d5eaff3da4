package mydatabase

import (
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
)

func hibernationPhase(phase databasev1alpha1.HibernationPhase) func(*databasev1alpha1.MyDatabase) error {
	return func(db *databasev1alpha1.MyDatabase) error {
		if h := db.Status.Hibernation; h == nil || h.Phase != phase {
			return fmt.Errorf("hibernation %+v, want phase %s", h, phase)
		}
		return nil
	}
}

// TestHibernation: spec.hibernate first moves the primary to ordinal 0
// (which the StatefulSet stops last) and stops nothing meanwhile, then
// scales the StatefulSet to zero with its claims retained under
// deletionPolicy Delete; with no pod left the MyDatabase is Hibernated
// (Ready True with that reason: what the spec asks for is done, and
// kstatus reads Current) and nothing else is deleted. spec.hibernate false
// runs the servers again.
func TestHibernation(t *testing.T) {
	ns := namespace(t)
	db := readyPair(t, ns, "hib", func(db *databasev1alpha1.MyDatabase) { db.Spec.DeletionPolicy = databasev1alpha1.DeletionPolicyDelete })
	holdLease(t, db, "hib-1")
	reportRole(t, db, "hib-0", databasev1alpha1.RoleReplica, "0/5000100")
	reportRole(t, db, "hib-1", databasev1alpha1.RolePrimary, "0/5000100")
	waitFor(t, db, "hib-1 the primary", func(db *databasev1alpha1.MyDatabase) error {
		if db.Status.CurrentPrimary != "hib-1" {
			return fmt.Errorf("currentPrimary %q", db.Status.CurrentPrimary)
		}
		return nil
	})

	update(t, db, func(db *databasev1alpha1.MyDatabase) { db.Spec.Hibernate = true })
	switchoverAsked(t, db, "hib-0")
	waitFor(t, db, "Preparing, Reconciling", func(db *databasev1alpha1.MyDatabase) error {
		if err := hibernationPhase(databasev1alpha1.HibernationPreparing)(db); err != nil {
			return err
		}
		rec := condition(db, databasev1alpha1.ConditionReconciling)
		if rec == nil || rec.Reason != databasev1alpha1.ReasonHibernating || !strings.Contains(rec.Message, "switching over from hib-1 to hib-0") {
			return fmt.Errorf("Reconciling %+v", rec)
		}
		if sw := db.Status.Switchover; sw == nil || sw.Reason != databasev1alpha1.SwitchoverHibernation {
			return fmt.Errorf("switchover %+v, want one for the hibernation", sw)
		}
		return nil
	})
	statefulSetIs(t, db, 2, "postgres:15")

	// The instance managers hand over.
	holdLease(t, db, "hib-0")
	reportRole(t, db, "hib-1", databasev1alpha1.RoleReplica, "0/5000200")
	reportRole(t, db, "hib-0", databasev1alpha1.RolePrimary, "0/5000200")
	waitFor(t, db, "Stopping", hibernationPhase(databasev1alpha1.HibernationStopping))
	sts := statefulSetIs(t, db, 0, "postgres:15")
	if p := sts.Spec.PersistentVolumeClaimRetentionPolicy; p == nil || p.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
		t.Fatalf("scaled to zero with claim retention %+v, want WhenScaled Retain", p)
	}
	if sw := db.Status.Switchover; sw == nil || sw.Phase != databasev1alpha1.SwitchoverSucceeded || db.Status.TargetPrimary != "" {
		t.Fatalf("switchover %+v, targetPrimary %q: the switchover must have finished before the servers stop", sw, db.Status.TargetPrimary)
	}

	stopPods(t, db)
	waitFor(t, db, "Hibernated", func(db *databasev1alpha1.MyDatabase) error {
		if err := phaseIs(databasev1alpha1.PhaseHibernated)(db); err != nil {
			return err
		}
		ready, hib := condition(db, databasev1alpha1.ConditionReady), condition(db, databasev1alpha1.ConditionHibernated)
		if ready == nil || ready.Status != metav1.ConditionTrue || ready.Reason != databasev1alpha1.ReasonHibernated || hib == nil || hib.Reason != databasev1alpha1.ReasonHibernated {
			return fmt.Errorf("Ready %+v, Hibernated %+v", ready, hib)
		}
		if h := db.Status.Hibernation; h.Primary != "hib-0" || h.HibernatedAt == nil {
			return fmt.Errorf("hibernation %+v", h)
		}
		return nil
	})
	if problems := conditionRules(db); len(problems) > 0 {
		t.Errorf("a hibernated MyDatabase breaks the condition rules: %v", problems)
	}
	if got := kstatusOf(t, db); got != "Current" {
		t.Errorf("kstatus %s, want Current: a hibernation is done", got)
	}
	// Nothing but the servers stops: the claims (under Delete), the
	// Secret, the Services and the Lease stay.
	kept := map[string]client.Object{
		"data-hib-0": &corev1.PersistentVolumeClaim{}, "data-hib-1": &corev1.PersistentVolumeClaim{},
		specs.CredentialsSecretName(db): &corev1.Secret{}, specs.ReadWriteServiceName(db): &corev1.Service{},
		specs.LeaseName(db): &coordinationv1.Lease{},
	}
	for name, obj := range kept {
		if err := get(ns, name, obj); err != nil || !obj.GetDeletionTimestamp().IsZero() {
			t.Errorf("%s after the hibernation: %v, deleted %v", name, err, obj.GetDeletionTimestamp())
		}
	}

	update(t, db, func(db *databasev1alpha1.MyDatabase) { db.Spec.Hibernate = false })
	waitFor(t, db, "Resumed", func(db *databasev1alpha1.MyDatabase) error {
		if err := hibernationPhase(databasev1alpha1.HibernationResumed)(db); err != nil {
			return err
		}
		if c := condition(db, databasev1alpha1.ConditionHibernated); c != nil {
			return fmt.Errorf("Hibernated %+v after the resume", c)
		}
		return nil
	})
	sts = statefulSetIs(t, db, 2, "postgres:15")
	if p := sts.Spec.PersistentVolumeClaimRetentionPolicy; p == nil || p.WhenDeleted != appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
		t.Errorf("resumed with claim retention %+v, want deletionPolicy Delete's again", p)
	}
	instancePod(t, db, "hib-0", "r1", databasev1alpha1.RolePrimary, "0/6000000")
	instancePod(t, db, "hib-1", "r1", databasev1alpha1.RoleReplica, "0/6000000")
	markReady(t, db)
	waitFor(t, db, "Ready again", phaseIs(databasev1alpha1.PhaseReady))
}

// TestBackupsRunning: a pod asked for a backup that has not reported it
// finished holds a hibernation back.
func TestBackupsRunning(t *testing.T) {
	pod := func(name, asked, report string) corev1.Pod {
		p := corev1.Pod{}
		p.Name, p.Annotations = name, map[string]string{}
		if asked != "" {
			p.Annotations[contract.AnnotationBackupRequest] = asked
		}
		if report != "" {
			p.Annotations[contract.AnnotationInstance] = report
		}
		return p
	}
	got := backupsRunning([]corev1.Pod{
		pod("db-0", "", `{"role":"primary"}`),
		pod("db-1", "b1", `{"role":"replica","backup":{"name":"b1","phase":"Running"}}`),
		pod("db-2", "b2", `{"role":"replica","backup":{"name":"b2","phase":"Completed"}}`),
		pod("db-3", "b3", `{"role":"replica","backup":{"name":"b0","phase":"Completed"}}`),
		pod("db-4", "b4", ""),
	})
	if want := []string{"db-1 (b1)", "db-3 (b3)", "db-4 (b4)"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("backupsRunning = %v, want %v", got, want)
	}
}

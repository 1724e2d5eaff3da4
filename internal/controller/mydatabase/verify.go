package mydatabase

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// +kubebuilder:rbac:groups=database.example.com,resources=mydatabasebackups,verbs=patch

// verifyState is status.backup's view of the verifications of the
// database's backups.
type verifyState struct {
	last   *databasev1alpha1.LastVerification
	passed *metav1.Time
	next   *metav1.Time
}

// verifySchedule is the component of spec.backup.verify.
type verifySchedule struct {
	*kit
	*scope
}

// reconcile gathers the newest verification of any of the database's
// MyDatabaseBackups, and asks for one of the newest completed backup at
// the latest time spec.backup.verify was due since the last it asked for:
// AnnotationVerify, set to that time, which the MyDatabaseBackup
// controller answers with a restore. The request is derived from the
// time, so a pass that repeats itself (a lagging cache, a crash after the
// patch) asks for nothing twice. A new schedule's first verification is
// at once, or as soon as a backup completes.
func (r *verifySchedule) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	if db.Spec.Backup == nil {
		return nil
	}
	list := &databasev1alpha1.MyDatabaseBackupList{}
	if err := r.List(ctx, list, client.InNamespace(db.Namespace)); err != nil {
		return fmt.Errorf("listing the MyDatabaseBackups: %w", err)
	}
	state := &verifyState{}
	obs.verify = state
	now := r.Clock.Now()
	// The last time the schedule asked for, or a person did with a time;
	// never one still to come, which would hold the schedule until then.
	var since time.Time
	for i := range list.Items {
		b := &list.Items[i]
		if b.Spec.Database != db.Name {
			continue
		}
		if t, err := time.Parse(time.RFC3339, b.Annotations[databasev1alpha1.AnnotationVerify]); err == nil && t.After(since) && !t.After(now) {
			since = t
		}
		if v := b.Status.Verification; v.Finished() && v.FinishedAt != nil {
			if state.last == nil || v.FinishedAt.After(state.last.FinishedAt.Time) {
				state.last = &databasev1alpha1.LastVerification{Backup: b.Name, Result: v.Result, FinishedAt: v.FinishedAt}
			}
			if v.Result == databasev1alpha1.VerificationPassed && (state.passed == nil || v.FinishedAt.After(state.passed.Time)) {
				state.passed = v.FinishedAt
			}
		}
	}
	v := db.Spec.Backup.Verify
	if v == nil || v.Suspend || r.mode.followsSource || r.mode.hibernate {
		// A replica's backups are its source's; a hibernated database
		// writes nothing, and its newest backup was verified before.
		return nil
	}
	sched, err := cron.ParseStandard(v.Cron)
	if err != nil {
		obs.stalled = &blocker{Reason: databasev1alpha1.ReasonBackupScheduleInvalid,
			Message: fmt.Sprintf("spec.backup.verify.cron %q does not parse: %v", v.Cron, err)}
		return nil
	}
	due, next := scheduledTimes(sched, since, now)
	state.next = &metav1.Time{Time: next}
	obs.recheck(next.Sub(now))
	newest := databasev1alpha1.NewestCompleted(list.Items, db.Name)
	if due.IsZero() || newest == nil {
		return nil
	}
	request := due.UTC().Format(time.RFC3339)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{ // a map always marshals
		"annotations": map[string]string{databasev1alpha1.AnnotationVerify: request}}})
	if err := r.Patch(ctx, newest, client.RawPatch(types.MergePatchType, patch)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // deleted since the cache saw it; the next pass asks of another
		}
		return objectError("patch", newest, newest.Name, err)
	}
	r.event(db, corev1.EventTypeNormal, "VerificationScheduled", "Asked for a verification of MyDatabaseBackup %s (backup %s) for the schedule's %s",
		newest.Name, newest.Status.BackupID, request)
	return nil
}

// backupDatabase maps a MyDatabaseBackup to the MyDatabase it backs up.
func backupDatabase(_ context.Context, o client.Object) []reconcile.Request {
	b := o.(*databasev1alpha1.MyDatabaseBackup)
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.Database}}}
}

// completedOrVerified passes the backup events verifySchedule acts on: a
// backup that completes (a schedule with none to verify yet verifies it at
// once) and a verification that ends (status.backup and the metrics).
var completedOrVerified = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, b := e.ObjectOld.(*databasev1alpha1.MyDatabaseBackup), e.ObjectNew.(*databasev1alpha1.MyDatabaseBackup)
		return old.Status.Phase != b.Status.Phase || old.Status.Verification.Finished() != b.Status.Verification.Finished()
	},
}

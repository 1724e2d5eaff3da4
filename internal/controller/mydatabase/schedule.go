package mydatabase

import (
	"context"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// +kubebuilder:rbac:groups=database.example.com,resources=mydatabasebackups,verbs=get;list;watch;create

// annotationScheduledAt on a scheduled MyDatabaseBackup is the time of the
// schedule it was made for (RFC 3339).
const annotationScheduledAt = "database.example.com/scheduled-at"

// missedRunsWithin bounds how far back a schedule looks for a time it
// missed (the operator was down): only the latest missed time is ever
// backed up, as a CronJob does.
const missedRunsWithin = 7 * 24 * time.Hour

// scheduleState is status.backup's view of spec.backup.schedule.
type scheduleState struct {
	last, next *metav1.Time
}

// schedule is the component of scheduled backups.
type schedule struct {
	*kit
	*scope
}

// reconcile creates the MyDatabaseBackup of the latest time
// spec.backup.schedule was due since the last one it created, once: the
// name is derived from the time, so a pass that repeats itself (a lagging
// cache, a crash after the create) creates nothing twice. The backups
// are owned by the MyDatabase. A new schedule's first backup is at once.
func (r *schedule) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	if db.Spec.Backup == nil || db.Spec.Backup.Schedule == nil {
		return nil
	}
	s := db.Spec.Backup.Schedule
	sched, err := cron.ParseStandard(s.Cron)
	if err != nil {
		obs.stalled = &blocker{Reason: databasev1alpha1.ReasonBackupScheduleInvalid,
			Message: fmt.Sprintf("spec.backup.schedule.cron %q does not parse: %v", s.Cron, err)}
		return nil
	}
	list := &databasev1alpha1.MyDatabaseBackupList{}
	if err := r.List(ctx, list, client.InNamespace(db.Namespace),
		client.MatchingLabels{databasev1alpha1.LabelScheduledBy: db.Name}); err != nil {
		return fmt.Errorf("listing the scheduled MyDatabaseBackups: %w", err)
	}
	state := &scheduleState{}
	obs.schedule = state
	var since time.Time
	for i := range list.Items {
		b := &list.Items[i]
		if !metav1.IsControlledBy(b, db) {
			continue
		}
		if t, err := time.Parse(time.RFC3339, b.Annotations[annotationScheduledAt]); err == nil && t.After(since) {
			since = t
			state.last = &metav1.Time{Time: t}
		}
	}
	if s.Suspend || r.mode.hibernate || r.mode.followsSource {
		// A hibernation's missed times are not made up on resume beyond
		// the latest (scheduledTimes); a replica's source takes the backups.
		return nil
	}
	now := r.Clock.Now()
	due, next := scheduledTimes(sched, since, now)
	state.next = &metav1.Time{Time: next}
	obs.recheck(next.Sub(now))
	if due.IsZero() {
		return nil
	}
	b := &databasev1alpha1.MyDatabaseBackup{
		ObjectMeta: metav1.ObjectMeta{
			Name:            fmt.Sprintf("%s-%s", db.Name, due.UTC().Format("20060102150405")),
			Namespace:       db.Namespace,
			Labels:          map[string]string{databasev1alpha1.LabelScheduledBy: db.Name},
			Annotations:     map[string]string{annotationScheduledAt: due.UTC().Format(time.RFC3339)},
			OwnerReferences: []metav1.OwnerReference{specs.OwnerReference(db)},
		},
		Spec: databasev1alpha1.MyDatabaseBackupSpec{Database: db.Name, Target: s.Target},
	}
	switch err := r.Create(ctx, b); {
	case err == nil:
		r.event(db, corev1.EventTypeNormal, "BackupScheduled", "Created MyDatabaseBackup %s for the schedule's %s",
			b.Name, due.UTC().Format(time.RFC3339))
	case !apierrors.IsAlreadyExists(err):
		return objectError("create", b, b.Name, err)
	}
	state.last = &metav1.Time{Time: due}
	return nil
}

// scheduledTimes returns the latest time sched was due after since, up
// to now (zero when none was), and the next time it is due. Without a
// backup made yet (since is zero) the latest time due is the first: a
// new schedule backs up at once. Only the latest of the times missed
// (while the operator was down) is due, and only within missedRunsWithin.
func scheduledTimes(sched cron.Schedule, since, now time.Time) (due, next time.Time) {
	from := now.Add(-missedRunsWithin)
	if since.After(from) {
		from = since
	}
	for t := sched.Next(from); !t.After(now); t = sched.Next(t) {
		due = t
	}
	return due, sched.Next(now)
}

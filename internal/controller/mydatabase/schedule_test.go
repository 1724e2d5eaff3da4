package mydatabase

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// withBackup gives a MyDatabase spec.backup, with its credentials Secret.
func withBackup(t *testing.T, ns string) func(*databasev1alpha1.MyDatabase) {
	t.Helper()
	key := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s3-key"},
		Data: map[string][]byte{specs.ObjectStoreAccessKeyIDKey: []byte("AKID"), specs.ObjectStoreSecretAccessKeyKey: []byte("the secret key")}}
	if err := k8s.Create(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	return func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Backup = &databasev1alpha1.BackupSpec{ObjectStore: databasev1alpha1.ObjectStore{
			Endpoint: "https://s3.example.com", Bucket: "backups", CredentialsSecret: "s3-key"}}
	}
}

// TestBackupSchedule: spec.backup.schedule creates one MyDatabaseBackup
// per time it is due, owned by the MyDatabase, and reports the times; a
// suspended schedule, or a hibernated MyDatabase's, creates none; a cron
// that does not parse stalls.
func TestBackupSchedule(t *testing.T) {
	ns := namespace(t)
	// The test clock is 2026-01-02T03:04:05Z: a daily 03:00 schedule is due
	// at once (a new schedule backs up at once), for 03:00 today.
	db := create(t, newDB(ns, "sch", withBackup(t, ns), func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Backup.Schedule = &databasev1alpha1.BackupSchedule{Cron: "0 3 * * *"}
	}))
	name := "sch-20260102030000"
	b := &databasev1alpha1.MyDatabaseBackup{}
	eventually(t, "the scheduled backup", exists(ns, name, b))
	if !metav1.IsControlledBy(b, db) || b.Spec.Database != "sch" || b.Spec.Target != databasev1alpha1.BackupTargetPreferReplica ||
		b.Labels[databasev1alpha1.LabelScheduledBy] != "sch" {
		t.Errorf("the scheduled backup: %+v", b)
	}
	waitFor(t, db, "the schedule's times", func(db *databasev1alpha1.MyDatabase) error {
		st := db.Status.Backup
		if st == nil || st.LastScheduleTime == nil || st.NextScheduleTime == nil ||
			!st.LastScheduleTime.Time.Equal(time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)) ||
			!st.NextScheduleTime.Time.Equal(time.Date(2026, 1, 3, 3, 0, 0, 0, time.UTC)) {
			return fmt.Errorf("status.backup %+v", st)
		}
		return nil
	})
	// Later passes (the children's events bring some) create nothing more
	// until the next time.
	time.Sleep(3 * time.Second)
	list := &databasev1alpha1.MyDatabaseBackupList{}
	if err := k8s.List(context.Background(), list, client.InNamespace(ns)); err != nil || len(list.Items) != 1 {
		t.Errorf("%d backups (%v), want 1", len(list.Items), err)
	}

	suspended := create(t, newDB(ns, "sus", withBackupSecretless, func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Backup.Schedule = &databasev1alpha1.BackupSchedule{Cron: "@hourly", Suspend: true}
	}))
	hibernated := create(t, newDB(ns, "hib", withBackupSecretless, func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Backup.Schedule = &databasev1alpha1.BackupSchedule{Cron: "@hourly"}
		db.Spec.Hibernate = true
	}))
	bad := create(t, newDB(ns, "bad", withBackupSecretless, func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Backup.Schedule = &databasev1alpha1.BackupSchedule{Cron: "61 * * * *"}
	}))
	waitFor(t, bad, "Stalled: the cron", stalledWith(databasev1alpha1.ReasonBackupScheduleInvalid, "61 * * * *"))
	eventually(t, "the suspended one's StatefulSet", exists(ns, "sus", &appsv1.StatefulSet{}))
	time.Sleep(2 * time.Second)
	if err := get(ns, "sus", suspended); err != nil || (suspended.Status.Backup != nil && suspended.Status.Backup.NextScheduleTime != nil) {
		t.Errorf("a suspended schedule has a next time: %+v (%v)", suspended.Status.Backup, err)
	}
	if err := k8s.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{databasev1alpha1.LabelScheduledBy: "sus"}); err != nil || len(list.Items) != 0 {
		t.Errorf("a suspended schedule made %d backups (%v)", len(list.Items), err)
	}
	// A hibernated MyDatabase's schedule waits as a suspended one does.
	waitFor(t, hibernated, "Hibernated", phaseIs(databasev1alpha1.PhaseHibernated))
	if hibernated.Status.Backup != nil && hibernated.Status.Backup.NextScheduleTime != nil {
		t.Errorf("a hibernated MyDatabase's schedule has a next time: %+v", hibernated.Status.Backup)
	}
	if err := k8s.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{databasev1alpha1.LabelScheduledBy: "hib"}); err != nil || len(list.Items) != 0 {
		t.Errorf("a hibernated MyDatabase's schedule made %d backups (%v)", len(list.Items), err)
	}
}

// withBackupSecretless gives spec.backup with the Secret TestBackupSchedule
// already made in the namespace.
func withBackupSecretless(db *databasev1alpha1.MyDatabase) {
	db.Spec.Backup = &databasev1alpha1.BackupSpec{ObjectStore: databasev1alpha1.ObjectStore{
		Endpoint: "https://s3.example.com", Bucket: "backups", CredentialsSecret: "s3-key"}}
}

func TestScheduledTimes(t *testing.T) {
	daily, err := cron.ParseStandard("0 3 * * *")
	if err != nil {
		t.Fatal(err)
	}
	at := func(day, hour, minute int) time.Time { return time.Date(2026, 1, day, hour, minute, 0, 0, time.UTC) }
	for _, tc := range []struct {
		name             string
		since, now       time.Time
		wantDue, wantNxt time.Time
	}{
		{"a new schedule backs up at once", time.Time{}, at(2, 10, 0), at(2, 3, 0), at(3, 3, 0)},
		{"not due again the same day", at(2, 3, 0), at(2, 10, 0), time.Time{}, at(3, 3, 0)},
		{"due at the time", at(2, 3, 0), at(3, 3, 0), at(3, 3, 0), at(4, 3, 0)},
		{"only the latest missed time", at(2, 3, 0), at(6, 12, 0), at(6, 3, 0), at(7, 3, 0)},
		{"nothing missed beyond a week is due twice", at(2, 3, 0), at(30, 1, 0), at(29, 3, 0), at(30, 3, 0)},
	} {
		due, next := scheduledTimes(daily, tc.since, tc.now)
		if !due.Equal(tc.wantDue) || !next.Equal(tc.wantNxt) {
			t.Errorf("%s: due %v next %v, want %v and %v", tc.name, due, next, tc.wantDue, tc.wantNxt)
		}
	}
}

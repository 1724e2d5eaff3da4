package mydatabase

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientretry "k8s.io/client-go/util/retry"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// TestVerifySchedule: spec.backup.verify asks for a verification of the
// newest completed backup (AnnotationVerify, the time it was due), at
// once for a new schedule, and not of an older backup; status.backup
// says when the next is due and how the newest verification ended.
func TestVerifySchedule(t *testing.T) {
	ns := namespace(t)
	// The test clock is 2026-01-02T03:04:05Z: a daily 05:00 verification
	// was last due at 2026-01-01T05:00:00Z, and is due at once.
	db := create(t, newDB(ns, "ver", withBackup(t, ns), func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Backup.Verify = &databasev1alpha1.BackupVerify{Cron: "0 5 * * *"}
	}))
	waitFor(t, db, "the next verification's time", func(db *databasev1alpha1.MyDatabase) error {
		if st := db.Status.Backup; st == nil || st.NextVerifyTime == nil || !st.NextVerifyTime.Time.Equal(time.Date(2026, 1, 2, 5, 0, 0, 0, time.UTC)) {
			return fmt.Errorf("status.backup %+v", st)
		}
		return nil
	})
	// The newest completes first: a pass between the two completions
	// asks for the newest completed then, once for the time due, and a
	// later one for nothing more (CI saw the older one asked for when it
	// completed first, and the newest, after it, never).
	newest := completedBackup(t, ns, "ver", "ver-2", -time.Hour)
	older := completedBackup(t, ns, "ver", "ver-1", -2*time.Hour)
	const due = "2026-01-01T05:00:00Z"
	eventually(t, "a verification of the newest backup", func() error {
		if err := get(ns, newest.Name, newest); err != nil {
			return err
		}
		if got := newest.Annotations[databasev1alpha1.AnnotationVerify]; got != due {
			return fmt.Errorf("%s asks for %q", newest.Name, got)
		}
		return nil
	})
	if err := get(ns, older.Name, older); err != nil || older.Annotations[databasev1alpha1.AnnotationVerify] != "" {
		t.Errorf("the older backup asks for a verification too: %v (%v)", older.Annotations, err)
	}

	// The MyDatabaseBackup controller's answer.
	finished := metav1.NewTime(testNow)
	updateBackupStatus(t, newest, func(st *databasev1alpha1.MyDatabaseBackupStatus) {
		st.Verification = &databasev1alpha1.BackupVerification{Request: due, Result: databasev1alpha1.VerificationPassed, FinishedAt: &finished}
	})
	waitFor(t, db, "the verification in status.backup", func(db *databasev1alpha1.MyDatabase) error {
		st := db.Status.Backup
		if st == nil || st.LastVerification == nil || st.LastVerification.Backup != newest.Name ||
			st.LastVerification.Result != databasev1alpha1.VerificationPassed || st.LastVerifiedTime == nil {
			return fmt.Errorf("status.backup %+v", st)
		}
		return nil
	})

	// A time still to come in a request (a person's typo) does not hold
	// the schedule until then.
	create(t, newDB(ns, "fut", withBackupSecretless, func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Backup.Verify = &databasev1alpha1.BackupVerify{Cron: "0 5 * * *"}
	}))
	typo := completedBackup(t, ns, "fut", "fut-1", -time.Hour, "2099-01-01T05:00:00Z")
	eventually(t, "the schedule's request over the one of 2099", func() error {
		if err := get(ns, typo.Name, typo); err != nil {
			return err
		}
		if got := typo.Annotations[databasev1alpha1.AnnotationVerify]; got != due {
			return fmt.Errorf("%s asks for %q", typo.Name, got)
		}
		return nil
	})

	// A hibernated MyDatabase's schedule asks for none.
	hib := create(t, newDB(ns, "hib", withBackupSecretless, func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Backup.Verify = &databasev1alpha1.BackupVerify{Cron: "0 5 * * *"}
		db.Spec.Hibernate = true
	}))
	asleep := completedBackup(t, ns, "hib", "hib-1", -time.Hour)
	waitFor(t, hib, "Hibernated", phaseIs(databasev1alpha1.PhaseHibernated))
	time.Sleep(2 * time.Second)
	if err := get(ns, asleep.Name, asleep); err != nil || asleep.Annotations[databasev1alpha1.AnnotationVerify] != "" {
		t.Errorf("a hibernated MyDatabase's schedule asks for a verification: %v (%v)", asleep.Annotations, err)
	}
}

// completedBackup plays the MyDatabaseBackup controller: a backup of
// database that completed at testNow plus ago, made with a verification
// request when one is given.
func completedBackup(t *testing.T, ns, database, name string, ago time.Duration, request ...string) *databasev1alpha1.MyDatabaseBackup {
	t.Helper()
	b := &databasev1alpha1.MyDatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: databasev1alpha1.MyDatabaseBackupSpec{Database: database}}
	for _, r := range request {
		metav1.SetMetaDataAnnotation(&b.ObjectMeta, databasev1alpha1.AnnotationVerify, r)
	}
	if err := k8s.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	stopped := metav1.NewTime(testNow.Add(ago))
	updateBackupStatus(t, b, func(st *databasev1alpha1.MyDatabaseBackupStatus) {
		st.Phase, st.BackupID, st.StoppedAt = databasev1alpha1.BackupCompleted, name, &stopped
	})
	return b
}

func updateBackupStatus(t *testing.T, b *databasev1alpha1.MyDatabaseBackup, change func(*databasev1alpha1.MyDatabaseBackupStatus)) {
	t.Helper()
	if err := clientretry.RetryOnConflict(clientretry.DefaultRetry, func() error {
		if err := get(b.Namespace, b.Name, b); err != nil {
			return err
		}
		change(&b.Status)
		return k8s.Status().Update(context.Background(), b)
	}); err != nil {
		t.Fatal(err)
	}
}

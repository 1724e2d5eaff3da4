/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package mydatabase

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
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

func backupObject(t *testing.T, ns, name, database string, target databasev1alpha1.BackupTarget) *databasev1alpha1.MyDatabaseBackup {
	t.Helper()
	b := &databasev1alpha1.MyDatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: databasev1alpha1.MyDatabaseBackupSpec{Database: database, Target: target}}
	if err := k8s.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	return b
}

func waitBackup(t *testing.T, b *databasev1alpha1.MyDatabaseBackup, what string, check func(databasev1alpha1.MyDatabaseBackupStatus) error) {
	t.Helper()
	eventually(t, b.Name+": "+what, func() error {
		if err := get(b.Namespace, b.Name, b); err != nil {
			return err
		}
		return check(b.Status)
	})
}

func failedWith(text string) func(databasev1alpha1.MyDatabaseBackupStatus) error {
	return func(st databasev1alpha1.MyDatabaseBackupStatus) error {
		if st.Phase != databasev1alpha1.BackupFailed || !strings.Contains(st.Message, text) || st.StoppedAt == nil {
			return fmt.Errorf("status %+v, want Failed mentioning %q", st, text)
		}
		return nil
	}
}

// askedOf waits until the backup is assigned to pod, and the pod asked.
func askedOf(t *testing.T, b *databasev1alpha1.MyDatabaseBackup, pod string) {
	t.Helper()
	waitBackup(t, b, "assigned to "+pod, func(st databasev1alpha1.MyDatabaseBackupStatus) error {
		if st.Phase != databasev1alpha1.BackupPending || st.Instance != pod || st.InstanceUID == "" {
			return fmt.Errorf("status %+v, want Pending on %s", st, pod)
		}
		return nil
	})
	eventually(t, pod+" asked for "+b.Name, func() error {
		p := &corev1.Pod{}
		if err := get(b.Namespace, pod, p); err != nil {
			return err
		}
		if got := p.Annotations[contract.AnnotationBackupRequest]; got != b.Name {
			return fmt.Errorf("the pod asks for %q", got)
		}
		return nil
	})
}

// TestMyDatabaseBackup: a MyDatabaseBackup is assigned to one instance (a
// replica unless it says Primary), which its annotation asks; what the
// instance reports becomes its status, and it fails with the reason when
// it cannot be taken.
func TestMyDatabaseBackup(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "bk", withBackup(t, ns), func(db *databasev1alpha1.MyDatabase) { db.Spec.Replicas = ptr.To[int32](2) }))
	eventually(t, "the StatefulSet", exists(ns, "bk", &appsv1.StatefulSet{}))
	instancePod(t, db, "bk-0", "r1", databasev1alpha1.RolePrimary, "0/5000100")
	instancePod(t, db, "bk-1", "r1", databasev1alpha1.RoleReplica, "0/5000100")
	holdLease(t, db, "bk-0")
	markReady(t, db)
	waitFor(t, db, "Ready", phaseIs(databasev1alpha1.PhaseReady))

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
	if err := k8s.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bk-1"}},
		client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "bk-1 gone", func() error {
		if err := get(ns, "bk-1", &corev1.Pod{}); err == nil {
			return fmt.Errorf("still there")
		}
		return nil
	})
	instancePod(t, db, "bk-1", "r1", databasev1alpha1.RoleReplica, "0/5000100")
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

// TestBackupSchedule: spec.backup.schedule creates one MyDatabaseBackup
// per time it is due, owned by the MyDatabase, and reports the times; a
// suspended schedule creates none; a cron that does not parse stalls.
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

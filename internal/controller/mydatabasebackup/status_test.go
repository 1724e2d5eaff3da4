package mydatabasebackup

import (
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/testenv"
)

// kstatusOf is how kubectl wait, Flux and Argo CD read it.
func kstatusOf(t *testing.T, b *databasev1alpha1.MyDatabaseBackup) status.Status {
	return testenv.Kstatus(t, b)
}

// conditionsOf is "Type=Status/Reason" for each condition, sorted.
func conditionsOf(b *databasev1alpha1.MyDatabaseBackup) []string {
	var out []string
	for _, c := range b.Status.Conditions {
		out = append(out, c.Type+"="+string(c.Status)+"/"+c.Reason)
	}
	slices.Sort(out)
	return out
}

// TestSetConditions: every phase, as the conditions say it and as kstatus
// reads them; from a fresh backup and from the phase before it.
func TestSetConditions(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const waiting = "waiting for a ready primary or replica to take the backup: no instance reports one"
	completed := databasev1alpha1.MyDatabaseBackupStatus{Phase: databasev1alpha1.BackupCompleted,
		BackupID: "20260102T030500Z", Size: 1234567, BeginLSN: "0/6000028", EndLSN: "0/6000138"}
	incremental, fullWhy := completed, completed
	incremental.Type, incremental.ParentBackupID = databasev1alpha1.BackupIncremental, "20260101T030500Z"
	fullWhy.Type, fullWhy.Message = databasev1alpha1.BackupFull, "a full backup: PostgreSQL 15 takes full backups only: incremental backups need PostgreSQL 17 or later"
	for name, tc := range map[string]struct {
		before     []databasev1alpha1.MyDatabaseBackupStatus // earlier passes, in order
		status     databasev1alpha1.MyDatabaseBackupStatus
		conditions []string // sorted
		message    string   // of Ready, and of Reconciling or Stalled when present
		kstatus    status.Status
	}{
		"new, not looked at yet": {nil, databasev1alpha1.MyDatabaseBackupStatus{},
			[]string{"Ready=False/BackupPending", "Reconciling=True/BackupPending"}, "", status.InProgressStatus},
		"pending": {nil, databasev1alpha1.MyDatabaseBackupStatus{Phase: databasev1alpha1.BackupPending, Message: waiting},
			[]string{"Ready=False/BackupPending", "Reconciling=True/BackupPending"}, waiting, status.InProgressStatus},
		"running": {[]databasev1alpha1.MyDatabaseBackupStatus{{Phase: databasev1alpha1.BackupPending, Message: waiting}},
			databasev1alpha1.MyDatabaseBackupStatus{Phase: databasev1alpha1.BackupRunning, Message: "pg_basebackup is copying the data"},
			[]string{"Ready=False/BackupRunning", "Reconciling=True/BackupRunning"}, "pg_basebackup is copying the data", status.InProgressStatus},
		"completed": {[]databasev1alpha1.MyDatabaseBackupStatus{{Phase: databasev1alpha1.BackupRunning, Message: "copying"}}, completed,
			[]string{"Ready=True/BackupCompleted"},
			"backup 20260102T030500Z is in the object store: 1234567 bytes, consistent with the WAL from 0/6000028 to 0/6000138",
			status.CurrentStatus},
		"completed, incremental": {nil, incremental, []string{"Ready=True/BackupCompleted"},
			"backup 20260102T030500Z is in the object store: 1234567 bytes, consistent with the WAL from 0/6000028 to 0/6000138, " +
				"incremental on backup 20260101T030500Z", status.CurrentStatus},
		"completed, full while incremental backups are on": {nil, fullWhy, []string{"Ready=True/BackupCompleted"},
			"backup 20260102T030500Z is in the object store: 1234567 bytes, consistent with the WAL from 0/6000028 to 0/6000138; " +
				fullWhy.Message, status.CurrentStatus},
		"failed while running": {[]databasev1alpha1.MyDatabaseBackupStatus{{Phase: databasev1alpha1.BackupRunning, Message: "copying"}},
			databasev1alpha1.MyDatabaseBackupStatus{Phase: databasev1alpha1.BackupFailed, Message: "pg_basebackup: could not connect"},
			[]string{"Ready=False/BackupFailed", "Stalled=True/BackupFailed"},
			"pg_basebackup: could not connect; a failed backup is not retried: create a new MyDatabaseBackup once the cause is fixed",
			status.FailedStatus},
		"failed, saying what to do": {nil,
			databasev1alpha1.MyDatabaseBackupStatus{Phase: databasev1alpha1.BackupFailed,
				Message: "pod db-1, which was taking the backup, was deleted or replaced: create a new MyDatabaseBackup"},
			[]string{"Ready=False/BackupFailed", "Stalled=True/BackupFailed"},
			"pod db-1, which was taking the backup, was deleted or replaced: create a new MyDatabaseBackup", status.FailedStatus},
	} {
		t.Run(name, func(t *testing.T) {
			b := &databasev1alpha1.MyDatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "b", Generation: 1}}
			for _, st := range tc.before {
				st.Conditions = b.Status.Conditions
				b.Status = st
				setConditions(b, now.Add(-time.Minute))
			}
			tc.status.Conditions = b.Status.Conditions
			b.Status = tc.status
			setConditions(b, now)
			if diff := cmp.Diff(tc.conditions, conditionsOf(b)); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			for _, c := range b.Status.Conditions {
				if c.Message != tc.message || c.ObservedGeneration != 1 {
					t.Errorf("%s: message %q at generation %d, want %q at 1", c.Type, c.Message, c.ObservedGeneration, tc.message)
				}
			}
			if b.Status.ObservedGeneration != 1 {
				t.Errorf("observedGeneration %d, want 1", b.Status.ObservedGeneration)
			}
			if got := kstatusOf(t, b); got != tc.kstatus {
				t.Errorf("kstatus %s, want %s", got, tc.kstatus)
			}
		})
	}
}

// TestSetConditionsTransitionTime: Ready keeps the time it became False
// while the backup moves from Pending to Running, and takes the time it
// became True.
func TestSetConditionsTransitionTime(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	b := &databasev1alpha1.MyDatabaseBackup{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
	b.Status.Phase = databasev1alpha1.BackupPending
	setConditions(b, created)
	b.Status.Phase = databasev1alpha1.BackupRunning
	setConditions(b, created.Add(time.Minute))
	if ready := meta.FindStatusCondition(b.Status.Conditions, databasev1alpha1.ConditionReady); !ready.LastTransitionTime.Time.Equal(created) {
		t.Errorf("Ready moved to %v while still False, want %v", ready.LastTransitionTime, created)
	}
	done := created.Add(10 * time.Minute)
	b.Status.Phase = databasev1alpha1.BackupCompleted
	setConditions(b, done)
	if ready := meta.FindStatusCondition(b.Status.Conditions, databasev1alpha1.ConditionReady); !ready.LastTransitionTime.Time.Equal(done) {
		t.Errorf("Ready True since %v, want %v", ready.LastTransitionTime, done)
	}
}

// TestConditionMessageFitsTheAPI: a failure longer than the API server
// takes in a condition's message is cut, between characters, and still
// says what to do; status.message keeps all of it.
func TestConditionMessageFitsTheAPI(t *testing.T) {
	long := strings.Repeat("é", maxConditionMessage) // two bytes each
	for _, phase := range []databasev1alpha1.BackupPhase{databasev1alpha1.BackupRunning, databasev1alpha1.BackupFailed} {
		b := &databasev1alpha1.MyDatabaseBackup{Status: databasev1alpha1.MyDatabaseBackupStatus{Phase: phase, Message: "x" + long}}
		setConditions(b, time.Now())
		for _, c := range b.Status.Conditions {
			if len(c.Message) > maxConditionMessage || !utf8.ValidString(c.Message) {
				t.Errorf("%s: %s's message is %d bytes (valid UTF-8: %t)", phase, c.Type, len(c.Message), utf8.ValidString(c.Message))
			}
			if phase == databasev1alpha1.BackupFailed && !strings.HasSuffix(c.Message, newBackupAdvice+" once the cause is fixed") {
				t.Errorf("%s's message lost its advice: ...%s", c.Type, c.Message[len(c.Message)-80:])
			}
		}
		if b.Status.Message != "x"+long {
			t.Errorf("%s: status.message was cut", phase)
		}
	}
}

package mydatabasebackup

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// newBackupAdvice is what a person does about any failed backup, which is
// never retried.
const newBackupAdvice = "create a new MyDatabaseBackup"

// maxConditionMessage is the API server's limit on a condition's message.
// status.message has none, and an instance's failure may quote a tool at
// length: a longer condition message would make every status write of the
// backup fail, and it would never finish.
const maxConditionMessage = 32768

// setConditions sets b's conditions and observedGeneration from its phase
// and message, in the kstatus convention of a MyDatabase
// (internal/controller/mydatabase, computeStatus):
//   - Pending, Running: Ready False and Reconciling True, with the reason
//     of the phase and status.message, which says what the backup waits
//     for.
//   - Completed: Ready True; neither Reconciling nor Stalled.
//   - Failed: Ready False and Stalled True, BackupFailed: only a person can
//     have another backup taken. The message is the failure's, and says
//     to create a new MyDatabaseBackup when it does not already.
//
// observedGeneration is b's generation: every pass acts on the whole of a
// spec that never changes, so there is no generation still in progress.
func setConditions(b *databasev1alpha1.MyDatabaseBackup, now time.Time) {
	st := &b.Status
	st.ObservedGeneration = b.Generation
	set := func(typ string, status metav1.ConditionStatus, reason, message string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: typ, Status: status, Reason: reason, Message: message,
			ObservedGeneration: b.Generation, LastTransitionTime: metav1.NewTime(now),
		})
	}
	switch st.Phase {
	case databasev1alpha1.BackupCompleted:
		meta.RemoveStatusCondition(&st.Conditions, databasev1alpha1.ConditionReconciling)
		meta.RemoveStatusCondition(&st.Conditions, databasev1alpha1.ConditionStalled)
		set(databasev1alpha1.ConditionReady, metav1.ConditionTrue, databasev1alpha1.ReasonBackupCompleted,
			fmt.Sprintf("backup %s is in the object store: %d bytes, consistent with the WAL from %s to %s",
				st.BackupID, st.Size, st.BeginLSN, st.EndLSN))
	case databasev1alpha1.BackupFailed:
		message := failedMessage(st.Message)
		meta.RemoveStatusCondition(&st.Conditions, databasev1alpha1.ConditionReconciling)
		set(databasev1alpha1.ConditionStalled, metav1.ConditionTrue, databasev1alpha1.ReasonBackupFailed, message)
		set(databasev1alpha1.ConditionReady, metav1.ConditionFalse, databasev1alpha1.ReasonBackupFailed, message)
	default:
		reason := databasev1alpha1.ReasonBackupPending
		if st.Phase == databasev1alpha1.BackupRunning {
			reason = databasev1alpha1.ReasonBackupRunning
		}
		message := clip(st.Message, maxConditionMessage)
		meta.RemoveStatusCondition(&st.Conditions, databasev1alpha1.ConditionStalled)
		set(databasev1alpha1.ConditionReconciling, metav1.ConditionTrue, reason, message)
		set(databasev1alpha1.ConditionReady, metav1.ConditionFalse, reason, message)
	}
}

// failedMessage is the Stalled message of a failure: the failure, and
// what to do about it unless it says so already.
func failedMessage(failure string) string {
	advice := "; a failed backup is not retried: " + newBackupAdvice + " once the cause is fixed"
	if strings.Contains(failure, newBackupAdvice) {
		advice = ""
	}
	return clip(failure, maxConditionMessage-len(advice)) + advice
}

// clip cuts s to at most n bytes, never inside a character.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

package mydatabasebackup

import (
	"fmt"
	"strings"
	"time"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/conditions"
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
// and message (conditions.Set):
//   - Pending, Running: in progress, with the reason of the phase and
//     status.message, which says what the backup waits for.
//   - Completed: current.
//   - Failed: stalled, BackupFailed: only a person can have another
//     backup taken. The message is the failure's, and says to create a
//     new MyDatabaseBackup when it does not already.
//
// observedGeneration is b's generation: every pass acts on the whole of a
// spec that never changes, so there is no generation still in progress.
func setConditions(b *databasev1alpha1.MyDatabaseBackup, now time.Time) {
	b.Status.ObservedGeneration = b.Generation
	conditions.Set(&b.Status.Conditions, b.Generation, now, summary(&b.Status))
	setVerified(b, now)
}

// summary is what the phase of st says to kstatus.
func summary(st *databasev1alpha1.MyDatabaseBackupStatus) conditions.Summary {
	switch st.Phase {
	case databasev1alpha1.BackupCompleted:
		return conditions.Summary{State: conditions.Current, Reason: databasev1alpha1.ReasonBackupCompleted,
			Message: clip(fmt.Sprintf("backup %s is in the object store: %d bytes, consistent with the WAL from %s to %s%s",
				st.BackupID, st.Size, st.BeginLSN, st.EndLSN, st.BuildsOn()), maxConditionMessage)}
	case databasev1alpha1.BackupFailed:
		return conditions.Summary{State: conditions.Failed, Reason: databasev1alpha1.ReasonBackupFailed, Message: failedMessage(st.Message)}
	case databasev1alpha1.BackupRunning:
		return conditions.Summary{State: conditions.InProgress, Reason: databasev1alpha1.ReasonBackupRunning,
			Message: clip(st.Message, maxConditionMessage)}
	default:
		return conditions.Summary{State: conditions.InProgress, Reason: databasev1alpha1.ReasonBackupPending,
			Message: clip(st.Message, maxConditionMessage)}
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

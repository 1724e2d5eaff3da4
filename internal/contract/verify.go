package contract

import (
	"encoding/json"
	"time"
)

// A backup's verification (spec.backup.verify) runs the instance manager
// as `instance verify` in a pod of its own: it restores one base backup
// and the archive after it into an empty data directory (PGDATA), on a
// server no client reaches, checks what it restored, and says so in its
// container's termination message. It reads the store and the backup
// from the RestoreStore variables and EnvRestoreBackupID, as a restore
// does, and archives nothing.
const (
	// VerifyCommand is the instance manager's subcommand.
	VerifyCommand = "verify"

	// EnvVerifyResultFile is where it writes its Verification as JSON:
	// the container's terminationMessagePath. Optional: without it, only
	// to standard output.
	EnvVerifyResultFile = "VERIFY_RESULT_FILE"

	// MaxVerificationMessage bounds Verification.Message so that the JSON
	// fits a termination message (4096 bytes).
	MaxVerificationMessage = 3072
)

// Results of a verification, and the exit codes that go with them.
const (
	// VerificationPassed (exit 0): the backup restored, recovery replayed
	// the archive to its end (past the backup's end LSN), and pg_amcheck
	// found no corruption in any database.
	VerificationPassed = "Passed"
	// VerificationFailed (exit 1): the backup, or the archive after it,
	// does not restore, or what it restored fails a check; Message says
	// which object or which check.
	VerificationFailed = "Failed"
	// VerificationError (exit 2): the verification could not run (the store
	// unreachable, the disk full, PostgreSQL would not start): it says
	// nothing of the backup.
	VerificationError = "Error"
)

// VerificationExitCode is the exit code of each result.
var VerificationExitCode = map[string]int{VerificationPassed: 0, VerificationFailed: 1, VerificationError: 2}

// Verification is what a verification pod says of the backup it restored.
type Verification struct {
	Result   string `json:"result"`
	BackupID string `json:"backupID"`
	// ReachedLSN is where recovery ended: the end of the archive.
	ReachedLSN string `json:"reachedLSN,omitempty"`
	// Databases is how many databases pg_amcheck checked.
	Databases int       `json:"databases,omitempty"`
	Message   string    `json:"message"`
	Started   time.Time `json:"started"`
	Stopped   time.Time `json:"stopped"`
}

// String is v as JSON, as the termination message holds it.
func (v Verification) String() string {
	b, _ := json.Marshal(v) // a Verification always marshals
	return string(b)
}

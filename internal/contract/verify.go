package contract

import (
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"
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

// terminationMessageLimit is the size of a termination message, which
// the JSON must fit.
const terminationMessageLimit = 4096

// Encode is v as one line of JSON, as the termination message holds it:
// its Message clipped to MaxVerificationMessage bytes, and further if
// escapes make the line longer than a termination message.
func (v Verification) Encode() []byte {
	v.Message = clip(v.Message, MaxVerificationMessage)
	for {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(v) // a Verification always encodes
		over := b.Len() - terminationMessageLimit
		if over <= 0 || v.Message == "" {
			return []byte(b.String())
		}
		// A byte takes at most 6 in JSON (\u0001): cutting a sixth of
		// the excess at a time cuts no more than needed.
		v.Message = clip(v.Message, len(v.Message)-max(over/6, 1))
	}
}

// clip cuts s to at most n bytes, at the start of a character.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

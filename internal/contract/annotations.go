package contract

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
)

const (
	// AnnotationInstance on a pod is its instance manager's report, JSON
	// (Report): role, readiness, timeline, WAL positions and the address
	// the other instances reach it at.
	AnnotationInstance = "database.example.com/instance"
	// AnnotationSwitchoverTo on the primary Lease names the instance the
	// primary is to hand the Lease to, in a planned switchover. The
	// operator writes it (status.targetPrimary); the primary's instance
	// manager removes it when it hands the Lease over.
	AnnotationSwitchoverTo = "database.example.com/switchover-to"
	// AnnotationPoolersPaused on the primary Lease is how many pods of
	// each pooler paused their clients for the last switchover
	// (PoolerSwitchoverChannel, FormatPoolersPaused): the primary that
	// hands the Lease over writes it, the operator reports it with the
	// switchover, in the MyDatabase's status and each pooler's.
	AnnotationPoolersPaused = "database.example.com/poolers-paused"
	// AnnotationQuorum on the primary Lease is the MyDatabase's Quorum,
	// JSON: there a change reaches the instance managers without a pod
	// restart.
	AnnotationQuorum = "database.example.com/quorum"
	// AnnotationReplica on the primary Lease of a MyDatabase with
	// spec.replica is ReplicaFollow while spec.replica.enabled,
	// ReplicaPromote while it is false. Either takes effect without a pod
	// restart: a designated primary that reads ReplicaPromote promotes in
	// place, a primary that takes writes and reads ReplicaFollow demotes.
	AnnotationReplica = "database.example.com/replica"
	// AnnotationPromotionToken on the primary Lease of a replica
	// MyDatabase asked to promote is spec.replica.promotionToken: the
	// designated primary promotes only once it has replayed past it.
	AnnotationPromotionToken = "database.example.com/promotion-token"
	// AnnotationBackupRequest on a pod asks its instance manager to take a
	// base backup: the value is the MyDatabaseBackup's name. The instance
	// manager reports the run in Report.Backup.
	AnnotationBackupRequest = "database.example.com/backup-request"
)

// The values of AnnotationReplica.
const (
	ReplicaFollow  = "follow"
	ReplicaPromote = "promote"
)

// The exit codes of the major upgrade Job's instance manager
// (internal/instance, upgrade.go), which the operator reads from the Job's
// pod.
const (
	// UpgradeExitOldDataUntouched: pg_upgrade (or a check before it) failed
	// before the point of no return; the old data is as it was.
	UpgradeExitOldDataUntouched = 10
	// UpgradeExitPastPointOfNoReturn: it failed after pg_upgrade --link
	// began linking the old cluster's files into the new one.
	UpgradeExitPastPointOfNoReturn = 11
)

// UpgradeTimelinePrefix starts the termination message of an upgrade
// that succeeded, followed by the timeline the upgraded data starts on
// ("timeline 5"): above every timeline of the old cluster and of its
// archive, so that archiving goes on at the same path.
const UpgradeTimelinePrefix = "timeline "

// The files of the operator's ConfigMap, mounted in the directory
// EnvConfigDir names.
const (
	PostgresConfFile = "postgresql.conf"
	HBAConfFile      = "pg_hba.conf"
)

// ReplicationRole is the PostgreSQL role the replicas stream as. It has no
// password: the replicas present a client certificate for it, which the
// operator issues.
const ReplicationRole = "replicator"

// ReplaceCommand is what the operator runs in a database container, with
// the new instance manager's binary on its standard input, to replace the
// running instance manager in place (internal/instance, reexec.go): path is
// the instance manager the container started with, digest the new
// binary's SHA-256 in hex. It exits 0 once the new one runs.
func ReplaceCommand(path, digest string) []string {
	return []string{path, "replace", "--digest", digest}
}

// Digest is the SHA-256 of a file, in hex: of an instance manager's
// binary, its version.
func Digest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

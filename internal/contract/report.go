package contract

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MinInterval is the least time between two reports that differ only in
// their WAL positions.
const MinInterval = 10 * time.Second

// Report is one instance's state.
type Report struct {
	// Role is "primary" or "replica", empty when the server is not running.
	Role string `json:"role,omitempty"`
	// Ready: the server accepts connections in Role.
	Ready bool `json:"ready"`
	// SystemID is the PostgreSQL system identifier, the same on every
	// instance of one database.
	SystemID string `json:"systemID,omitempty"`
	Timeline int64  `json:"timeline,omitempty"`
	// LSN is the primary's current WAL position, or what a replica has
	// received (replayed, if it streams nothing).
	LSN string `json:"lsn,omitempty"`
	// Replayed is a replica's replay position.
	Replayed string `json:"replayed,omitempty"`
	// Address is host:port where the other instances reach this server.
	Address string `json:"address,omitempty"`
	// Failsafe is host:port of this instance's failsafe endpoint, where a
	// primary that cannot reach the API server asks for its promise
	// (internal/instance, failsafe.go).
	Failsafe string `json:"failsafe,omitempty"`
	// Candidate is set while the instance stands for election after the
	// Lease expired (see internal/instance, elect).
	Candidate *Candidacy `json:"candidate,omitempty"`
	// Passwords maps each password Secret the instance manager reads to the
	// resourceVersion whose password its server accepts for the role
	// (internal/instance, rotate.go): never a password, nor anything
	// derived from one.
	Passwords map[string]string `json:"passwords,omitempty"`
	// Declared maps each declared role, database and extension
	// (AnnotationDeclared; keys RoleKey, DatabaseKey, ExtensionKey) to ""
	// once the primary has applied it, or to why it could not
	// (PostgreSQL's error, in plain words). The primary's only.
	Declared map[string]string `json:"declared,omitempty"`
	// DeclaredOf is the DeclaredDigest of the declaration Declared is the
	// outcome of.
	DeclaredOf string `json:"declaredOf,omitempty"`
	// Archive is the primary's continuous archiving, with spec.backup.
	Archive *Archive `json:"archive,omitempty"`
	// Backup is the last base backup this instance was asked to take (a
	// MyDatabaseBackup), nil when none was.
	Backup *BackupRun `json:"backup,omitempty"`
	// Restore is the restore of this instance's data from an object store
	// (spec.bootstrap.recovery) while it runs, or after it failed; nil
	// before one and once one succeeded.
	Restore *Restore `json:"restore,omitempty"`
	// Replica is set by the designated primary of a replica MyDatabase
	// (Role primary, but a standby that replays its source's archive):
	// where its replay stands. Replayed is its replay position.
	Replica *ReplicaState `json:"replica,omitempty"`
	// Storage is the data volume as the report measured it; like the WAL
	// positions, a change of it alone is sent at most every MinInterval.
	Storage *Storage `json:"storage,omitempty"`
	// Certificates is the CertificatesDigest of the certificate files the
	// server has loaded (the copies it last reloaded with): the operator
	// compares it with the Secrets' to know that a changed trust bundle
	// or certificate is in use (a CA rotation's stages wait for it). Empty
	// from instance managers before the version that reports it.
	Certificates string `json:"certificates,omitempty"`
	// Manager is the version of the instance manager that made the report:
	// the SHA-256 of its binary, in hex. Empty from instance managers that
	// cannot be replaced in place (before the version that reports it).
	Manager string `json:"manager,omitempty"`
	// Time is when the report was made.
	Time time.Time `json:"time"`
}

// ReplicaState is a designated primary's replay of its source's archive.
type ReplicaState struct {
	// LastWAL is the last WAL file fetched from the source's archive.
	LastWAL string `json:"lastWAL,omitempty"`
	// ReplayedAt is the source's commit time of the last transaction
	// replayed.
	ReplayedAt *time.Time `json:"replayedAt,omitempty"`
	// Streaming: it streams from the source's primary, which had flushed
	// WAL up to SourceLSN at its last message.
	Streaming bool   `json:"streaming,omitempty"`
	SourceLSN string `json:"sourceLSN,omitempty"`
	// DemotionToken is where this MyDatabase's own WAL ended when it was
	// demoted (FormatToken), until it follows a newer timeline.
	DemotionToken string `json:"demotionToken,omitempty"`
	// Waiting says what a promotion waits for (the promotion token's WAL).
	Waiting string `json:"waiting,omitempty"`
	// Rejoined says that the data was rewound or copied again to the
	// source's history when it was demoted, and what it lost there, until
	// it is promoted.
	Rejoined string `json:"rejoined,omitempty"`
}

// FormatToken is a demotion or promotion token: <timeline>/<LSN>.
func FormatToken(timeline int64, lsn uint64) string {
	return fmt.Sprintf("%d/%s", timeline, FormatLSN(lsn))
}

// ParseToken reads a FormatToken.
func ParseToken(s string) (timeline int64, lsn uint64, err error) {
	tli, rest, ok := strings.Cut(s, "/")
	if !ok {
		return 0, 0, fmt.Errorf("token %q is not <timeline>/<LSN>", s)
	}
	if timeline, err = strconv.ParseInt(tli, 10, 64); err != nil || timeline < 1 {
		return 0, 0, fmt.Errorf("token %q: timeline %q is not a number from 1", s, tli)
	}
	if lsn, err = LSN(rest); err != nil {
		return 0, 0, fmt.Errorf("token %q: %w", s, err)
	}
	return timeline, lsn, nil
}

// Storage is an instance's data volume (statfs), its WAL (the files in
// pg_wal) and, with a WAL volume of its own (EnvWALDir), that volume.
type Storage struct {
	CapacityBytes     int64 `json:"capacityBytes"`
	AvailableBytes    int64 `json:"availableBytes"`
	WALBytes          int64 `json:"walBytes"`
	WALCapacityBytes  int64 `json:"walCapacityBytes,omitempty"`
	WALAvailableBytes int64 `json:"walAvailableBytes,omitempty"`
}

// Archive is where a primary's WAL archiving stands (pg_stat_archiver,
// and what the archive command said of its last failure).
type Archive struct {
	LastArchivedWAL  string     `json:"lastArchivedWAL,omitempty"`
	LastArchivedTime *time.Time `json:"lastArchivedTime,omitempty"`
	LastFailedWAL    string     `json:"lastFailedWAL,omitempty"`
	LastFailedTime   *time.Time `json:"lastFailedTime,omitempty"`
	// Error is the archive command's last error, while the last attempt
	// failed.
	Error string `json:"error,omitempty"`
	// Backups is what the object store held at the last look (every few
	// minutes), nil before the first.
	Backups *Backups `json:"backups,omitempty"`
}

// Backups sums up the complete base backups in the object store.
type Backups struct {
	Count int `json:"count"`
	// LastID and LastTime: the newest backup and when it finished.
	LastID   string     `json:"lastID,omitempty"`
	LastTime *time.Time `json:"lastTime,omitempty"`
	// FirstRecoverableTime: the oldest backup's end, the earliest time a
	// restore can reach.
	FirstRecoverableTime *time.Time `json:"firstRecoverableTime,omitempty"`
}

// BackupRun is a base backup an instance takes or took.
type BackupRun struct {
	// Name is the MyDatabaseBackup's.
	Name string `json:"name"`
	// Phase is Running, Completed or Failed; Message says what it waits
	// for, or why it failed.
	Phase   string `json:"phase"`
	Message string `json:"message,omitempty"`

	Started *time.Time `json:"started,omitempty"`
	Stopped *time.Time `json:"stopped,omitempty"`
	// ID, Size, Timeline, BeginLSN and EndLSN are the backup's, once it is
	// in the store; BeginWAL and EndWAL the WAL files that hold them.
	ID       string `json:"id,omitempty"`
	Size     int64  `json:"size,omitempty"`
	Timeline int64  `json:"timeline,omitempty"`
	BeginLSN string `json:"beginLSN,omitempty"`
	EndLSN   string `json:"endLSN,omitempty"`
	BeginWAL string `json:"beginWAL,omitempty"`
	EndWAL   string `json:"endWAL,omitempty"`
	// Parent is the backup an incremental backup builds on; empty for a
	// full one, whose completed run's Message says why it is full when
	// incremental backups are on.
	Parent string `json:"parent,omitempty"`
}

// Restore is where the restore of a new primary's data stands.
type Restore struct {
	// BackupID is the base backup restored.
	BackupID string `json:"backupID"`
	// Phase is Running or Failed (RestoreRunning, RestoreFailed).
	Phase string `json:"phase"`
	// LastWAL is the last WAL file recovery fetched from the archive.
	LastWAL string `json:"lastWAL,omitempty"`
	// Stalled: recovery has fetched nothing new for longer than the
	// instance manager's bound while it runs.
	Stalled bool `json:"stalled,omitempty"`
	// Message says what it waits for, or why it failed, in plain words.
	Message string `json:"message,omitempty"`
}

// The phases of a Restore.
const (
	RestoreRunning = "Running"
	RestoreFailed  = "Failed"
)

// Failing tells whether the last attempt to archive failed.
func (a *Archive) Failing() bool {
	return a.LastFailedTime != nil && (a.LastArchivedTime == nil || a.LastFailedTime.After(*a.LastArchivedTime))
}

// PasswordRefused prefixes, in Passwords, the resourceVersion of a Secret
// whose password the instance manager will not set (not printable ASCII).
const PasswordRefused = "refused:"

// Candidacy is an instance's claim in one election: the Lease version it
// saw expire (the term) and how much WAL it has, on which timeline.
type Candidacy struct {
	Term string `json:"term"`
	LSN  string `json:"lsn"`
	// Timeline is the candidate's; 0 from an instance manager older than
	// this field, whose candidacy is then compared by LSN alone.
	Timeline int64 `json:"timeline,omitempty"`
	// Promised: the candidate promised the Lease's holder not to take it
	// (failsafe): its position counts, but not as an elector.
	Promised bool `json:"promised,omitempty"`
}

// Parse reads a report from the annotation's value; a value it refuses
// reads as the zero Report, never as the fields decoded before the error.
func Parse(s string) (Report, error) {
	var r Report
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return Report{}, fmt.Errorf("instance report: %w", err)
	}
	return r, nil
}

// String is the annotation's value.
func (r Report) String() string {
	b, _ := json.Marshal(r) // a Report always marshals
	return string(b)
}

// LSN parses a position in PostgreSQL's X/Y form, as pg_lsn does: two
// groups of 1 to 8 hex digits, nothing else; empty is 0. (pglogrepl's
// ParseLSN takes trailing text and wraps halves wider than 32 bits.)
func LSN(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	hi, lo, ok := strings.Cut(s, "/")
	h, herr := lsnHalf(hi)
	l, lerr := lsnHalf(lo)
	if !ok || herr != nil || lerr != nil {
		return 0, fmt.Errorf("WAL position %q is not in PostgreSQL's X/Y form", s)
	}
	return h<<32 | l, nil
}

func lsnHalf(s string) (uint64, error) {
	if len(s) > 8 || strings.Trim(s, "0123456789abcdefABCDEF") != "" {
		return 0, strconv.ErrSyntax
	}
	return strconv.ParseUint(s, 16, 32)
}

// FormatLSN writes a position in PostgreSQL's X/Y form.
func FormatLSN(l uint64) string { return pglogrepl.LSN(l).String() }

// Material tells whether next differs from r in more than WAL positions,
// storage, a replica's progress and time: such a change is reported at
// once.
func (r Report) Material(next Report) bool {
	a, b := r, next
	a.LSN, a.Replayed, a.Storage, a.Time = "", "", nil, time.Time{}
	b.LSN, b.Replayed, b.Storage, b.Time = "", "", nil, time.Time{}
	if a.Replica != nil && b.Replica != nil {
		// Only whether it streams, and a rejoin, are material.
		a.Replica = &ReplicaState{Streaming: a.Replica.Streaming, Rejoined: a.Replica.Rejoined}
		b.Replica = &ReplicaState{Streaming: b.Replica.Streaming, Rejoined: b.Replica.Rejoined}
	}
	return a.String() != b.String()
}

// CertificatesDigest is what an instance reports of the certificate files
// it has loaded (Report.Certificates), and what the operator computes of
// the Secrets: the server certificate and its ca.crt, and the replication
// client certificate and its ca.crt (the bundle the server verifies
// client certificates with). Keys are left out: a report is no place for
// anything derived from one.
func CertificatesDigest(serverCert, serverCA, replicationCert, replicationCA []byte) string {
	h := sha256.New()
	for _, b := range [][]byte{serverCert, serverCA, replicationCert, replicationCA} {
		sum := sha256.Sum256(b)
		h.Write(sum[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// MetaTime is a time of a report as a status holds it; nil for none.
func MetaTime(t *time.Time) *metav1.Time {
	if t == nil {
		return nil
	}
	return &metav1.Time{Time: *t}
}

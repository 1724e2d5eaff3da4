package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BackupSpec is where this MyDatabase's backups go: its primary archives
// every WAL file there, compressed, and base backups are taken into it
// (docs/backup.md).
type BackupSpec struct {
	// objectStore is the S3-compatible bucket.
	ObjectStore ObjectStore `json:"objectStore"`

	// schedule takes base backups on a cron schedule, as MyDatabaseBackup
	// objects named <name>-<time of the schedule>.
	// +optional
	Schedule *BackupSchedule `json:"schedule,omitempty"`

	// retention deletes expired base backups from the object store, and
	// the WAL no backup kept still needs. Without it nothing is deleted.
	// +optional
	Retention *BackupRetention `json:"retention,omitempty"`

	// encryption encrypts the WAL and base backups with age before they
	// leave the pod. Objects written before it was set stay readable.
	// +optional
	Encryption *BackupEncryption `json:"encryption,omitempty"`

	// verify restores the newest completed base backup on a schedule, in
	// a pod of its own, and checks what it restored (docs/backup.md,
	// "Verified backups"). Off without it.
	// +optional
	Verify *BackupVerify `json:"verify,omitempty"`

	// incremental makes base backups incremental on PostgreSQL 17 or
	// later (pg_basebackup --incremental): each holds only the blocks
	// changed since the backup before it, and a restore combines the
	// chain with pg_combinebackup (docs/backup.md, "Incremental
	// backups"). PostgreSQL 15 and 16 keep taking full backups, and each
	// backup's status says why it is full. Without it every backup is
	// full. Setting or changing it restarts the servers, one at a time.
	// +optional
	Incremental *IncrementalBackups `json:"incremental,omitempty"`
}

// IncrementalBackups is how long a chain of incremental backups grows.
type IncrementalBackups struct {
	// fullEvery is how many backups a chain holds: a full backup, then
	// fullEvery-1 incremental ones on top of each other. A restore reads
	// and unpacks the whole chain, so it needs room for the chain beside
	// the data; retention keeps every backup a kept one builds on.
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=100
	FullEvery int32 `json:"fullEvery"`
}

// BackupVerify is when backups are proven by a restore.
type BackupVerify struct {
	// cron is when the newest completed MyDatabaseBackup is verified: a
	// five-field cron expression or a descriptor such as "@weekly", in
	// UTC. Each verification restores the backup and replays the whole
	// archive after it, so it costs a volume as large as the data and the
	// time of a restore.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.startsWith('@') || self.split(' ').filter(f, f != '').size() == 5",message="verify.cron is five fields (minute hour day-of-month month day-of-week), e.g. \"0 5 * * *\", or a descriptor such as \"@weekly\""
	Cron string `json:"cron"`

	// suspend stops new scheduled verifications; one under way finishes.
	// A hibernated MyDatabase has none either.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// BackupEncryption encrypts backups at rest with age X25519 keys
// (docs/backup.md, "Encryption at rest").
type BackupEncryption struct {
	// secret names a Secret of this namespace whose key "identities" holds
	// age X25519 identities (AGE-SECRET-KEY-1..., as age-keygen writes
	// them), one a line. New objects are encrypted to the first; every one
	// decrypts, so that after a key rotation (the new identity first, the
	// old ones after it) older backups stay readable. The key reaches the
	// database container as a read-only file, never its environment.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="encryption.secret must be the name of a Secret: lower-case letters, digits, '-' and '.'"
	Secret string `json:"secret"`
}

// BackupSchedule is when base backups are taken.
type BackupSchedule struct {
	// cron is a standard five-field cron expression ("0 3 * * *": daily at
	// 03:00) or a descriptor such as "@daily", in UTC.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.startsWith('@') || self.split(' ').filter(f, f != '').size() == 5",message="schedule.cron is five fields (minute hour day-of-month month day-of-week), e.g. \"0 3 * * *\", or a descriptor such as \"@daily\""
	Cron string `json:"cron"`

	// suspend stops new scheduled backups; one under way finishes.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// target is where scheduled backups are taken (MyDatabaseBackup's
	// spec.target); by default on a healthy replica.
	// +kubebuilder:default=PreferReplica
	// +optional
	Target BackupTarget `json:"target,omitempty"`
}

// BackupRetention is which base backups are kept: a backup is deleted
// only when no rule keeps it, and the newest one is always kept. Changing
// it restarts the servers one at a time, as any change of spec.backup.
// +kubebuilder:validation:XValidation:rule="has(self.recoveryWindow) || has(self.keep)",message="retention takes recoveryWindow, keep, or both"
type BackupRetention struct {
	// recoveryWindow keeps what a restore to any time within it needs: every
	// backup finished in the window, and the newest one before it. Days or
	// hours: "7d", "36h".
	// +kubebuilder:validation:XValidation:rule="self.matches('^[1-9][0-9]{0,4}[dh]$')",message="retention.recoveryWindow is a number of days or hours, e.g. \"7d\" or \"36h\""
	// +optional
	RecoveryWindow string `json:"recoveryWindow,omitempty"`

	// keep keeps this many of the newest backups.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Keep *int32 `json:"keep,omitempty"`
}

// ObjectStore is a place in an S3-compatible bucket.
type ObjectStore struct {
	// endpoint is the store's URL: https://host[:port], or http:// for a
	// store without TLS.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^https?://[^/?#]+/?$')",message="objectStore.endpoint must be http(s)://host[:port], without a path: the bucket and path are fields of their own"
	Endpoint string `json:"endpoint"`

	// bucket is the bucket's name; it must exist.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9][a-z0-9.-]*[a-z0-9]$')",message="objectStore.bucket must be a bucket name: lower-case letters, digits, '.' and '-'"
	Bucket string `json:"bucket"`

	// path is the prefix of this database's objects in the bucket.
	// Default for spec.backup: <namespace>/<name>. Two databases must
	// never share one: the archive refuses to overwrite WAL.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.contains('..')",message="objectStore.path is relative to the bucket and has no '..'"
	// +optional
	Path string `json:"path,omitempty"`

	// region of the bucket, for stores that need one.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Region string `json:"region,omitempty"`

	// credentialsSecret names a Secret of this namespace with the keys
	// ACCESS_KEY_ID and SECRET_ACCESS_KEY.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	CredentialsSecret string `json:"credentialsSecret"`
}

// BootstrapSpec is how the data of a new MyDatabase is made: by initdb
// unless it says otherwise.
type BootstrapSpec struct {
	// recovery restores a base backup and the WAL archived after it.
	// +optional
	Recovery *RecoverySpec `json:"recovery,omitempty"`
}

// RecoverySpec restores the data of a new MyDatabase from another one's
// backups. The restored database keeps the source's roles and data; the
// role spec.user gets this MyDatabase's password.
type RecoverySpec struct {
	// objectStore where the source database's backups are, its path
	// included.
	// +kubebuilder:validation:XValidation:rule="has(self.path) && self.path != ''",message="bootstrap.recovery.objectStore.path is required: it names the database to restore (<namespace>/<name> by default for spec.backup)"
	ObjectStore ObjectStore `json:"objectStore"`

	// backupID names the base backup to start from; by default the latest
	// one that finished before target.time (the latest of all without a
	// target time).
	// +kubebuilder:validation:MaxLength=64
	// +optional
	BackupID string `json:"backupID,omitempty"`

	// target is where recovery stops; by default at the end of the archive
	// (the latest state the archive holds).
	// +optional
	Target *RecoveryTarget `json:"target,omitempty"`

	// encryption holds the identities that decrypt the source's encrypted
	// backups (its spec.backup.encryption's Secret, copied here). Without
	// it only unencrypted backups restore.
	// +optional
	Encryption *BackupEncryption `json:"encryption,omitempty"`
}

// RecoveryTarget is where recovery stops: exactly one of its fields.
// +kubebuilder:validation:XValidation:rule="(has(self.time) ? 1 : 0) + (has(self.lsn) ? 1 : 0) + (has(self.name) ? 1 : 0) + (has(self.immediate) && self.immediate ? 1 : 0) == 1",message="bootstrap.recovery.target takes exactly one of time, lsn, name or immediate"
type RecoveryTarget struct {
	// time: every transaction committed up to this time, none after.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`

	// lsn: every transaction committed up to this WAL position.
	// +kubebuilder:validation:MaxLength=17
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$')",message="bootstrap.recovery.target.lsn is a WAL position such as 0/3000060"
	// +optional
	LSN string `json:"lsn,omitempty"`

	// name of a restore point made with pg_create_restore_point().
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Name string `json:"name,omitempty"`

	// immediate: as soon as the base backup is consistent.
	// +optional
	Immediate bool `json:"immediate,omitempty"`
}

// BackupStatus is where continuous archiving stands, as the primary's
// instance manager last reported it (pg_stat_archiver).
type BackupStatus struct {
	// lastArchivedWAL is the last WAL file archived, at lastArchivedTime.
	// +optional
	LastArchivedWAL string `json:"lastArchivedWAL,omitempty"`
	// +optional
	LastArchivedTime *metav1.Time `json:"lastArchivedTime,omitempty"`
	// lastFailedWAL is the last WAL file whose archiving failed, at
	// lastFailedTime.
	// +optional
	LastFailedWAL string `json:"lastFailedWAL,omitempty"`
	// +optional
	LastFailedTime *metav1.Time `json:"lastFailedTime,omitempty"`

	// backups is how many complete base backups the object store holds;
	// lastBackupID and lastBackupTime name the newest, and
	// firstRecoverabilityPoint is the end of the oldest: the earliest time
	// a restore can reach. As the primary saw them at its last look (every
	// 5 minutes, and at once after a backup in its container).
	// +optional
	Backups int32 `json:"backups,omitempty"`
	// +optional
	LastBackupID string `json:"lastBackupID,omitempty"`
	// +optional
	LastBackupTime *metav1.Time `json:"lastBackupTime,omitempty"`
	// +optional
	FirstRecoverabilityPoint *metav1.Time `json:"firstRecoverabilityPoint,omitempty"`

	// lastScheduleTime is the time of the last scheduled backup the
	// operator created, and nextScheduleTime the next one's, with
	// spec.backup.schedule.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`

	// lastVerification is the newest finished verification of any of
	// this database's MyDatabaseBackups, and lastVerifiedTime when one
	// last passed (spec.backup.verify, or a person's request).
	// +optional
	LastVerification *LastVerification `json:"lastVerification,omitempty"`
	// +optional
	LastVerifiedTime *metav1.Time `json:"lastVerifiedTime,omitempty"`
	// nextVerifyTime is when spec.backup.verify is next due.
	// +optional
	NextVerifyTime *metav1.Time `json:"nextVerifyTime,omitempty"`
}

// LastVerification names a verification and says how it ended.
type LastVerification struct {
	// backup is the MyDatabaseBackup verified; its status.verification
	// holds the rest.
	Backup string `json:"backup"`
	// +optional
	Result VerificationResult `json:"result,omitempty"`
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
}

// ConditionContinuousArchiving is present with spec.backup: True while
// the primary archives its WAL, False (ArchivingFailing, with the archive
// command's error) when its last attempt failed, Unknown (Pending) until
// the primary has reported. It does not change Ready.
const ConditionContinuousArchiving = "ContinuousArchiving"

// Reasons of ConditionContinuousArchiving.
const (
	ReasonArchiving        = "Archiving"
	ReasonArchivingFailing = "ArchivingFailing"
	ReasonArchivingPending = "Pending"
)

// Stalled reasons of backups.
const (
	// ReasonObjectStoreCredentials (Stalled): the Secret an objectStore
	// names is missing or lacks a key.
	ReasonObjectStoreCredentials = "ObjectStoreCredentialsInvalid"
	// ReasonBackupScheduleInvalid (Stalled): spec.backup.schedule.cron does
	// not parse.
	ReasonBackupScheduleInvalid = "BackupScheduleInvalid"
	// ReasonBackupEncryptionKey (Stalled): the Secret an encryption names
	// is missing, lacks the key identities, or holds no age identity.
	ReasonBackupEncryptionKey = "BackupEncryptionKeyInvalid"
)

// Reasons of a restore (spec.bootstrap.recovery), from the first
// instance's report.
const (
	// ReasonRestoring (Reconciling): the first instance downloads the base
	// backup or replays the archive; the message says how far it is.
	ReasonRestoring = "Restoring"
	// ReasonRestoreStalled (Stalled): recovery has fetched no new WAL file
	// for a minute; the message names the file it waits for.
	ReasonRestoreStalled = "RestoreStalled"
	// ReasonRestoreFailed (Stalled): the restore failed (no backup fits,
	// the store refused, the recovery stopped before its target); it is
	// tried again every 30 s, and the message says why it failed.
	ReasonRestoreFailed = "RestoreFailed"
)

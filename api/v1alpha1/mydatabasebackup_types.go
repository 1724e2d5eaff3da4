package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// BackupTarget is which instance takes a base backup.
// +kubebuilder:validation:Enum=Primary;PreferReplica
type BackupTarget string

const (
	// BackupTargetPrimary: the primary.
	BackupTargetPrimary BackupTarget = "Primary"
	// BackupTargetPreferReplica: a ready replica that streams from the
	// primary, or the primary when there is none.
	BackupTargetPreferReplica BackupTarget = "PreferReplica"
)

// MyDatabaseBackupSpec asks for one base backup of a MyDatabase into its
// spec.backup object store. It is immutable: a new backup is a new object.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a MyDatabaseBackup's spec is immutable: create a new one for another backup"
type MyDatabaseBackupSpec struct {
	// database names the MyDatabase of this namespace to back up; it must
	// have spec.backup.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Database string `json:"database"`

	// target is where the backup is taken: PreferReplica (the default)
	// spares the primary the reads of a whole copy.
	// +kubebuilder:default=PreferReplica
	// +optional
	Target BackupTarget `json:"target,omitempty"`
}

// BackupType is whether a base backup holds all the data or what changed
// since its parent.
// +kubebuilder:validation:Enum=Full;Incremental
type BackupType string

const (
	// BackupFull holds all the data.
	BackupFull BackupType = "Full"
	// BackupIncremental holds what changed since its parent
	// (PostgreSQL 17 or later).
	BackupIncremental BackupType = "Incremental"
)

// BackupPhase is where a MyDatabaseBackup stands.
// +kubebuilder:validation:Enum=Pending;Running;Completed;Failed
type BackupPhase string

const (
	// BackupPending: waiting for an instance to take it.
	BackupPending BackupPhase = "Pending"
	// BackupRunning: an instance is taking it.
	BackupRunning BackupPhase = "Running"
	// BackupCompleted: it is in the object store, with the WAL that makes
	// it consistent.
	BackupCompleted BackupPhase = "Completed"
	// BackupFailed: it was not taken; message says why. A failed backup is
	// not retried: create a new MyDatabaseBackup.
	BackupFailed BackupPhase = "Failed"
)

// Reasons of a MyDatabaseBackup's conditions (ConditionReady,
// ConditionReconciling, ConditionStalled), one per phase.
const (
	// ReasonBackupPending (Reconciling): waiting for an instance to take
	// it; the message says for what.
	ReasonBackupPending = "BackupPending"
	// ReasonBackupRunning (Reconciling): an instance is taking it.
	ReasonBackupRunning = "BackupRunning"
	// ReasonBackupCompleted (Ready True): it is in the object store.
	ReasonBackupCompleted = "BackupCompleted"
	// ReasonBackupFailed (Stalled): it was not taken and will not be:
	// only a new MyDatabaseBackup takes another.
	ReasonBackupFailed = "BackupFailed"
)

// MyDatabaseBackupStatus is what the instance that took the backup
// reported.
type MyDatabaseBackupStatus struct {
	// observedGeneration is the metadata.generation of the object the
	// operator last wrote this status from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// phase is Pending, Running, Completed or Failed.
	// +optional
	Phase BackupPhase `json:"phase,omitempty"`

	// message says what the backup waits for, or why it failed.
	// +optional
	Message string `json:"message,omitempty"`

	// instance is the pod that takes the backup, and instanceUID its UID:
	// a replaced pod never finishes the backup its predecessor started.
	// +optional
	Instance string `json:"instance,omitempty"`
	// +optional
	InstanceUID string `json:"instanceUID,omitempty"`

	// backupID names the backup in the object store; it is what
	// spec.bootstrap.recovery.backupID takes.
	// +optional
	BackupID string `json:"backupID,omitempty"`

	// type is Full or Incremental (spec.backup.incremental). An
	// incremental backup builds on parentBackupID, and restores only
	// while the store holds every backup of its chain. A full backup
	// taken while incremental backups are on says why in message.
	// +optional
	Type BackupType `json:"type,omitempty"`
	// +optional
	ParentBackupID string `json:"parentBackupID,omitempty"`

	// startedAt and stoppedAt: when the backup began and ended.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// +optional
	StoppedAt *metav1.Time `json:"stoppedAt,omitempty"`

	// size is the compressed size in the object store, in bytes.
	// +optional
	Size int64 `json:"size,omitempty"`

	// timeline, beginLSN and endLSN: the WAL the backup needs, from where
	// it began to where it is consistent; beginWAL and endWAL are the files
	// that hold them.
	// +optional
	Timeline int64 `json:"timeline,omitempty"`
	// +optional
	BeginLSN string `json:"beginLSN,omitempty"`
	// +optional
	EndLSN string `json:"endLSN,omitempty"`
	// +optional
	BeginWAL string `json:"beginWAL,omitempty"`
	// +optional
	EndWAL string `json:"endWAL,omitempty"`

	// verification is the last restore of this backup that checked it,
	// or the one under way (spec.backup.verify, or AnnotationVerify).
	// +optional
	Verification *BackupVerification `json:"verification,omitempty"`

	// conditions, in the kstatus convention, follow the phase: Ready is
	// True once Completed and False before or after failing; Reconciling
	// is True while Pending or Running; Stalled is True once Failed (a
	// failed backup is not retried). Reconciling and Stalled are present
	// only while True.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// VerificationResult is where a verification stands, or how it ended.
// +kubebuilder:validation:Enum=Running;Passed;Failed;Error
type VerificationResult string

const (
	// VerificationRunning: its pod restores the backup.
	VerificationRunning VerificationResult = "Running"
	// VerificationPassed: the backup restored, recovery replayed the
	// archive to its end, past the backup's end, and pg_amcheck found no
	// corruption in any database.
	VerificationPassed VerificationResult = "Passed"
	// VerificationFailed: the backup, or the archive after it, did not
	// restore, or what it restored failed a check: message says which.
	VerificationFailed VerificationResult = "Failed"
	// VerificationError: the verification could not run (the store was
	// unreachable, the pod was evicted): it says nothing of the backup.
	VerificationError VerificationResult = "Error"
)

// BackupVerification is one restore of a backup that checked it.
type BackupVerification struct {
	// request is the value of AnnotationVerify this verification answers.
	Request string `json:"request"`
	// result is Running until the pod ends, then Passed, Failed or Error.
	Result VerificationResult `json:"result"`
	// pod restores the backup, and is deleted, with its volume, once it
	// has said how it ended.
	// +optional
	Pod string `json:"pod,omitempty"`
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// duration is from startedAt to finishedAt: a restore's time, image
	// pull and volume included.
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty"`
	// reachedLSN is where recovery ended: the end of the archive.
	// +optional
	ReachedLSN string `json:"reachedLSN,omitempty"`
	// databases is how many databases pg_amcheck checked.
	// +optional
	Databases int32 `json:"databases,omitempty"`
	// message says what the verification does, or what it found.
	// +optional
	Message string `json:"message,omitempty"`
}

// BuildsOn says, after the description of a completed backup, what it
// builds on (", incremental on <parent>"), or why it is full while
// incremental backups are on ("; <message>"); "" for a full backup that
// needs no word.
func (st *MyDatabaseBackupStatus) BuildsOn() string {
	switch {
	case st.ParentBackupID != "":
		return ", incremental on backup " + st.ParentBackupID
	case st.Message != "":
		return "; " + st.Message
	}
	return ""
}

// Took is how long the verification took, 0 before it ended.
func (v *BackupVerification) Took() time.Duration {
	if v == nil || v.Duration == nil {
		return 0
	}
	return v.Duration.Duration
}

// Finished is true once the verification has a result.
func (v *BackupVerification) Finished() bool {
	return v != nil && v.Result != "" && v.Result != VerificationRunning
}

// AnnotationVerify on a completed MyDatabaseBackup asks for a
// verification: a restore of the backup in a pod of its own that checks
// what it restored. Each new value brings one, as a person's
// `kubectl annotate mydbbackup NAME database.example.com/verify="$(date -u +%FT%TZ)" --overwrite`
// or spec.backup.verify's schedule (the time it was due, RFC 3339) sets it.
const AnnotationVerify = "database.example.com/verify"

// ConditionVerified on a MyDatabaseBackup says how its last verification
// ended: True (VerificationPassed), False (VerificationFailed or
// VerificationError), Unknown while one runs. Absent before the first.
const ConditionVerified = "Verified"

// Reasons of ConditionVerified, one per result.
const (
	ReasonVerificationRunning = "VerificationRunning"
	ReasonVerificationPassed  = "VerificationPassed"
	ReasonVerificationFailed  = "VerificationFailed"
	ReasonVerificationError   = "VerificationError"
)

// Finished is true once the backup is Completed or Failed: the operator
// moves it on no further.
func (s MyDatabaseBackupStatus) Finished() bool {
	return s.Phase == BackupCompleted || s.Phase == BackupFailed
}

// NewestCompleted is the Completed backup of the MyDatabase database
// that stopped last among backups, nil when there is none: the one a
// verification takes by default.
func NewestCompleted(backups []MyDatabaseBackup, database string) *MyDatabaseBackup {
	var newest *MyDatabaseBackup
	for i := range backups {
		b := &backups[i]
		if b.Spec.Database == database && b.Status.Phase == BackupCompleted && b.Status.StoppedAt != nil &&
			(newest == nil || b.Status.StoppedAt.After(newest.Status.StoppedAt.Time)) {
			newest = b
		}
	}
	return newest
}

// LabelScheduledBy on a MyDatabaseBackup names the MyDatabase whose
// spec.backup.schedule created it.
const LabelScheduledBy = "database.example.com/scheduled-by"

// MyDatabaseBackup is one base backup of a MyDatabase (docs/backup.md).
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mydbbackup,categories=databases
// +kubebuilder:printcolumn:name="Database",type=string,JSONPath=`.spec.database`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Instance",type=string,JSONPath=`.status.instance`
// +kubebuilder:printcolumn:name="Backup",type=string,JSONPath=`.status.backupID`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.status.type`
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=`.status.size`,priority=1
// +kubebuilder:printcolumn:name="Verified",type=string,JSONPath=`.status.verification.result`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MyDatabaseBackup struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is a standard object metadata
	// +optional
	metav1.ObjectMeta `json:"metadata,omitzero"`

	// spec says which database to back up, and where.
	// +required
	Spec MyDatabaseBackupSpec `json:"spec"`

	// status is where the backup stands.
	// +optional
	Status MyDatabaseBackupStatus `json:"status,omitzero"`
}

// +kubebuilder:object:root=true

// MyDatabaseBackupList contains a list of MyDatabaseBackup.
type MyDatabaseBackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitzero"`
	Items           []MyDatabaseBackup `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(SchemeGroupVersion, &MyDatabaseBackup{}, &MyDatabaseBackupList{})
		return nil
	})
}

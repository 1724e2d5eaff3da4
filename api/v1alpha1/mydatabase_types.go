package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Engine names the database software that runs the MyDatabase.
// +kubebuilder:validation:Enum=postgres
type Engine string

const (
	// EnginePostgres runs the official PostgreSQL image: one primary and
	// streaming read replicas.
	EnginePostgres Engine = "postgres"
)

// InstanceManagerUpdate says how a new operator version brings its instance
// manager to running pods.
// +kubebuilder:validation:Enum=InPlace;Restart
type InstanceManagerUpdate string

const (
	// InstanceManagerUpdateInPlace replaces the instance manager in each
	// running container, one pod at a time, replicas first: it
	// re-executes itself as the new binary and keeps PostgreSQL running.
	InstanceManagerUpdateInPlace InstanceManagerUpdate = "InPlace"
	// InstanceManagerUpdateRestart rolls the pods instead, as any change of
	// the pod template: replicas first, the primary after a switchover.
	InstanceManagerUpdateRestart InstanceManagerUpdate = "Restart"
)

// DeletionPolicy says what happens to the data when a MyDatabase is deleted.
// +kubebuilder:validation:Enum=Retain;Delete
type DeletionPolicy string

const (
	// DeletionPolicyRetain keeps the data volumes and the credentials Secret,
	// released from the MyDatabase, so that nothing is lost. A MyDatabase of
	// the same name adopts them again.
	DeletionPolicyRetain DeletionPolicy = "Retain"
	// DeletionPolicyDelete removes everything the MyDatabase created,
	// data volumes included.
	DeletionPolicyDelete DeletionPolicy = "Delete"
)

// MyDatabaseSpec is the desired state of a MyDatabase.
// +kubebuilder:validation:XValidation:rule="has(self.credentials) == has(oldSelf.credentials) && (!has(self.credentials) || self.credentials == oldSelf.credentials)",message="credentials is immutable: the data only knows the password it was created with"
// +kubebuilder:validation:XValidation:rule="has(self.bootstrap) == has(oldSelf.bootstrap) && (!has(self.bootstrap) || self.bootstrap == oldSelf.bootstrap)",message="bootstrap is immutable: it only says how the data was first made"
// +kubebuilder:validation:XValidation:rule="!has(self.credentials) || !has(self.passwordRotation) || !has(self.passwordRotation.userRequestedAt)",message="passwordRotation.userRequestedAt rotates the generated Secret only: with credentials.secretName, change the password in your Secret and the operator sets it in PostgreSQL"
// +kubebuilder:validation:XValidation:rule="!has(self.roles) || !has(self.user) || self.roles.all(r, r.name != self.user)",message="roles may not declare spec.user: that role is kept through spec.user and spec.credentials"
// +kubebuilder:validation:XValidation:rule="!has(self.databases) || self.databases.all(d, !has(d.owner) || d.owner == self.user || (has(self.roles) && self.roles.exists(r, r.name == d.owner && r.ensure != 'absent')))",message="a database's owner must be spec.user or a role declared present in spec.roles"
// +kubebuilder:validation:XValidation:rule="!has(self.databases) || self.databases.all(d, !has(d.publications) || d.publications.all(p, p.ensure == 'absent')) || (has(self.replication) && has(self.replication.logical) && self.replication.logical)",message="publications need spec.replication.logical: true (wal_level=logical)"
// +kubebuilder:validation:XValidation:rule="!has(self.databases) || self.databases.all(d, d.name != self.databaseName || (d.ensure != 'absent' && (!has(d.owner) || d.owner == self.user) && !has(d.encoding) && !has(d.locale) && !has(d.template)))",message="spec.databaseName may be listed in databases for its extensions and comment only: it is made at bootstrap, owned by spec.user, and never dropped"
// +kubebuilder:validation:XValidation:rule="has(oldSelf.replica) || !has(self.replica) || !self.replica.enabled",message="spec.replica is added with enabled: false (the pods restart once, to learn the source), then set to true to demote this MyDatabase"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.replica) || has(self.replica) || !oldSelf.replica.enabled",message="spec.replica can be removed only with enabled: false: a replica follows its source until it is promoted"
// +kubebuilder:validation:XValidation:rule="oldSelf.hasValue() || !has(self.replica) || !has(self.bootstrap)",optionalOldSelf=true,message="spec.replica and spec.bootstrap exclude each other: a replica's data comes from its source"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.walStorage) || has(self.walStorage)",message="walStorage cannot be removed: the servers' WAL lives on those volumes; to go back to one volume, restore a backup into a new MyDatabase without walStorage"
type MyDatabaseSpec struct {
	// engine is the database software. Only postgres is supported today.
	// Immutable.
	// +kubebuilder:default=postgres
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="engine is immutable: create a new MyDatabase to change engines"
	// +optional
	Engine Engine `json:"engine,omitempty"`

	// version is the PostgreSQL version: a supported major (15 to 18) or a
	// major.minor such as "17.6". It selects the official image tag
	// postgres:<version>. Minor versions may change; a later major
	// upgrades the data with pg_upgrade (docs/upgrade.md); a lower major
	// than the data is on (status.currentVersion) is refused.
	// +kubebuilder:default="17"
	// +kubebuilder:validation:MaxLength=8
	// +kubebuilder:validation:XValidation:rule="self.matches('^(15|16|17|18)([.][0-9]+)?$')",message="version must be a supported PostgreSQL major (15, 16, 17 or 18), optionally with a minor, for example \"17\" or \"17.6\""
	// +optional
	Version string `json:"version,omitempty"`

	// image overrides the container image (for a mirror or a patched build).
	// It must hold PostgreSQL of the major given in version, with postgres,
	// initdb, psql, pg_isready, pg_basebackup and pg_controldata on PATH and
	// /bin/sh, as the official image does; the instance manager, a static
	// binary, is brought in by an init container.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// replicas is the number of PostgreSQL servers: one primary plus
	// replicas-1 streaming read replicas.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=9
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// storage is the data volume of every server.
	// +kubebuilder:default={}
	// +optional
	Storage StorageSpec `json:"storage,omitempty"`

	// walStorage puts every server's WAL (pg_wal) on a volume of its own,
	// so that WAL kept by failing archiving or a slot cannot fill the data
	// volume, and data files cannot starve the WAL. Its storageClassName
	// is the cluster default when unset. Adding it to a running
	// MyDatabase restarts every server once, lowest ordinal first and the
	// primary after a switchover, each moving its WAL to the new volume
	// while it is stopped. It cannot be removed.
	// +optional
	WALStorage *StorageSpec `json:"walStorage,omitempty"`

	// resources are the compute resources of the PostgreSQL container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// parameters are PostgreSQL settings written to postgresql.conf, for
	// example max_connections: "200". Changing them restarts the servers,
	// replicas first. Settings the operator manages itself are refused.
	// +kubebuilder:validation:MaxProperties=200
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[a-z][a-z0-9_.]*$'))",message="parameter names are lower-case PostgreSQL setting names such as max_connections"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !(k in ['listen_addresses', 'port', 'unix_socket_directories', 'data_directory', 'config_file', 'hba_file', 'ident_file', 'primary_conninfo', 'primary_slot_name', 'hot_standby', 'wal_level', 'max_wal_senders', 'restore_command', 'archive_mode', 'archive_command', 'synchronous_standby_names']))",message="parameters may not set listen_addresses, port, unix_socket_directories, data_directory, config_file, hba_file, ident_file, primary_conninfo, primary_slot_name, hot_standby, wal_level, max_wal_senders, restore_command, archive_mode, archive_command or synchronous_standby_names: the operator manages them"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !(k in ['ssl', 'ssl_cert_file', 'ssl_key_file', 'ssl_ca_file', 'ssl_crl_file', 'ssl_crl_dir', 'ssl_passphrase_command']))",message="parameters may not set ssl, ssl_cert_file, ssl_key_file, ssl_ca_file, ssl_crl_file, ssl_crl_dir or ssl_passphrase_command: TLS is always on, with the certificate of spec.tls"
	// +kubebuilder:validation:XValidation:rule="!('ssl_min_protocol_version' in self) || self['ssl_min_protocol_version'] in ['TLSv1.2', 'TLSv1.3']",message="ssl_min_protocol_version may be TLSv1.2 (the default) or TLSv1.3: older protocols are not safe"
	// +optional
	Parameters map[string]string `json:"parameters,omitempty"`

	// databaseName is the database created at bootstrap. Immutable.
	// +kubebuilder:default=app
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z_][a-z0-9_]*$')",message="databaseName must start with a lower-case letter or underscore and contain only lower-case letters, digits and underscores"
	// +kubebuilder:validation:XValidation:rule="!(self in ['postgres', 'template0', 'template1'])",message="databaseName must not be postgres, template0 or template1: those are PostgreSQL's own databases"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="databaseName is immutable: the database already exists under its old name"
	// +optional
	DatabaseName string `json:"databaseName,omitempty"`

	// user is the role that owns databaseName. Immutable.
	// +kubebuilder:default=app
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z_][a-z0-9_]*$')",message="user must start with a lower-case letter or underscore and contain only lower-case letters, digits and underscores"
	// +kubebuilder:validation:XValidation:rule="!(self in ['postgres', 'replicator', 'public', 'none']) && !self.startsWith('pg_')",message="user must not be postgres, replicator, public, none or start with pg_: those roles are reserved"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="user is immutable: the role already exists under its old name"
	// +optional
	User string `json:"user,omitempty"`

	// credentials names an existing Secret to use instead of a generated
	// one. Immutable.
	// +optional
	Credentials *CredentialsSpec `json:"credentials,omitempty"`

	// roles are PostgreSQL roles kept as declared (RoleSpec), beside
	// spec.user. Removing an entry drops nothing; ensure: absent drops.
	// +kubebuilder:validation:MaxItems=100
	// +listType=map
	// +listMapKey=name
	// +optional
	Roles []RoleSpec `json:"roles,omitempty"`

	// databases are PostgreSQL databases kept as declared (DatabaseSpec),
	// beside spec.databaseName, which may be listed for its extensions
	// and comment. Removing an entry drops nothing; ensure: absent drops.
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	// +optional
	Databases []DatabaseSpec `json:"databases,omitempty"`

	// passwordRotation asks for new passwords (PasswordRotationSpec).
	// +optional
	PasswordRotation *PasswordRotationSpec `json:"passwordRotation,omitempty"`

	// service is how clients reach the database.
	// +kubebuilder:default={}
	// +optional
	Service ServiceSpec `json:"service,omitempty"`

	// deletionPolicy says what happens to the data when this MyDatabase is
	// deleted: Retain (default) keeps the volumes and the credentials
	// Secret; Delete removes them.
	// +kubebuilder:default=Retain
	// +optional
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`

	// paused stops the operator from changing any child object. Status is
	// still reported.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// instanceManagerUpdate says how a new operator version brings its
	// instance manager to running pods: InPlace (default) replaces it in
	// each running container without restarting PostgreSQL; Restart rolls
	// the pods, replicas first and the primary after a switchover
	// (docs/operator-upgrades.md).
	// +kubebuilder:default=InPlace
	// +optional
	InstanceManagerUpdate InstanceManagerUpdate `json:"instanceManagerUpdate,omitempty"`

	// hibernate stops every server cleanly, the primary last, and keeps
	// everything else: the volumes (whatever the deletionPolicy), the
	// Secrets, the Services and the WAL archive. Scheduled and on-demand
	// backups wait meanwhile. Set back to false, the servers start again
	// on the same data, with the same primary. status.hibernation and the
	// Hibernated condition say where it stands (docs/hibernation.md).
	// +optional
	Hibernate bool `json:"hibernate,omitempty"`

	// nodeSelector constrains the servers to nodes with these labels.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// tolerations of the server pods.
	// +optional
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// affinity of the server pods. Unset, the servers prefer to run on
	// different nodes, then in different zones (topology.kubernetes.io/zone,
	// where nodes carry it), so the loss of one node or zone leaves a
	// replica to fail over to; a preference, never a reason to leave a pod
	// unscheduled. Set, it replaces that default; {} asks for no affinity.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// priorityClassName of the server pods.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// topologySpreadConstraints of the server pods.
	// +optional
	// +listType=atomic
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`

	// podLabels are added to the server pods. They cannot override the
	// labels the operator sets.
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('app.kubernetes.io/') && !k.startsWith('database.example.com/'))",message="podLabels must not use the app.kubernetes.io/ or database.example.com/ prefixes: the operator owns those labels"
	// +optional
	PodLabels map[string]string `json:"podLabels,omitempty"`

	// podAnnotations are added to the server pods.
	// +optional
	PodAnnotations map[string]string `json:"podAnnotations,omitempty"`

	// failover tunes how fast a lost primary is replaced.
	// +kubebuilder:default={}
	// +optional
	Failover FailoverSpec `json:"failover,omitzero"`

	// replication makes the replicas synchronous (a quorum); they are
	// asynchronous when it is left out.
	// +optional
	Replication ReplicationSpec `json:"replication,omitzero"`

	// switchover asks for a planned change of primary, once per new
	// requestedAt; status.switchover reports how it went.
	// +optional
	Switchover *SwitchoverSpec `json:"switchover,omitempty"`

	// tls is how client connections are encrypted (TLSSpec): TLS is always
	// offered; clients: Required refuses connections without it.
	// +kubebuilder:default={}
	// +optional
	TLS TLSSpec `json:"tls,omitzero"`

	// networkPolicy, when enabled, admits to the database port only the
	// clients listed and the other instances.
	// +optional
	NetworkPolicy NetworkPolicySpec `json:"networkPolicy,omitzero"`

	// monitoring adds a PodMonitor and custom queries to the metrics every
	// server exports.
	// +optional
	Monitoring MonitoringSpec `json:"monitoring,omitzero"`

	// backup archives the WAL continuously to an object store, where base
	// backups are taken too (BackupSpec).
	// +optional
	Backup *BackupSpec `json:"backup,omitempty"`

	// bootstrap says how the data of a new MyDatabase is made: initdb, or
	// a restore (BootstrapSpec). Immutable.
	// +optional
	Bootstrap *BootstrapSpec `json:"bootstrap,omitempty"`

	// replica makes this MyDatabase a standby copy of another one, fed from
	// that one's WAL archive, until it is promoted (ReplicaSpec). Set when
	// the MyDatabase is made, never added or removed later.
	// +optional
	Replica *ReplicaSpec `json:"replica,omitempty"`
}

// StorageSpec is a volume of each server: its data volume (spec.storage)
// or its WAL volume (spec.walStorage).
// +kubebuilder:validation:XValidation:rule="!has(self.autoGrow) || !has(self.size) || quantity(string(self.autoGrow.maxSize)).compareTo(quantity(string(self.size))) >= 0",message="autoGrow.maxSize must be at least size"
// +kubebuilder:validation:XValidation:rule="has(self.storageClassName) == has(oldSelf.storageClassName) && (!has(self.storageClassName) || self.storageClassName == oldSelf.storageClassName)",message="storageClassName is immutable: existing volumes cannot move to another class"
type StorageSpec struct {
	// size of each volume. It may grow but never shrink. Growing it
	// expands every server's volume in place when their StorageClass has
	// allowVolumeExpansion: true; the pods keep running.
	// +kubebuilder:default="1Gi"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="size must be greater than zero, for example 1Gi"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity(string(oldSelf))) >= 0",message="size may grow but never shrink: a volume cannot be made smaller without losing data"
	// +optional
	Size resource.Quantity `json:"size,omitzero"`

	// storageClassName of the volumes; the cluster default when unset.
	// Immutable.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`

	// autoGrow grows the volumes before they fill, within maxSize.
	// +optional
	AutoGrow *AutoGrowSpec `json:"autoGrow,omitempty"`
}

// CredentialsSpec points at a user-supplied Secret.
type CredentialsSpec struct {
	// secretName is an existing Secret in the same namespace with the keys
	// username and password. The operator reads it and never changes it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="credentials.secretName must be a valid Secret name: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"
	SecretName string `json:"secretName"`
}

// ServiceSpec is how clients reach the database.
type ServiceSpec struct {
	// type of the read-write and read-only Services.
	// +kubebuilder:default=ClusterIP
	// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
	// +optional
	Type corev1.ServiceType `json:"type,omitempty"`

	// port the Services listen on.
	// +kubebuilder:default=5432
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`
}

// Phase is a one-word summary of the MyDatabase for humans. Automation should
// read the conditions instead.
type Phase string

const (
	// PhasePending: no StatefulSet yet (the first pass failed or waits).
	PhasePending Phase = "Pending"
	// PhaseProvisioning: children created, servers never all ready yet.
	PhaseProvisioning Phase = "Provisioning"
	// PhaseReady: every server is ready and runs the desired spec.
	PhaseReady Phase = "Ready"
	// PhaseUpdating: was ready once; converging again (a change rolling
	// through the servers, a scale, a server restarting, a retried error).
	PhaseUpdating Phase = "Updating"
	// PhasePaused: spec.paused is true; the operator changes nothing.
	PhasePaused Phase = "Paused"
	// PhaseHibernated: spec.hibernate is true and no server runs.
	PhaseHibernated Phase = "Hibernated"
	// PhaseStalled: only the user can unblock it; see the Stalled condition.
	PhaseStalled Phase = "Stalled"
	// PhaseDeleting: the MyDatabase is being deleted and something still
	// holds it (an error, or finalizers of others).
	PhaseDeleting Phase = "Deleting"
)

// Condition types, in the kstatus convention, one meaning each:
const (
	// ConditionReady is always present. True when every server runs the
	// current spec and is ready and the last pass applied every child; a
	// repair no client can see leaves it True. True with reason Hibernated
	// when no server runs, as spec.hibernate asks. False otherwise, with the
	// reason of Reconciling or Stalled, or Paused or Deleting.
	ConditionReady = "Ready"
	// ConditionReconciling is present (True) only while the operator works
	// towards the spec on its own, retried transient errors included.
	ConditionReconciling = "Reconciling"
	// ConditionStalled is present (True) only when a person must act; its
	// message says what to do. Never together with Reconciling.
	ConditionStalled = "Stalled"
)

// Condition reasons.
const (
	ReasonAvailable            = "Available"
	ReasonProvisioning         = "Provisioning"
	ReasonUpdating             = "Updating"
	ReasonScaling              = "Scaling"
	ReasonPaused               = "Paused"
	ReasonDeleting             = "Deleting"
	ReasonCredentialsNotFound  = "CredentialsSecretNotFound"
	ReasonCredentialsInvalid   = "CredentialsSecretInvalid"
	ReasonCredentialsLost      = "CredentialsSecretLost"
	ReasonCredentialsChanged   = "CredentialsSecretChanged"
	ReasonSecretConflict       = "SecretOwnedByAnother"
	ReasonStorageClassNotFound = "StorageClassNotFound"
	// ReasonStorageResizing: spec.storage.size grew and the data volumes
	// are being expanded (the claims patched, the StatefulSet re-created
	// with the new volumeClaimTemplates, the capacities not reached yet).
	ReasonStorageResizing = "StorageResizing"
	// ReasonStorageClassNotExpandable: spec.storage.size grew but the
	// StorageClass of the data volumes does not allow volume expansion.
	ReasonStorageClassNotExpandable = "StorageClassNotExpandable"
	// ReasonStorageResize: spec.storage.size grew but the volumes cannot be
	// expanded for another reason than their class's setting: a volume
	// without a class, a class that no longer exists, or one the operator
	// may not read whose expansion the API server refuses.
	ReasonStorageResize = "StorageResizeUnsupported"
	// ReasonStorageResizeFailed: the storage driver reports the expansion
	// of a data volume infeasible.
	ReasonStorageResizeFailed   = "StorageResizeFailed"
	ReasonWaitingForOldInstance = "WaitingForPreviousInstance"
	ReasonServersNotReady       = "ServersNotReady"
	// Failures: the API server refused or could not answer a request about
	// a child. All but APIError stall until someone lifts the cause.
	ReasonQuotaExceeded   = "QuotaExceeded"
	ReasonAdmissionDenied = "AdmissionDenied"
	ReasonForbidden       = "Forbidden"
	ReasonInvalidChild    = "InvalidChild"
	ReasonAPIError        = "APIError"
)

// MyDatabaseStatus is the observed state of a MyDatabase.
type MyDatabaseStatus struct {
	// observedGeneration is the last generation of the spec the operator
	// has fully acted on: every child applied, and the MyDatabase Ready,
	// Stalled or Paused at that generation. While a newer generation is
	// still rolling out (Reconciling), it keeps the previous value, as
	// kstatus and Flux expect; each condition carries the generation it
	// describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// phase is a one-word summary for humans.
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// replicas is the number of server pods that exist.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// readyReplicas is the number of server pods that are ready.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`

	// ready is readyReplicas/spec.replicas, for display.
	// +optional
	Ready string `json:"ready,omitempty"`

	// selector is the label selector of the server pods, for the scale
	// subresource.
	// +optional
	Selector string `json:"selector,omitempty"`

	// endpoint is the read-write host:port (the primary).
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// readEndpoint is the read-only host:port (the replicas), when there are
	// replicas.
	// +optional
	ReadEndpoint string `json:"readEndpoint,omitempty"`

	// currentPrimary is the pod that runs the primary: the holder of the
	// MyDatabase's primary Lease (<name>-primary), which its instance
	// manager renews, or ordinal 0 before any instance has taken the Lease.
	// +optional
	CurrentPrimary string `json:"currentPrimary,omitempty"`

	// targetPrimary is the instance a switchover in progress is making the
	// primary; empty when none is.
	// +optional
	TargetPrimary string `json:"targetPrimary,omitempty"`

	// switchover reports the last switchover, requested or made by a
	// rolling update.
	// +optional
	Switchover *SwitchoverStatus `json:"switchover,omitempty"`

	// tls is where the server certificate stands (condition
	// CertificateValid says whether clients can verify it).
	// +optional
	TLS *TLSStatus `json:"tls,omitempty"`

	// backup is where continuous archiving stands (condition
	// ContinuousArchiving), with spec.backup.
	// +optional
	Backup *BackupStatus `json:"backup,omitempty"`

	// storage is the size the data volumes are asked to have, and the last
	// growth spec.storage.autoGrow made.
	// +optional
	Storage *StorageStatus `json:"storage,omitempty"`

	// walStorage is the same for the WAL volumes, with spec.walStorage.
	// +optional
	WALStorage *StorageStatus `json:"walStorage,omitempty"`

	// instances is what each server's instance manager last reported.
	// +listType=map
	// +listMapKey=name
	// +optional
	Instances []InstanceStatus `json:"instances,omitempty"`

	// credentialsSecret is the Secret with the connection details.
	// +optional
	CredentialsSecret string `json:"credentialsSecret,omitempty"`

	// passwords is where the password of each role stands: its Secret, the
	// last rotation, a rotation under way.
	// +listType=map
	// +listMapKey=role
	// +optional
	Passwords []PasswordStatus `json:"passwords,omitempty"`

	// roles is where each declared role (spec.roles) stands on the
	// primary.
	// +listType=map
	// +listMapKey=name
	// +optional
	Roles []RoleStatus `json:"roles,omitempty"`

	// databases is where each declared database (spec.databases) stands
	// on the primary.
	// +listType=map
	// +listMapKey=name
	// +optional
	Databases []DatabaseStatus `json:"databases,omitempty"`

	// currentVersion is the version every server runs, once the rollout of
	// spec.version has finished; its major is the one the data is on.
	// +optional
	CurrentVersion string `json:"currentVersion,omitempty"`

	// majorUpgrade reports the last major version upgrade
	// (docs/upgrade.md).
	// +optional
	MajorUpgrade *MajorUpgradeStatus `json:"majorUpgrade,omitempty"`

	// hibernation reports the last hibernation (spec.hibernate).
	// +optional
	Hibernation *HibernationStatus `json:"hibernation,omitempty"`

	// replica is where a replica MyDatabase (spec.replica.enabled) stands
	// against its source; gone once it is promoted.
	// +optional
	Replica *ReplicaStatus `json:"replica,omitempty"`

	// conditions: Ready (summary), Reconciling and Stalled, in the kstatus
	// convention.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// MaxNameLength is the longest metadata.name a MyDatabase may have; longer
// names are refused at admission (the XValidation rule on MyDatabase holds
// this number as a literal, and a test checks that the two agree).
//
// The children are named from metadata.name, and the tightest of their
// limits is the StatefulSet's: its controller labels every pod
// controller-revision-hash=<statefulset>-<hash>, with a hash of up to 10
// characters, and a label value may be at most 63 characters, so the
// StatefulSet, named like the MyDatabase, may have at most 63-1-10 = 52.
// A longer name would be accepted by every other API but its pods could
// never be created. The other limits are looser: the Services
// (<name>-headless, a DNS-1035 label of at most 63, allows 54) and the pod
// names, which become hostnames and the statefulset.kubernetes.io/pod-name
// label (<name>-<ordinal>, at most 63, allows 61).
const MaxNameLength = 52

// The name rule (52 is MaxNameLength) runs on create only: metadata.name is
// immutable, and a MyDatabase created before the rule existed must stay
// updatable, or its finalizer could never come off.
// A name with a dot is a valid object name but not a Service name nor a
// hostname, so it is refused too, on create only for the same reason.
// +kubebuilder:validation:XValidation:rule="oldSelf.hasValue() || !self.metadata.name.contains('.')",optionalOldSelf=true,message="metadata.name may not contain dots: it names the database's Services and pod hostnames, which are DNS labels"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.replication) || !has(self.spec.replication.synchronous) || self.spec.replication.synchronous.number < (has(self.spec.replicas) ? self.spec.replicas : 1)",message="spec.replication.synchronous.number must be less than spec.replicas: a commit can only wait for replicas that exist"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.switchover) || !has(self.spec.switchover.to) || self.spec.switchover.to.matches('^' + self.metadata.name + '-[0-9]+$')",message="spec.switchover.to must name one of this MyDatabase's pods, <metadata.name>-<ordinal>, or be left out to pick the most advanced replica"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.spec.version) || !has(self.spec.version) || self.spec.version.split('.')[0] == oldSelf.spec.version.split('.')[0] || (has(self.status) && has(self.status.currentVersion) && int(self.spec.version.split('.')[0]) >= int(self.status.currentVersion.split('.')[0]))",message="spec.version may not go below the major version the data is on (status.currentVersion): PostgreSQL data cannot be downgraded; a change of major is possible only once the MyDatabase has been Ready"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.databases) || self.spec.databases.all(d, !has(d.subscriptions) || d.subscriptions.all(s, !has(s.source.myDatabase) || s.source.myDatabase != self.metadata.name))",message="a subscription's source.myDatabase may not be this MyDatabase: a server cannot subscribe to itself"
// +kubebuilder:validation:XValidation:rule="oldSelf.hasValue() || size(self.metadata.name) <= 52",optionalOldSelf=true,message="metadata.name may be at most 52 characters: the StatefulSet of the same name labels its pods controller-revision-hash=<name>-<hash of up to 10 characters>, and a label value may be at most 63 characters"

// MyDatabase is a PostgreSQL database: one primary and streaming read
// replicas, with its volumes, Services and credentials.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=mydb,categories=databases
// +kubebuilder:printcolumn:name="Engine",type=string,JSONPath=`.spec.engine`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.ready`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Primary",type=string,JSONPath=`.status.currentPrimary`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MyDatabase struct {
	metav1.TypeMeta `json:",inline"`

	// +optional
	metav1.ObjectMeta `json:"metadata,omitzero"`

	// +kubebuilder:default={}
	// +optional
	Spec MyDatabaseSpec `json:"spec"`

	// +optional
	Status MyDatabaseStatus `json:"status,omitzero"`
}

// +kubebuilder:object:root=true

// MyDatabaseList contains a list of MyDatabase.
type MyDatabaseList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitzero"`
	Items           []MyDatabase `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(SchemeGroupVersion, &MyDatabase{}, &MyDatabaseList{})
		return nil
	})
}

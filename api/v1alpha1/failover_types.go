package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// FailoverSpec tunes failover. One number decides every delay, so that the
// timing argument of docs/high-availability.md holds for any value: the
// primary renews its Lease every leaseDurationSeconds/5, stops
// acknowledging commits when it could not renew for 3/5 of it, and another
// instance takes the Lease only after a whole leaseDurationSeconds without
// a renewal.
type FailoverSpec struct {
	// leaseDurationSeconds is how long the primary's Lease is valid without
	// a renewal: a primary lost without a clean shutdown (node lost,
	// container killed, cut off from the API server) is replaced about this
	// long after its last renewal. Lower is faster failover but more Lease
	// writes (one every leaseDurationSeconds/5 per MyDatabase) and a
	// primary that fences itself on shorter API server outages. The
	// default, 4, replaces a lost primary within 5 s (make bench-ha,
	// docs/high-availability.md).
	// +kubebuilder:default=4
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=300
	// +optional
	LeaseDurationSeconds int32 `json:"leaseDurationSeconds,omitempty"`
}

// ReplicationSpec is how the replicas receive the primary's WAL:
// asynchronously unless synchronous is set.
type ReplicationSpec struct {
	// synchronous makes every commit wait until a quorum of replicas has
	// its WAL on disk, so that a failover loses no acknowledged commit.
	// +optional
	Synchronous *SynchronousReplication `json:"synchronous,omitempty"`

	// logical sets wal_level=logical (the servers restart, one at a time,
	// the primary last by switchover) so that the databases' publications
	// (spec.databases[].publications) can be consumed, and keeps the
	// operator's role mydatabase_logical: it logs in with the password of
	// the Secret <mydatabase>-role-mydatabase-logical (generated once),
	// may replicate, and reads every table, as a subscriber or a change
	// data capture tool needs.
	// +optional
	Logical bool `json:"logical,omitempty"`
}

// Durability is what synchronous replication does when too few replicas
// stream.
// +kubebuilder:validation:Enum=Required;Preferred
type Durability string

const (
	// DurabilityRequired: a commit waits for number replicas, even when
	// fewer stream (writes stop rather than be acknowledged with fewer
	// copies), and a failover promotes only a replica certain to hold
	// every acknowledged commit.
	DurabilityRequired Durability = "Required"
	// DurabilityPreferred: with fewer replicas streaming, a commit waits
	// for those there are (with none, for the primary's fence alone), and
	// a failover promotes the most advanced replica it can reach.
	DurabilityPreferred Durability = "Preferred"
)

// SynchronousReplication is a quorum: each commit waits for any number of
// the replicas.
type SynchronousReplication struct {
	// number of replicas, any of them, that must have flushed a commit's
	// WAL before it is acknowledged; less than spec.replicas.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=8
	// +required
	Number int32 `json:"number"`
	// durability is Required (the default) or Preferred.
	// +kubebuilder:default=Required
	// +optional
	Durability Durability `json:"durability,omitempty"`
}

// SwitchoverSpec asks for a planned change of primary: the primary stops,
// the target receives the last of its WAL and is promoted, and the old
// primary follows it, with no commit lost (docs/high-availability.md).
type SwitchoverSpec struct {
	// to is the instance (pod) to make the primary, for example orders-1.
	// Empty: the ready replica with the most WAL.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	To string `json:"to,omitempty"`
	// requestedAt identifies the request: each new value asks for one
	// switchover, which status.switchover then reports on. Setting it to
	// the current time is the usual way to ask.
	// +required
	RequestedAt metav1.Time `json:"requestedAt"`
}

// SwitchoverPhase is how far a switchover has got.
// +kubebuilder:validation:Enum=Running;Succeeded;Failed
type SwitchoverPhase string

const (
	SwitchoverRunning   SwitchoverPhase = "Running"
	SwitchoverSucceeded SwitchoverPhase = "Succeeded"
	SwitchoverFailed    SwitchoverPhase = "Failed"
)

// Why a switchover runs: the user asked for it (spec.switchover), a
// rolling update moves the primary before it restarts the old one, or a
// hibernation moves it to ordinal 0, which the StatefulSet stops last.
const (
	SwitchoverRequested     = "Requested"
	SwitchoverRollingUpdate = "RollingUpdate"
	SwitchoverHibernation   = "Hibernation"
)

// SwitchoverStatus reports the last switchover.
type SwitchoverStatus struct {
	// requestedAt is the spec.switchover.requestedAt handled last (a
	// rolling update's switchover carries it over).
	// +optional
	RequestedAt *metav1.Time `json:"requestedAt,omitempty"`
	// reason is Requested (spec.switchover), RollingUpdate or Hibernation.
	// +optional
	Reason string `json:"reason,omitempty"`
	// from is the primary when it started.
	// +optional
	From string `json:"from,omitempty"`
	// to is the instance being made the primary.
	// +optional
	To string `json:"to,omitempty"`
	// phase is Running, Succeeded or Failed.
	// +optional
	Phase SwitchoverPhase `json:"phase,omitempty"`
	// message says what happened, and why it failed.
	// +optional
	Message string `json:"message,omitempty"`
	// startedAt is when the operator asked the primary to hand over.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// finishedAt is when it succeeded or failed.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// poolers are the MyDatabasePoolers whose pods paused PgBouncer
	// before the old primary stopped, and how many pods of each: their
	// clients' transactions waited for the new primary instead of failing.
	// +listType=map
	// +listMapKey=name
	// +optional
	Poolers []SwitchoverPooler `json:"poolers,omitempty"`
}

// SwitchoverPooler is how many pods of one pooler paused for a switchover.
type SwitchoverPooler struct {
	// name of the MyDatabasePooler.
	Name string `json:"name"`
	// pausedPods is how many of its pods paused.
	PausedPods int32 `json:"pausedPods"`
}

// InstanceStatus is what one server's instance manager last reported
// (the pod annotation AnnotationInstance).
type InstanceStatus struct {
	// name of the pod.
	Name string `json:"name"`

	// role is primary or replica, or empty while the instance manager has
	// not reported (or cannot tell).
	// +optional
	Role string `json:"role,omitempty"`

	// ready is true when the server accepts connections in its role.
	// +optional
	Ready bool `json:"ready,omitempty"`

	// timeline is the server's PostgreSQL timeline.
	// +optional
	Timeline int64 `json:"timeline,omitempty"`

	// lsn is the primary's current write-ahead log position, or the
	// position a replica has replayed.
	// +optional
	LSN string `json:"lsn,omitempty"`

	// lagBytes is how far a replica's replay is behind the primary's
	// position, as of their last reports (they are sent on a change of
	// role or readiness, and at most every 10 s otherwise).
	// +optional
	LagBytes *int64 `json:"lagBytes,omitempty"`

	// storage is the server's data volume and the WAL on it.
	// +optional
	Storage *InstanceStorage `json:"storage,omitempty"`

	// manager is the version of the instance manager running in the pod:
	// the first 12 hex digits of its binary's SHA-256, as the operator's
	// log and events name it. Empty from instance managers that cannot be
	// replaced in place.
	// +optional
	Manager string `json:"manager,omitempty"`

	// reportedAt is when the instance manager sent this report.
	// +optional
	ReportedAt *metav1.Time `json:"reportedAt,omitempty"`
}

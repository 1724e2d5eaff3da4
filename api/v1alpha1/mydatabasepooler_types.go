package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// PoolerType is which servers of the MyDatabase a pooler leads to.
// +kubebuilder:validation:Enum=rw;ro
type PoolerType string

const (
	// PoolerReadWrite leads to the primary (the MyDatabase's -rw Service).
	PoolerReadWrite PoolerType = "rw"
	// PoolerReadOnly leads to the replicas (the -ro Service).
	PoolerReadOnly PoolerType = "ro"
)

// PoolMode is when PgBouncer gives a server connection back to the pool.
// +kubebuilder:validation:Enum=session;transaction
type PoolMode string

const (
	// PoolModeSession: when the client disconnects. Every PostgreSQL
	// feature works as on a direct connection.
	PoolModeSession PoolMode = "session"
	// PoolModeTransaction: at the end of each transaction. Far fewer
	// server connections for many clients, but session state (SET,
	// LISTEN, advisory locks held across transactions, prepared
	// statements of the protocol) does not survive a transaction.
	PoolModeTransaction PoolMode = "transaction"
)

// MyDatabasePoolerSpec is a PgBouncer pool in front of a MyDatabase of the
// same namespace (docs/pooler.md).
// +kubebuilder:validation:XValidation:rule="!has(self.pgbouncer) || !has(self.pgbouncer.minPoolSize) || self.pgbouncer.minPoolSize <= (has(self.pgbouncer.defaultPoolSize) ? self.pgbouncer.defaultPoolSize : 20)",message="spec.pgbouncer.minPoolSize must not exceed defaultPoolSize (20 when unset)"
type MyDatabasePoolerSpec struct {
	// database names the MyDatabase of this namespace the pooler leads to.
	// It cannot be changed: a pooler for another database is a new one.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.database is immutable: create another MyDatabasePooler for another database"
	Database string `json:"database"`

	// type is rw (the default: the primary) or ro (the replicas).
	// +kubebuilder:default=rw
	// +optional
	Type PoolerType `json:"type,omitempty"`

	// instances is how many PgBouncer pods run; 2 or more keep the pool
	// up through a node's loss or drain.
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=32
	// +optional
	Instances *int32 `json:"instances,omitempty"`

	// poolMode is session (the default) or transaction.
	// +kubebuilder:default=session
	// +optional
	PoolMode PoolMode `json:"poolMode,omitempty"`

	// pgbouncer holds the PgBouncer settings a pooler may change; every
	// other one is the operator's (authentication, TLS, addresses).
	// +optional
	PgBouncer PgBouncerSettings `json:"pgbouncer,omitzero"`

	// image is the PgBouncer image, with pgbouncer on its PATH; the
	// operator's default when empty (its --pooler-image flag).
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// resources of the PgBouncer container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// serviceType of the pooler's Service <name> (ClusterIP by default).
	// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
	// +optional
	ServiceType corev1.ServiceType `json:"serviceType,omitempty"`

	// nodeSelector, tolerations, affinity, priorityClassName and
	// topologySpreadConstraints place the pods, as for a MyDatabase.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`
	// +listType=atomic
	// +optional
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`

	// podLabels and podAnnotations are added to the pods; the operator's
	// own labels win.
	// +optional
	PodLabels map[string]string `json:"podLabels,omitempty"`
	// +optional
	PodAnnotations map[string]string `json:"podAnnotations,omitempty"`

	// paused stops the operator changing anything of this pooler; its
	// pods go on serving.
	// +optional
	Paused bool `json:"paused,omitempty"`
}

// PgBouncerSettings are the PgBouncer settings of a pooler, by PgBouncer's
// names (https://www.pgbouncer.org/config.html). Changing one reloads
// PgBouncer: no client is disconnected.
type PgBouncerSettings struct {
	// defaultPoolSize is how many server connections each user and
	// database pair may have (default_pool_size; default 20).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +optional
	DefaultPoolSize *int32 `json:"defaultPoolSize,omitempty"`

	// minPoolSize keeps this many server connections open per pool
	// (min_pool_size; default 0).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	// +optional
	MinPoolSize *int32 `json:"minPoolSize,omitempty"`

	// reservePoolSize is how many more a pool may open when a client has
	// waited reservePoolTimeoutSeconds (reserve_pool_size; default 0).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	// +optional
	ReservePoolSize *int32 `json:"reservePoolSize,omitempty"`

	// maxClientConnections is how many clients one PgBouncer pod accepts
	// (max_client_conn; default 100).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	// +optional
	MaxClientConnections *int32 `json:"maxClientConnections,omitempty"`

	// maxDBConnections caps the server connections to each database,
	// whatever the user (max_db_connections; default 0, no cap).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	// +optional
	MaxDBConnections *int32 `json:"maxDBConnections,omitempty"`

	// queryWaitTimeoutSeconds is how long a client may wait for a server
	// connection before it is disconnected (query_wait_timeout; default
	// 120, 0 waits for ever).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	// +optional
	QueryWaitTimeoutSeconds *int32 `json:"queryWaitTimeoutSeconds,omitempty"`

	// serverIdleTimeoutSeconds closes a server connection idle this long
	// (server_idle_timeout; default 600).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	// +optional
	ServerIdleTimeoutSeconds *int32 `json:"serverIdleTimeoutSeconds,omitempty"`

	// clientIdleTimeoutSeconds closes a client connection idle this long
	// (client_idle_timeout; default 0, never).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	// +optional
	ClientIdleTimeoutSeconds *int32 `json:"clientIdleTimeoutSeconds,omitempty"`

	// reservePoolTimeoutSeconds: see reservePoolSize
	// (reserve_pool_timeout; default 5).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	// +optional
	ReservePoolTimeoutSeconds *int32 `json:"reservePoolTimeoutSeconds,omitempty"`

	// paused holds the clients' traffic (PgBouncer's PAUSE): running
	// transactions (in session mode, sessions) finish, then PgBouncer
	// closes its server connections and new transactions wait, up to
	// queryWaitTimeoutSeconds, until paused is false again (RESUME). The
	// clients stay connected. It reaches the pods with the pooler's
	// ConfigMap, which the kubelet refreshes within about a minute.
	// (spec.paused, unlike it, stops the operator, not the traffic.)
	// +optional
	Paused bool `json:"paused,omitempty"`
}

// Reasons of a MyDatabasePooler's conditions.
const (
	// ReasonDatabaseNotFound (Stalled): spec.database names no MyDatabase
	// of the namespace.
	ReasonDatabaseNotFound = "DatabaseNotFound"
	// ReasonDatabaseCANotFound (Stalled): the MyDatabase has no CA Secret
	// to issue the pooler's certificates from (yet, or any more).
	ReasonDatabaseCANotFound = "DatabaseCANotFound"
	// ReasonPodsNotReady (Reconciling): fewer pods are available than
	// spec.instances.
	ReasonPodsNotReady = "PodsNotReady"
	// ReasonLookupPending (Reconciling): the MyDatabase's primary has not
	// yet made the poolers' role and lookup (ConditionPoolerLookupApplied),
	// so PgBouncer could not log a client in.
	ReasonLookupPending = "LookupPending"
)

// ConditionPoolerLookupApplied is a MyDatabase's condition while a
// MyDatabasePooler leads to it: True once its primary keeps the role
// PgBouncer logs in as and, in every database, the function that looks up
// clients' passwords; False while it has not yet, or with why it could
// not. Absent while no pooler leads to the MyDatabase, and on a replica
// MyDatabase (its servers take both from the source's primary). A pooler
// is Ready only once it is True: before, its clients' logins fail. No
// effect on the MyDatabase's Ready.
const ConditionPoolerLookupApplied = "PoolerLookupApplied"

// The reasons of ConditionPoolerLookupApplied.
const (
	ReasonPoolerLookupApplied    = "PoolerLookupApplied"
	ReasonPoolerLookupNotApplied = "PoolerLookupNotApplied"
	ReasonPoolerLookupPending    = "PoolerLookupPending"
)

// MyDatabasePoolerStatus is what the operator last found of a pooler.
type MyDatabasePoolerStatus struct {
	// observedGeneration is the metadata.generation this status is about.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// instances is spec.instances as last applied; readyInstances how
	// many of its pods are available.
	// +optional
	Instances int32 `json:"instances,omitempty"`
	// +optional
	ReadyInstances int32 `json:"readyInstances,omitempty"`

	// endpoint is host:port of the pooler's Service, inside the cluster.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// secretName holds the pooler's certificates and the CA clients
	// verify it with (key ca.crt).
	// +optional
	SecretName string `json:"secretName,omitempty"`

	// lastSwitchover is how this pooler went through the last switchover
	// of its MyDatabase since the pooler was made, when it pauses through
	// them (a read-write pooler in transaction mode).
	// +optional
	LastSwitchover *PoolerSwitchoverStatus `json:"lastSwitchover,omitempty"`

	// conditions, in the kstatus convention: Ready, Reconciling (only
	// while True), Stalled (only while True: a person must act, the
	// message says how).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PoolerSwitchoverStatus is how a pooler went through a switchover of its
// MyDatabase.
type PoolerSwitchoverStatus struct {
	// from and to are the old and the new primary.
	// +optional
	From string `json:"from,omitempty"`
	// +optional
	To string `json:"to,omitempty"`
	// finishedAt is when the switchover succeeded (the MyDatabase's
	// status.switchover.finishedAt).
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// pausedPods is how many of the pooler's pods paused PgBouncer before
	// the old primary stopped: their clients' transactions waited for the
	// new primary. A pod that did not pause dropped its server
	// connections with the old primary, failing the transactions on them.
	PausedPods int32 `json:"pausedPods"`
	// message says it in words.
	// +optional
	Message string `json:"message,omitempty"`
}

// MyDatabasePooler is a PgBouncer connection pooler in front of a
// MyDatabase (docs/pooler.md).
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mydbpooler,categories=databases
// +kubebuilder:printcolumn:name="Database",type=string,JSONPath=`.spec.database`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.poolMode`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyInstances`
// +kubebuilder:printcolumn:name="Instances",type=integer,JSONPath=`.status.instances`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MyDatabasePooler struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is a standard object metadata
	// +optional
	metav1.ObjectMeta `json:"metadata,omitzero"`

	// spec is the pool wanted.
	// +required
	Spec MyDatabasePoolerSpec `json:"spec"`

	// status is what the operator last found.
	// +optional
	Status MyDatabasePoolerStatus `json:"status,omitzero"`
}

// +kubebuilder:object:root=true

// MyDatabasePoolerList contains a list of MyDatabasePooler.
type MyDatabasePoolerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitzero"`
	Items           []MyDatabasePooler `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(SchemeGroupVersion, &MyDatabasePooler{}, &MyDatabasePoolerList{})
		return nil
	})
}

package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// ReplicaSpec makes a MyDatabase a standby copy of another one, its
// source, which may run in another namespace or another Kubernetes
// cluster: the only link between the two is the source's WAL archive. The
// replica's designated primary restores the source's latest base backup,
// then replays every WAL file the source archives; the replica's other
// servers stream from it. It accepts no writes. docs/replica-clusters.md
// has the design and the failure cases.
type ReplicaSpec struct {
	// enabled keeps this MyDatabase a replica of its source. Setting it to
	// false promotes it in place: the designated primary replays what the
	// source's WAL still holds (up to promotionToken, when set), then
	// starts a new timeline, takes writes, and archives to this
	// MyDatabase's own spec.backup path. A MyDatabase made with enabled
	// false is promoted as soon as it has restored the source's archive.
	// Setting it to true on a MyDatabase that takes writes demotes it: its
	// primary stops, its WAL ends, and it follows the source from there
	// (status.replica.demotionToken says where it ended); spec.replica is
	// then added with enabled false first (the pods restart once, to learn
	// the source), and enabled set to true after.
	Enabled bool `json:"enabled"`

	// promotionToken is the demotion token of the source
	// (its status.replica.demotionToken, <timeline>/<LSN>): setting
	// enabled to false then promotes only once this replica has replayed
	// the source's WAL past that point, where the demoted source's WAL
	// ended, so no commit it acknowledged is lost. Without it, the
	// promotion takes what has arrived (the source lost).
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+/[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$')",message="spec.replica.promotionToken is the source's status.replica.demotionToken, such as 1/0/3000060"
	// +kubebuilder:validation:MaxLength=32
	// +optional
	PromotionToken string `json:"promotionToken,omitempty"`

	// source is where the source's WAL comes from.
	Source ReplicaSource `json:"source"`
}

// ReplicaSource is where a replica MyDatabase reads its source's WAL: the
// source's archive, a streaming connection to its primary, or both
// (streaming first; when the stream breaks, the archive until it is back).
// +kubebuilder:validation:XValidation:rule="has(self.objectStore) || has(self.streaming)",message="spec.replica.source takes objectStore, streaming or both: where the source's WAL comes from"
// +kubebuilder:validation:XValidation:rule="!has(self.encryption) || has(self.objectStore)",message="spec.replica.source.encryption decrypts the source's archive: it needs spec.replica.source.objectStore"
type ReplicaSource struct {
	// objectStore is the source's spec.backup store, its path included:
	// the replica reads its base backups and WAL archive, never writes
	// there.
	// +kubebuilder:validation:XValidation:rule="has(self.path) && self.path != ''",message="spec.replica.source.objectStore.path is required: it names the source's archive (<namespace>/<name> by default for the source's spec.backup)"
	// +optional
	ObjectStore *ObjectStore `json:"objectStore,omitempty"`

	// encryption names a Secret of this namespace with the age identities
	// the source's archive is encrypted to (the source's
	// spec.backup.encryption), for an objectStore source.
	// +optional
	Encryption *BackupEncryption `json:"encryption,omitempty"`

	// streaming connects to the source's primary as a standby does, with
	// a client certificate of the source's replication role: the WAL
	// arrives as the source writes it, not segment by segment. Without
	// objectStore, the data is cloned from the source (pg_basebackup).
	// +optional
	Streaming *ReplicaStreaming `json:"streaming,omitempty"`
}

// ReplicaStreaming is a connection to the source's primary.
type ReplicaStreaming struct {
	// host reaches the source's primary from this MyDatabase's pods: its
	// -rw Service (<name>-rw.<namespace>.svc in the same Kubernetes
	// cluster), or an address that leads to it from another one.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Host string `json:"host"`

	// port of host.
	// +kubebuilder:default=5432
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`

	// secretName is a Secret of this namespace with tls.crt and tls.key,
	// a client certificate of the source's replication role (replicator),
	// and ca.crt, the source's CA, which its server certificate must chain
	// to: the source's <name>-replication-tls Secret, copied here.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	SecretName string `json:"secretName"`
}

// ReplicaStatus is where a replica MyDatabase stands against its source,
// as its designated primary last reported.
type ReplicaStatus struct {
	// source is where the designated primary replays from: the archive's
	// bucket/path, the streaming host:port, or both.
	Source string `json:"source"`
	// streaming: the designated primary streams from the source's primary
	// now (with objectStore too, it replays the archive while it does not).
	// +optional
	Streaming bool `json:"streaming,omitempty"`
	// lagBytes is how much WAL the source's primary had flushed, at its
	// last message to the stream, that this replica has not replayed yet.
	// Streaming only.
	// +optional
	LagBytes *int64 `json:"lagBytes,omitempty"`
	// designatedPrimary is the pod that replays the source's archive; the
	// other servers stream from it.
	// +optional
	DesignatedPrimary string `json:"designatedPrimary,omitempty"`
	// lastFetchedWAL is the last WAL file fetched from the source's
	// archive.
	// +optional
	LastFetchedWAL string `json:"lastFetchedWAL,omitempty"`
	// lastReplayedLSN is the WAL position replayed so far.
	// +optional
	LastReplayedLSN string `json:"lastReplayedLSN,omitempty"`
	// lastReplayedTime is the source's commit time of the last transaction
	// replayed: the replica holds the source's data as of then. How far
	// behind it is: now minus this, while the source takes writes.
	// +optional
	LastReplayedTime *metav1.Time `json:"lastReplayedTime,omitempty"`
	// demotionToken, on a MyDatabase that was demoted, is where its WAL
	// ended (<timeline>/<LSN> of its last checkpoint, at its clean stop):
	// give it as spec.replica.promotionToken to the MyDatabase that
	// promotes in its place, so that it promotes only once it has all of
	// it. Gone once this one follows the new primary's timeline.
	// +optional
	DemotionToken string `json:"demotionToken,omitempty"`
	// message says what the designated primary waits for, when it does
	// (a promotion waiting for the token's WAL), and, until the next
	// promotion, how a demotion changed the data to follow the source
	// (rewound or copied again past the point where the source's timeline
	// forked from it) and what it lost there.
	// +optional
	Message string `json:"message,omitempty"`
}

// ReasonReplicaSourceSecretInvalid (Stalled): spec.replica.source.streaming's
// Secret is missing or lacks a key.
const ReasonReplicaSourceSecretInvalid = "ReplicaSourceSecretInvalid"

// ReasonReplicaArchiveClash (Stalled): a replica MyDatabase's spec.backup
// would archive into the archive its spec.replica.source reads.
const ReasonReplicaArchiveClash = "ReplicaArchiveClash"

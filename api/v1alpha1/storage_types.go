package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// InstanceStorage is a server's data volume and its WAL, as its instance
// manager measured them with its last report.
type InstanceStorage struct {
	// capacityBytes is the size of the data volume's filesystem.
	CapacityBytes int64 `json:"capacityBytes"`
	// availableBytes is what is free on it for the server.
	AvailableBytes int64 `json:"availableBytes"`
	// walBytes is what pg_wal holds.
	WALBytes int64 `json:"walBytes"`
	// walCapacityBytes and walAvailableBytes are the same for the WAL
	// volume, with spec.walStorage; absent while the WAL is on the data
	// volume.
	// +optional
	WALCapacityBytes int64 `json:"walCapacityBytes,omitempty"`
	// +optional
	WALAvailableBytes int64 `json:"walAvailableBytes,omitempty"`
}

// ConditionWALSpace tells whether the WAL on every server stays within its
// share of its volume (the WAL volume with spec.walStorage, the data volume
// otherwise): half of it. The operator bounds what
// checkpoints and replication slots keep to a quarter each (max_wal_size,
// max_slot_wal_keep_size, unless spec.parameters sets them), so more than
// half means WAL that is kept for another reason, most often archiving
// that fails, and the volume fills with it. True (WALWithinBound) or False
// (WALAccumulating, with the server, the size, the cause and what to do);
// Unknown until a server has reported its storage. It does not change
// Ready: the server still takes writes.
const ConditionWALSpace = "WALSpace"

// Reasons of ConditionWALSpace.
const (
	ReasonWALWithinBound  = "WALWithinBound"
	ReasonWALAccumulating = "WALAccumulating"
	ReasonWALNotReported  = "NotReported"
)

// AutoGrowSpec grows the volumes before they fill. When a server reports
// its volume (data, or WAL with spec.walStorage) more than usedPercent
// full, that volume of every server is asked to grow by stepPercent of its
// size, at most to maxSize, the way a larger size grows them (online,
// where the StorageClass allows expansion). The spec's size stays the
// floor; the volumes never shrink.
type AutoGrowSpec struct {
	// usedPercent of the data volume past which it grows.
	// +kubebuilder:validation:Minimum=50
	// +kubebuilder:validation:Maximum=95
	// +kubebuilder:default=80
	// +optional
	UsedPercent int32 `json:"usedPercent,omitempty"`

	// stepPercent of the volume's size that each growth adds.
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:default=20
	// +optional
	StepPercent int32 `json:"stepPercent,omitempty"`

	// maxSize is the largest size auto-growth asks for.
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="autoGrow.maxSize must be greater than zero, for example 100Gi"
	MaxSize resource.Quantity `json:"maxSize"`
}

// StorageStatus is the size of the data volumes, or of the WAL volumes.
type StorageStatus struct {
	// size every such volume is asked to have: the spec's size, or more
	// once autoGrow grew them.
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`

	// lastAutoGrowth is the last growth autoGrow made.
	// +optional
	LastAutoGrowth *AutoGrowth `json:"lastAutoGrowth,omitempty"`
}

// AutoGrowth is one growth of the data (or WAL) volumes by autoGrow.
type AutoGrowth struct {
	// time the operator asked for it.
	Time metav1.Time `json:"time"`
	// from and to are the sizes asked for before and after.
	From resource.Quantity `json:"from"`
	To   resource.Quantity `json:"to"`
	// reason names the server whose volume was past usedPercent, and how full.
	Reason string `json:"reason"`
}

// ReasonAutoGrowAtMax (event): a volume is past usedPercent but already at
// spec.storage.autoGrow.maxSize.
const ReasonAutoGrowAtMax = "AutoGrowAtMaxSize"

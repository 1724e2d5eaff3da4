package v1alpha1

// InstanceStorage is a server's data volume and the WAL on it, as its
// instance manager measured them with its last report.
type InstanceStorage struct {
	// capacityBytes is the size of the data volume's filesystem.
	CapacityBytes int64 `json:"capacityBytes"`
	// availableBytes is what is free on it for the server.
	AvailableBytes int64 `json:"availableBytes"`
	// walBytes is what pg_wal holds.
	WALBytes int64 `json:"walBytes"`
}

// ConditionWALSpace tells whether the WAL on every server stays within its
// share of the data volume: half of it. The operator bounds what
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

package contract

import (
	"encoding/json"
	"fmt"
)

// Quorum is what synchronous replication asks of the instance managers.
type Quorum struct {
	// Instances is spec.replicas: the primary and its replicas.
	Instances int32 `json:"instances"`
	// Synchronous is how many replicas must have flushed a commit before
	// it is acknowledged; 0 for asynchronous replication.
	Synchronous int32 `json:"synchronous,omitempty"`
	// Required: a commit waits for Synchronous replicas even when fewer
	// stream, and a failover needs the candidacies of enough replicas to
	// be sure of every acknowledged commit (Electors).
	Required bool `json:"required,omitempty"`
	// Sole, when set, is the one member that holds data: a major upgrade
	// stopped every server cleanly, this one last, and deleted the
	// others' volumes. Until it has taken the Lease it may be elected
	// alone: no other member can hold a commit it lacks, and the others,
	// with nothing to stand with, would never make up a required quorum's
	// electors.
	Sole string `json:"sole,omitempty"`
}

// Electors is how many replicas' positions an election must know to be
// sure to find every acknowledged commit: each one is on at least
// Synchronous of the Instances-1 replicas, so any Instances-Synchronous of
// them include one that holds it (R + W > N, with W = Synchronous+1
// counting the primary). 1 (the candidate itself) unless the quorum is
// required.
func (q Quorum) Electors() int {
	if !q.Required || q.Synchronous == 0 {
		return 1
	}
	return int(q.Instances - q.Synchronous)
}

// ElectorsFor is Electors for member's own election: 1 for the Sole
// member.
func (q Quorum) ElectorsFor(member string) int {
	if q.Sole != "" && q.Sole == member {
		return 1
	}
	return q.Electors()
}

func (q Quorum) String() string {
	b, _ := json.Marshal(q) // a Quorum always marshals
	return string(b)
}

// ParseQuorum reads a Quorum from the annotation; an empty value is
// asynchronous replication, and so is one it refuses (the zero Quorum,
// never the fields decoded before the error).
func ParseQuorum(s string) (Quorum, error) {
	var q Quorum
	if s == "" {
		return q, nil
	}
	if err := json.Unmarshal([]byte(s), &q); err != nil {
		return Quorum{}, fmt.Errorf("annotation %s: %w", AnnotationQuorum, err)
	}
	return q, nil
}

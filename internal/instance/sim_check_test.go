package instance

import (
	"maps"
	"slices"
	"time"
)

// acknowledge confirms the waiting commits the way the fence's standby
// does (fence.go, witness): only while the fence is open on the
// instance's clock, the instance manager running, and with a synchronous
// quorum as far as enough members flushed (quorumPosition). It checks
// every acknowledgement against the Lease's holder of record, and returns
// who acknowledged.
func (w *simWorld) acknowledge(problem func(string, ...any)) string {
	var by []string
	for _, n := range w.nodes {
		waiting := w.pending[n.name]
		if len(waiting) == 0 || n.down() || n.pg.role != asPrimary || !n.h.fence.open() {
			continue
		}
		upto := uint64(len(n.pg.wal))
		if q := n.h.fence.quorumNow(); q.Synchronous > 0 {
			var flushed []uint64
			for _, name := range n.h.c.members(q.Instances) {
				if r := w.node(name); r != nil && r.pg.role == asReplica && r.pg.upstream == n.name && r.pg.streamable() {
					flushed = append(flushed, uint64(len(r.pg.wal)))
				}
			}
			slices.SortFunc(flushed, func(a, b uint64) int { return int(b) - int(a) })
			upto = quorumPosition(q, flushed, upto)
		}
		i := 0
		for ; i < len(waiting) && uint64(waiting[i]) <= upto; i++ {
			write := n.pg.wal[waiting[i]-1].write
			w.acked[write] = simAck{at: w.now, by: n.name}
		}
		w.pending[n.name] = waiting[i:]
		if i > 0 {
			by = append(by, n.name)
			w.ackedAt = append(w.ackedAt, w.now)
			if holder := w.holderOfRecord(); holder != n.name {
				problem("%s acknowledged a write while the Lease's holder of record is %q", n.name, holder)
			}
		}
	}
	if len(by) > 1 {
		problem("two instances acknowledged writes in one step: %v", by)
	}
	if len(by) == 0 {
		return ""
	}
	return by[0]
}

// settle records how far each member's WAL goes while writes are
// acknowledged, and for two steps after the last (replication's lag).
func (w *simWorld) settle() {
	if len(w.ackedAt) == 0 || w.now.Sub(w.ackedAt[len(w.ackedAt)-1]) > 2*simStep {
		return
	}
	for _, n := range w.nodes {
		n.settled = len(n.pg.wal)
	}
	w.settledAt = w.now
}

func (w *simWorld) holderOfRecord() string {
	if len(w.takes) == 0 {
		return ""
	}
	return w.takes[len(w.takes)-1].holder
}

// holds tells whether write is in n's WAL.
func (n *simNode) holds(write int) bool {
	return slices.ContainsFunc(n.pg.wal, func(e simEntry) bool { return e.write == write })
}

// checkFinal: every acknowledged write is in the final primary's
// history, unless (asynchronous) no healthy member held it at a failover.
func (w *simWorld) checkFinal(cfg simConfig, problem func(string, ...any)) {
	holder := w.node(holderOf(w.lease))
	if holder == nil || holder.pg.role != asPrimary {
		problem("no primary at the end (Lease holder %q)", holderOf(w.lease))
		return
	}
	for _, write := range slices.Sorted(maps.Keys(w.acked)) {
		ack := w.acked[write]
		if holder.holds(write) {
			continue
		}
		if cfg.quorum.Required {
			problem("acknowledged write %d (by %s at %.3fs) is not in the final primary %s's history", write, ack.by, ack.at.Sub(simEpoch).Seconds(), holder.name)
			continue
		}
		// Asynchronous: lost only if, at the failover that dropped it, a
		// member healthy through the election held it.
		for _, take := range w.takes {
			if !take.at.After(ack.at) || take.holder == ack.by || take.holder == "" {
				continue
			}
			for _, name := range slices.Sorted(maps.Keys(take.healthy)) {
				if name != ack.by && name != take.holder && slices.Contains(take.healthy[name], simEntry{write}) {
					problem("acknowledged write %d (by %s at %.3fs) lost: %s held it, healthy, when %s took the Lease at %.3fs",
						write, ack.by, ack.at.Sub(simEpoch).Seconds(), name, take.holder, take.at.Sub(simEpoch).Seconds())
					return
				}
			}
			break
		}
	}
}

// longestGap is the longest time between two acknowledgements from from
// to until.
func (w *simWorld) longestGap(from, until time.Time) time.Duration {
	longest, last := time.Duration(0), from
	for _, t := range w.ackedAt {
		if t.Before(from) || t.After(until) {
			continue
		}
		longest, last = max(longest, t.Sub(last)), t
	}
	if w.now.Before(until) {
		until = w.now
	}
	return max(longest, until.Sub(last))
}

// simFailoverBound is the longest a lost primary may take to be replaced
// by one that acknowledges writes: the Lease (L, from the last renewal the
// replicas saw), a turn to see it expired, the election's patience for a
// ready peer (two turns), and the promotion's turn: L + 3L/5. The
// simulator reads the Lease once a turn; the instance manager also wakes
// at the expiry (awaitTurn), so it is faster by up to a turn.
func simFailoverBound(lease time.Duration) time.Duration { return lease + 3*lease/5 }

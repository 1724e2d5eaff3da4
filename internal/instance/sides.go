package instance

import (
	"context"
	"time"
)

// The manager is also the loop's side concerns (seams.go): what a turn
// observes and does besides the HA loop.

func (m *manager) isDesignated() bool  { return m.pg.designated }
func (m *manager) mayInitialise() bool { return !time.Now().Before(m.pg.restoreRetryAt) }

// observed completes the situation: a stranded replica, a replica
// MyDatabase asked to follow its source, its promotion token; and stops a
// fence bridge (bridge.go) whose quorum is no longer the Lease's.
func (m *manager) observed(ctx context.Context, s *situation, obs serverState) {
	s.stranded = m.pg.strandedNow(ctx, *s, obs)
	s.demote = m.c.replicaDB() && s.lease.follow
	s.tokenReached = m.pg.tokenReached(s.lease, obs)
	if m.pg.bridge != nil && m.pg.bridge.Quorum != s.lease.quorum {
		m.pg.bridge.stop("the quorum changed")
	}
}

// acted keeps passwords, declared objects, slots and the certificate once
// the loop has acted.
func (m *manager) acted(ctx context.Context, a action, s situation, _ serverState) {
	m.passwords.keepPasswords(ctx, s.ready && (a == wait || a == renew || a == follow))
	// wait is also a ready replica's turn: only the primary's server takes
	// the declaration (a replica that found something to do would try to
	// write, and fail, read-only).
	m.declared.offer(declaredWork{primary: s.ready && m.pg.writable() && (a == wait || a == renew), annotation: s.lease.declared})
	if s.ready && (a == wait || a == renew) {
		m.slots.keepSlots(ctx, s.lease.quorum)
	}
	m.pg.keepCertificate()
}

func (m *manager) standby() bool { return m.c.standby() }

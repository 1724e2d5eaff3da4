package instance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
)

// The changes of role that the loop (manager.go, act) carries out: taking
// the Lease, standing for election, promoting, following a primary.

// take takes the Lease and opens the fence. timeline is the newest this
// instance runs on or, before a promotion, the one the promotion will
// pick (nextTimeline): written into the Lease before the promotion, it is
// reserved, so that no one promoted after this instance, even while its
// promotion still runs, picks the same number.
func (m *manager) take(ctx context.Context, timeline int64) error {
	start, err := m.leases.take(ctx, timeline)
	if err != nil {
		return err
	}
	m.renewed = start
	m.fence.extend(start, m.t.deadline)
	return nil
}

// stand publishes this instance's candidacy in the election of the
// expired Lease's version, and takes the Lease and promotes if elect says
// it has won.
func (m *manager) stand(ctx context.Context, s situation, obs serverState) (*contract.Candidacy, error) {
	if !s.ready {
		return nil, nil
	}
	term := s.lease.version
	if m.standing.term != term {
		m.standing.term, m.standing.since = term, time.Now()
	}
	me := &contract.Candidacy{Term: term, LSN: contract.FormatLSN(obs.lsn), Timeline: obs.timeline}
	// Stand publicly before looking at the others: two candidates never
	// both see only themselves.
	m.report(ctx, me, &obs)
	peers, err := m.kube.peers(ctx)
	if err != nil {
		return me, err
	}
	patient := time.Since(m.standing.since) < 2*m.t.tick
	if won, why := elect(m.c.PodName, position{obs.timeline, obs.lsn}, term, peers, s.lease.holder, patient, s.lease.quorum.ElectorsFor(m.c.PodName)); !won {
		m.logOnce(why)
		return me, nil
	}
	m.log("elected in term %s at %s", term, me.LSN)
	// Not while a promise to the last holder holds (failsafe.go); no
	// promise is given while the take runs.
	if !m.failsafe.beginTake() {
		return me, nil
	}
	err = m.take(ctx, nextTimeline(obs.timeline, s.lease.timeline))
	m.failsafe.endTake(err == nil)
	if err != nil {
		return me, err
	}
	if m.followsSource(s.lease) {
		return nil, m.runDesignated(ctx)
	}
	if err := m.reserveTimelines(obs.timeline, s.lease.timeline); err != nil {
		return nil, err
	}
	return nil, m.promote(ctx)
}

// reserveTimelines makes the next promotion pick a timeline above newest,
// the newest any primary reported in the Lease: PostgreSQL takes the first
// number after its own for which it finds no history file, so an empty
// one (comments only, which PostgreSQL reads as no entries) stands in for
// each number another instance used. Without it, an instance promoted
// after a primary that died before its timeline reached anyone would pick
// that primary's number, and the two histories could not be told apart.
func (m *manager) reserveTimelines(mine, newest int64) error {
	for tli := mine + 1; tli <= newest; tli++ {
		path := fmt.Sprintf("%s/pg_wal/%08X.history", m.c.PGData, tli)
		if _, err := os.Stat(path); err == nil {
			continue
		}
		if err := os.WriteFile(path, []byte("# timeline used by another instance; reserved by the instance manager\n"), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// holdWhile runs f, renewing the Lease every tick meanwhile (the loop,
// which renews it otherwise, waits for f). A renewal lost to another
// instance stops the renewals; f still runs to its end.
func (m *manager) holdWhile(ctx context.Context, f func() error) error {
	done := make(chan struct{})
	var renewed time.Time
	var wg sync.WaitGroup
	wg.Go(func() {
		ticker := time.NewTicker(m.t.tick)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ticker.C:
			}
			start, err := m.leases.renew(ctx, m.lastSeen.timeline)
			if errors.Is(err, errLostRace) || errors.Is(err, errNotHolder) {
				m.log("renewing the Lease while it waits for a promotion or a rejoin: %v", err)
				return
			}
			if err == nil {
				renewed = start
				m.fence.extend(start, m.t.deadline)
			}
		}
	})
	err := f()
	close(done)
	wg.Wait()
	if renewed.After(m.renewed) {
		m.renewed = renewed
	}
	return err
}

// nextTimeline is the timeline a promotion of data on timeline mine picks
// once reserveTimelines reserved every number up to newest.
func nextTimeline(mine, newest int64) int64 { return max(mine, newest) + 1 }

// promote makes the running replica the primary. It holds the Lease while
// the server promotes: pg_promote waits for the whole replay, and a
// backlog or a slow checkpoint longer than the Lease would otherwise let
// the others elect, and promote, a second primary in a new term.
func (m *manager) promote(ctx context.Context) error {
	m.log("promoting")
	if err := m.holdWhile(ctx, func() error { return m.promoteServer(ctx) }); err != nil {
		return err
	}
	m.role, m.following, m.designated = asPrimary, "", false
	m.startFence()
	m.log("promoted")
	if err := m.afterPromotion(ctx); err != nil {
		return err
	}
	// Record the new timeline in the Lease at once (reserveTimelines).
	if o, err := m.observe(ctx); err == nil {
		if start, err := m.leases.renew(ctx, o.timeline); err == nil {
			m.renewed = start
			m.fence.extend(start, m.t.deadline)
		}
	}
	// The report that follows says primary: only once the fence's standby
	// streams, without which no commit is confirmed, so that a switchover
	// is reported done when the new primary takes writes.
	if !m.fence.awaitStreaming(ctx, m.t.lease) {
		m.log("the fence's standby does not stream yet: commits wait for it")
	}
	return nil
}

// follow restarts the server as a replica of holder: cloned when there is
// no data or its replay stalls without a primary (errReplayStalled),
// rewound otherwise.
func (m *manager) follow(ctx context.Context, holder string, ready bool) error {
	if m.role != stopped && !ready {
		return nil // still starting: its position is not known yet
	}
	r, err := m.kube.report(ctx, holder)
	if err != nil {
		return err
	}
	if r == nil || r.Address == "" || r.Role != databasev1alpha1.RolePrimary {
		return nil // it has not reported as primary yet
	}
	stalled := false
	if m.c.initialised() {
		// A running replica's last answer is not where its data stands: it
		// goes on receiving what the old primary writes until that one
		// stops, and a primary being fenced writes on (never acknowledged)
		// past the point the new primary forked from. Only the stopped
		// data tells whether it must be rewound.
		m.stop()
		seen, err := m.dataPosition(ctx)
		switch {
		case errors.Is(err, errReplayStalled):
			// Where this data ends cannot be known without a primary, and
			// the primary holds every acknowledged commit: a copy of it
			// replaces the data, once complete.
			control, cerr := m.controlData(ctx)
			if cerr != nil {
				return cerr
			}
			seen, stalled = serverState{systemID: control["Database system identifier"]}, true
			m.log("%v: cloning the primary again", err)
		case err != nil:
			return err
		}
		m.lastSeen = seen
	}
	if m.c.initialised() && r.SystemID != "" && m.lastSeen.systemID != "" && r.SystemID != m.lastSeen.systemID {
		// Data of another database (a volume kept from an earlier
		// MyDatabase of the same name, say): never rewound or cloned over.
		return fmt.Errorf("this data directory belongs to database system %s, the primary %s runs %s: "+
			"not replacing it; move the volume away to let this instance clone the primary", m.lastSeen.systemID, holder, r.SystemID)
	}
	if !m.c.initialised() || stalled {
		err = m.cloneReplica(ctx, r.Address)
	} else {
		// A former primary, and even a replica, can hold WAL the new
		// primary lacks: what a fenced primary wrote (never acknowledged)
		// after the new one forked its timeline.
		h, derr := m.diverged(ctx, r.Address, m.lastSeen)
		if derr != nil {
			return derr
		}
		switch h {
		case forked:
			var conninfo string
			if conninfo, err = m.replicationConninfo(ctx, r.Address); err == nil {
				err = m.rewind(ctx, conninfo, "the primary at "+r.Address, func() error { return m.cloneReplica(ctx, r.Address) })
			}
		case foreign:
			m.log("timeline %d here has another history than the primary's: cloning it again", m.lastSeen.timeline)
			err = m.cloneReplica(ctx, r.Address)
		}
	}
	if err != nil {
		return err
	}
	if err := m.start(ctx, asReplica, r.Address); err != nil {
		return err
	}
	m.following = holder
	return nil
}

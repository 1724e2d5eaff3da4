package instance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"example.com/myoperator/internal/contract"
)

// The changes of role that the loop (manager.go, act) carries out: taking
// the Lease, standing for election, promoting, following a primary.

// take takes the Lease and opens the fence. timeline is the newest this
// instance runs on or, before a promotion, the one the promotion will
// pick (nextTimeline): written into the Lease before the promotion, it is
// reserved, so that no one promoted after this instance, even while its
// promotion still runs, picks the same number.
func (h *ha) take(ctx context.Context, timeline int64) error {
	if h.leases.lease != nil {
		// The quorum's instances; keepHold adds those that stream.
		h.leases.failsafeSet = h.failsafeSet(h.leases.view(), nil)
	}
	start, err := h.leases.take(ctx, timeline)
	if err != nil {
		return err
	}
	h.renewed = start
	h.fence.extend(start, h.t.deadline)
	return nil
}

// stand publishes this instance's candidacy in the election of the
// expired Lease's version, and takes the Lease and promotes if elect says
// it has won.
func (h *ha) stand(ctx context.Context, s situation, obs serverState) (*contract.Candidacy, error) {
	if !s.ready {
		return nil, nil
	}
	term := s.lease.version
	if h.standing.term != term {
		h.standing.term, h.standing.since = term, h.now()
	}
	me := &contract.Candidacy{Term: term, LSN: contract.FormatLSN(obs.lsn), Timeline: obs.timeline, Promised: h.failsafe.promised()}
	// Stand publicly before looking at the others: two candidates never
	// both see only themselves.
	h.sides.report(ctx, me, &obs)
	peers, err := h.api.peers(ctx)
	if err != nil {
		return me, err
	}
	patient := h.since(h.standing.since) < 2*h.t.tick
	if won, why := elect(h.c.PodName, position{obs.timeline, obs.lsn}, term, peers, s.lease.holder, patient, s.lease.quorum.ElectorsFor(h.c.PodName)); !won {
		h.logOnce(why)
		h.endStaleTerm(ctx, term)
		return me, nil
	}
	h.log("elected in term %s at %s", term, me.LSN)
	// Not while a promise to the last holder holds (failsafe.go); no
	// promise is given while the take runs.
	if !h.failsafe.beginTake() {
		return me, nil
	}
	err = h.take(ctx, nextTimeline(obs.timeline, s.lease.timeline))
	h.failsafe.endTake(err == nil, err != nil && !errors.Is(err, errLostRace))
	if err != nil {
		return me, err
	}
	if h.sides.followsSource(s.lease) {
		return nil, h.sides.runDesignated(ctx)
	}
	if err := h.db.reserveTimelines(obs.timeline, s.lease.timeline); err != nil {
		return nil, err
	}
	return nil, h.promote(ctx)
}

// endStaleTerm starts a new election when no one has taken the Lease in
// the term this instance has stood in for a Lease duration. A winner takes
// within a few turns, so the candidate every other one defers to may have
// died after it stood: its candidacy stays in its pod's report, and would
// win every comparison of that term for ever (the simulator's node-lost
// seed 2810: a fenced primary, the most advanced, stood and was lost
// before its take). In the new term only the live stand again; the dead
// one's candidacy is of an old term, and patience waits for it two turns
// at most. A live candidate stands again at its next turn, as at the start
// of any election, where the others wait two turns for a ready peer; one
// that a promise holds back still wins once the promise lapses. One that
// cannot read the Lease for those two turns is passed over, as it would
// be in any new term.
func (h *ha) endStaleTerm(ctx context.Context, term string) {
	if h.since(h.standing.since) < h.leases.duration() {
		return
	}
	if err := h.leases.newTerm(ctx, term); err != nil {
		if !errors.Is(err, errLostRace) {
			h.logOnce(fmt.Errorf("ending the election of term %s: %w", term, err))
		}
		return
	}
	h.log("no one took the Lease in term %s within %s: a new election, in term %s", term, h.leases.duration(), h.leases.lease.ResourceVersion)
}

// holdWhile runs f, renewing the Lease every tick meanwhile (the loop,
// which renews it otherwise, waits for f). A renewal lost to another
// instance stops the renewals; f still runs to its end.
func (h *ha) holdWhile(ctx context.Context, f func() error) error {
	done := make(chan struct{})
	var renewed time.Time
	var wg sync.WaitGroup
	wg.Go(func() {
		ticker := time.NewTicker(h.t.tick)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ticker.C:
			}
			start, err := h.leases.renew(ctx, h.lastSeen.timeline)
			if errors.Is(err, errLostRace) || errors.Is(err, errNotHolder) {
				h.log("renewing the Lease while it waits for a promotion or a rejoin: %v", err)
				return
			}
			if err == nil {
				renewed = start
				h.fence.extend(start, h.t.deadline)
			}
		}
	})
	err := f()
	close(done)
	wg.Wait()
	if renewed.After(h.renewed) {
		h.renewed = renewed
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
func (h *ha) promote(ctx context.Context) error {
	h.log("promoting")
	if err := h.holdWhile(ctx, func() error { return h.db.promoteServer(ctx) }); err != nil {
		return err
	}
	if err := h.db.promoted(ctx); err != nil {
		return err
	}
	// Record the new timeline in the Lease at once (reserveTimelines).
	if o, err := h.db.observe(ctx); err == nil {
		if start, err := h.leases.renew(ctx, o.timeline); err == nil {
			h.renewed = start
			h.fence.extend(start, h.t.deadline)
		}
	}
	// The report that follows says primary: only once the fence's standby
	// streams, without which no commit is confirmed, so that a switchover
	// is reported done when the new primary takes writes.
	if !h.fence.awaitStreaming(ctx, h.t.lease) {
		h.log("the fence's standby does not stream yet: commits wait for it")
	}
	return nil
}

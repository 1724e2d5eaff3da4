package instance

import (
	"context"
	"slices"
	"time"

	"example.com/myoperator/internal/contract"
)

// ha is the HA loop of one instance: observe, fence, decide, act. decide
// makes every choice (decide.go); act only carries it out. Everything
// outside the loop's own state goes through the seams (seams.go), so the
// simulator runs this very code against models of the world.
type ha struct {
	c   Config
	t   timing
	now clock
	log Logger

	api   apiServer
	net   promiseNet
	db    database
	sides sideConcerns

	leases *leases
	fence  *fence
	// failsafe is this instance's promises to a primary that cannot reach
	// the API server (failsafe.go); failsafeSince is when this primary
	// last began to hold the Lease on its members' promises (zero while
	// it renews), and peers their failsafe addresses, read every
	// peersEvery while the API server answers.
	failsafe      *failsafe
	failsafeSince time.Time
	peers         map[string]string
	peersReadAt   time.Time
	// streamingSeen is who streamed from this primary when last asked
	// (streamingAt), for the failsafe set each renewal writes.
	streamingSeen map[string]string
	streamingAt   time.Time

	lastSeen serverState // the server's last answer, kept after it stops
	renewed  time.Time   // start of the last successful renewal or take
	standing struct {
		term  string
		since time.Time
	}
	logged string // the last message of logOnce
}

func newHA(c Config, log Logger, now clock, api apiServer, net promiseNet, db database, sides sideConcerns) *ha {
	t := newTiming(c.LeaseDuration)
	h := &ha{c: c, t: t, now: now, log: log, api: api, net: net, db: db, sides: sides,
		leases: newLeases(api, c.PodName, t, now), fence: newFence(now), failsafe: newFailsafe(c.PodName, now)}
	h.leases.members = c.members
	return h
}

func (h *ha) since(t time.Time) time.Duration { return h.now().Sub(t) }

// turn observes, decides and acts once.
func (h *ha) turn(ctx context.Context) {
	role := h.db.runningAs()
	s := situation{
		me:         h.c.PodName,
		bootstrap:  h.c.PodName == h.c.BootstrapPod,
		hasData:    h.db.hasData(),
		running:    role,
		following:  h.db.streamsFrom(),
		fenceOpen:  h.fence.open(),
		designated: h.sides.isDesignated(),
		lapsed:     h.since(h.renewed) >= h.t.lease,
	}
	var obs serverState
	if role != stopped {
		o, err := h.db.observe(ctx)
		obs, s.ready = o, err == nil && o.primary == h.db.writable()
		if s.ready {
			h.lastSeen, s.lsn = o, o.lsn
		}
	}
	// A primary's renewal is its reading of the Lease; the others read it.
	if role != asPrimary {
		lease, err := h.leases.observe(ctx)
		if err != nil {
			h.log("reading the Lease: %v", err)
		}
		s.lease, s.leaseRead = lease, err == nil
		s.handoffOverdue = h.since(h.leases.seenAt) >= h.t.lease/2
		if s.leaseRead {
			h.failsafe.observe(lease.holder)
		}
		s.promised = h.failsafe.promised()
		s.outsider = !h.askedBy(s.lease)
	} else {
		h.failsafe.observe(h.c.PodName)
		if h.leases.lease != nil {
			s.lease = h.leases.view()
		}
	}
	h.sides.observed(ctx, &s, obs)
	h.fence.setQuorum(s.lease.quorum)
	if s.lease.quorumErr != nil {
		h.logOnce(s.lease.quorumErr)
	}
	a := decide(s)
	if a != wait && a != renew {
		h.log("%s (lease holder %q, expired %t, server %v, ready %t)", a, s.lease.holder, s.lease.expired, role, s.ready)
	}
	candidate, err := h.act(ctx, a, s, obs)
	if err != nil && ctx.Err() == nil {
		h.log("%s: %v", a, err)
	}
	h.sides.acted(ctx, a, s, obs)
	// What the server said at the start of the turn still holds unless the
	// action changed the server.
	var seen *serverState
	if s.ready && (a == wait || a == renew) {
		seen = &obs
	}
	h.sides.report(ctx, candidate, seen)
}

// act carries out an action. It returns the candidacy to report when it
// stood for election.
func (h *ha) act(ctx context.Context, a action, s situation, obs serverState) (*contract.Candidacy, error) {
	switch a {
	case initialise:
		if !h.sides.mayInitialise() {
			return nil, nil // a failed restore, reported; tried again later
		}
		if err := h.db.initialise(ctx); err != nil {
			return nil, err
		}
		if err := h.take(ctx, h.lastSeen.timeline); err != nil {
			return nil, err
		}
		return nil, h.db.start(ctx, asPrimary, "")
	case runPrimary:
		return nil, h.runPrimary(ctx, s, obs)
	case renew:
		return nil, h.keepHold(ctx, s, obs.timeline)
	case handOver:
		stopped, err := h.db.handOver(ctx, s.lease.switchoverTo)
		if stopped {
			return nil, err
		}
		h.logOnce(err)
		return h.act(ctx, renew, s, obs)
	case release:
		h.log("the WAL here ends before %s, where the Lease's last holder stopped: giving the Lease up", contract.FormatLSN(s.lease.handoff))
		return nil, h.leases.release(ctx)
	case fenceOff:
		h.fence.close()
		h.db.stop()
	case follow:
		return nil, h.db.follow(ctx, s.lease.holder, s.ready)
	case runReplica:
		return nil, h.db.start(ctx, asReplica, "")
	case stand:
		return h.stand(ctx, s, obs)
	case reclone:
		return nil, h.db.reclone(ctx)
	case promote:
		return nil, h.sides.promoteReplica(ctx, obs.timeline, s.lease.timeline)
	case demote:
		h.log("demoting: this MyDatabase follows its source from now on")
		h.db.stop()
		if err := h.sides.demoteData(ctx); err != nil {
			return nil, err
		}
		return nil, h.sides.runDesignated(ctx)
	}
	return nil, nil
}

// runPrimary makes this holder of the Lease the primary: its data
// demoted first if it must follow a source, a ready replica promoted, a
// stopped server started.
func (h *ha) runPrimary(ctx context.Context, s situation, obs serverState) error {
	role := h.db.runningAs()
	switch {
	case h.sides.followsSource(s.lease), s.demote && role == stopped:
		// A primary's data asked to follow (a demotion that did not
		// finish) is demoted before it starts, never run writable.
		if err := h.take(ctx, max(obs.timeline, h.lastSeen.timeline)); err != nil {
			return err
		}
		if !h.sides.standby() {
			if err := h.sides.demoteData(ctx); err != nil {
				return err
			}
		}
		return h.sides.runDesignated(ctx)
	case role == asReplica && s.ready:
		// Handed the Lease (or holding it across a restart): renew it
		// on this instance's own clock first, which opens the fence,
		// without which the promotion's own commits would wait.
		if err := h.take(ctx, nextTimeline(obs.timeline, s.lease.timeline)); err != nil {
			return err
		}
		if err := h.db.reserveTimelines(obs.timeline, s.lease.timeline); err != nil {
			return err
		}
		return h.promote(ctx)
	case role == stopped && h.sides.standby():
		// Never run a standby's data as a primary without promoting
		// it: only a new timeline keeps it apart from WAL another
		// primary wrote on the old one.
		return h.db.start(ctx, asReplica, "")
	case role == stopped:
		// Still the holder after a restart of the container within
		// the Lease: renew before starting, so that the fence is
		// open from the start, and the primary resumes in place
		// rather than being fenced at its first turn and replaced.
		// The renewal is conditional on the version read, so it fails
		// if another instance took the Lease meanwhile.
		if err := h.take(ctx, h.lastSeen.timeline); err != nil {
			return err
		}
		return h.db.start(ctx, asPrimary, "")
	}
	return nil
}

// askedBy tells whether the holder of l asks this instance for failsafe
// promises: it is in the set the holder wrote, or, with none written (a
// holder from before failsafe sets), among the instances of the quorum,
// which such a holder asked. Without either, no.
func (h *ha) askedBy(l leaseView) bool {
	switch {
	case l.holder == "" || l.holder == h.c.PodName:
		return true
	case l.failsafeSet != nil:
		return slices.Contains(l.failsafeSet, h.c.PodName)
	}
	for i := range l.quorum.Instances {
		if h.c.instanceName(int(i)) == h.c.PodName {
			return true
		}
	}
	return false
}

// logOnce logs err unless it is the one it logged last: for what a turn
// finds again and again while it waits.
func (h *ha) logOnce(err error) {
	if err == nil {
		h.logged = ""
		return
	}
	if err.Error() != h.logged {
		h.log("%v", err)
	}
	h.logged = err.Error()
}

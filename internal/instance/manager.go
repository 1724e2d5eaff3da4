package instance

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
)

// manager runs one instance: the HA loop, the server, the fence.
type manager struct {
	c Config
	// hba is pg_hba.conf as the server last read it (keepCertificate).
	hba    []byte
	digest string // this binary's, its version (reexec.go)
	log    Logger
	t      timing
	procs  *reaper
	kube   *kube
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
	// backups is the object store's base backups at the last look
	// (watchBackups), for the report.
	backups atomic.Pointer[contract.Backups]
	// backupRun is the last base backup asked of this instance
	// (backuprun.go), for the report.
	backupRun atomic.Pointer[contract.BackupRun]
	// restore is the restore of this instance's data while it runs or
	// after it failed (restore.go), for the report; restoreRetryAt is when
	// a failed one is tried again.
	restore        atomic.Pointer[contract.Restore]
	restoreRetryAt time.Time

	server   *server
	lastSeen serverState // the server's last answer, kept after it stops
	role     serverRole
	// designated: the server runs as a replica MyDatabase's designated
	// primary (role asPrimary, but a standby: replica.go); waiting, what
	// its promotion waits for, for the report.
	designated bool
	waiting    atomic.Pointer[string]
	following  string
	upstream   string    // the address a replica streams from, "" for none
	stranded   stranding // a replica that neither streams nor replays (stranded.go)
	renewed    time.Time // start of the last successful renewal or take
	stopFence  context.CancelFunc
	bridge     *bridge // the previous process's fence bridge, until stopped (bridge.go)

	pw       *passwords      // password rotation (rotate.go)
	declared *declaredKeeper // declared roles and databases (declared.go)
	slots    slotKeeping     // the replication slots (slots.go)
	// pausing is the switchover the poolers were last asked to pause
	// for, when, and how many pods of each pooler (by ID) had paused at
	// the last look (switchover.go).
	pausing struct {
		target string
		since  time.Time
		paused map[string]int
	}
	sent     contract.Report // the last report published
	logged   string          // the last message of logOnce
	standing struct {
		term  string
		since time.Time
	}
}

func newManager(c Config, log Logger) (*manager, error) {
	t := newTiming(c.LeaseDuration)
	k, err := newKube(c, t.tick)
	if err != nil {
		return nil, err
	}
	return &manager{c: c, log: log, t: t, procs: startReaper(), kube: k, leases: newLeases(k, t), fence: newFence(),
		failsafe: newFailsafe(c.PodName), declared: newDeclaredKeeper()}, nil
}

// loop runs a turn every tick, and at once when the server exits, the
// Lease changes hands, or the Lease another instance holds expires. It
// returns when ctx ends, or after the first turn that leaves nothing to cut
// short once a replacement is asked (reexec.go).
func (m *manager) loop(ctx context.Context, reload, replace <-chan struct{}) {
	ticker := time.NewTicker(m.t.tick)
	defer ticker.Stop()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	seen := make(chan *coordinationv1.Lease, 1)
	go m.kube.watchLease(watchCtx, seen)
	go m.keepDeclared(watchCtx)
	replacing := false
	for ctx.Err() == nil {
		m.turn(ctx)
		if replacing {
			why := m.reexecDeferred()
			if why == "" {
				return
			}
			m.logOnce(fmt.Errorf("replacing the instance manager after this: %s", why))
		}
		if m.awaitTurn(ctx, ticker, reload, replace, seen) {
			replacing = true
		}
	}
}

// awaitTurn returns when the next turn is due, true when it is because a
// replacement was asked. A renewal that the Lease
// watch brings is recorded without a turn: it dates the renewal to when
// it happened rather than to the next tick's read, and the expiry timer
// then fires L after it.
func (m *manager) awaitTurn(ctx context.Context, ticker *time.Ticker, reload, replace <-chan struct{}, seen <-chan *coordinationv1.Lease) bool {
	for {
		var exited <-chan syscall.WaitStatus
		if m.server != nil && !m.server.done {
			exited = m.server.exited
		}
		expiry := time.NewTimer(time.Hour)
		if d, ok := m.leases.expiresIn(); ok && m.role != asPrimary {
			expiry.Reset(d)
		} else {
			expiry.Stop()
		}
		select {
		case <-ctx.Done():
		case <-ticker.C:
		case <-expiry.C:
		case lease := <-seen:
			// The holder knows its Lease from its own renewals; the others
			// record every version. A turn only when the holder changed.
			changed := holderOf(lease) != m.c.PodName
			if m.role != asPrimary {
				changed = m.leases.record(lease)
			}
			if !changed {
				expiry.Stop()
				continue
			}
		case <-replace:
			m.log("asked to re-execute as %s", nextFile)
			expiry.Stop()
			return true
		case <-reload:
			if m.server != nil && !m.server.exitedNow() {
				_ = m.server.cmd.Process.Signal(syscall.SIGHUP)
			}
		case ws := <-exited:
			m.server.status, m.server.done = ws, true
			_ = m.server.cmd.Process.Release()
			m.log("postgres exited with code %d", exitCode(ws))
			crashLoop := time.Since(m.server.started) < restartBackoff
			m.serverGone()
			if crashLoop {
				// Not at once again: wait for the next tick.
				select {
				case <-ctx.Done():
				case <-ticker.C:
				}
			}
		}
		expiry.Stop()
		return false
	}
}

// restartBackoff: a server that exits sooner than this after its start
// is started again only at the next tick, not at once.
const restartBackoff = 10 * time.Second

// turn observes, decides and acts once.
func (m *manager) turn(ctx context.Context) {
	s := situation{
		me:         m.c.PodName,
		bootstrap:  m.c.PodName == m.c.BootstrapPod,
		hasData:    m.c.initialised(),
		running:    m.role,
		following:  m.following,
		fenceOpen:  m.fence.open(),
		designated: m.designated,
		lapsed:     time.Since(m.renewed) >= m.t.lease,
	}
	var obs serverState
	if m.role != stopped {
		o, err := m.observe(ctx)
		obs, s.ready = o, err == nil && o.primary == m.writable()
		if s.ready {
			m.lastSeen, s.lsn = o, o.lsn
		}
	}
	// A primary's renewal is its reading of the Lease; the others read it.
	if m.role != asPrimary {
		lease, err := m.leases.observe(ctx)
		if err != nil {
			m.log("reading the Lease: %v", err)
		}
		s.lease, s.leaseRead = lease, err == nil
		s.handoffOverdue = time.Since(m.leases.seenAt) >= m.t.lease/2
		if s.leaseRead {
			m.failsafe.observe(lease.holder)
		}
		s.promised = m.failsafe.promised()
	} else {
		m.failsafe.observe(m.c.PodName)
		if m.leases.lease != nil {
			s.lease = m.leases.view()
		}
	}
	s.stranded = m.strandedNow(ctx, s, obs)
	s.demote = m.c.replicaDB() && s.lease.follow
	s.tokenReached = m.tokenReached(s.lease, obs)
	if m.bridge != nil && m.bridge.Quorum != s.lease.quorum {
		m.bridge.stop("the quorum changed")
	}
	m.fence.setQuorum(s.lease.quorum)
	if s.lease.quorumErr != nil {
		m.logOnce(s.lease.quorumErr)
	}
	a := decide(s)
	if a != wait && a != renew {
		m.log("%s (lease holder %q, expired %t, server %v, ready %t)", a, s.lease.holder, s.lease.expired, m.role, s.ready)
	}
	candidate, err := m.act(ctx, a, s, obs)
	if err != nil && ctx.Err() == nil {
		m.log("%s: %v", a, err)
	}
	m.keepPasswords(ctx, s.ready && (a == wait || a == renew || a == follow))
	// wait is also a ready replica's turn: only the primary's server takes
	// the declaration (a replica that found something to do would try to
	// write, and fail, read-only).
	m.declared.offer(declaredWork{primary: s.ready && m.writable() && (a == wait || a == renew), annotation: s.lease.declared})
	if s.ready && (a == wait || a == renew) {
		m.keepSlots(ctx, s.lease.quorum)
	}
	m.keepCertificate()
	// What the server said at the start of the turn still holds unless the
	// action changed the server.
	var seen *serverState
	if s.ready && (a == wait || a == renew) {
		seen = &obs
	}
	m.report(ctx, candidate, seen)
}

// act carries out an action. It returns the candidacy to report when it
// stood for election.
func (m *manager) act(ctx context.Context, a action, s situation, obs serverState) (*contract.Candidacy, error) {
	switch a {
	case initialise:
		if time.Now().Before(m.restoreRetryAt) {
			return nil, nil // a failed restore, reported; tried again later
		}
		if err := m.initPrimary(ctx); err != nil {
			return nil, err
		}
		if err := m.take(ctx, m.lastSeen.timeline); err != nil {
			return nil, err
		}
		return nil, m.start(ctx, asPrimary, "")
	case runPrimary:
		switch {
		case m.followsSource(s.lease), s.demote && m.role == stopped:
			// A primary's data asked to follow (a demotion that did not
			// finish) is demoted before it starts, never run writable.
			if err := m.take(ctx, max(obs.timeline, m.lastSeen.timeline)); err != nil {
				return nil, err
			}
			if !m.c.standby() {
				if err := m.demoteData(ctx); err != nil {
					return nil, err
				}
			}
			return nil, m.runDesignated(ctx)
		case m.role == asReplica && s.ready:
			// Handed the Lease (or holding it across a restart): renew it
			// on this instance's own clock first, which opens the fence,
			// without which the promotion's own commits would wait.
			if err := m.take(ctx, nextTimeline(obs.timeline, s.lease.timeline)); err != nil {
				return nil, err
			}
			if err := m.reserveTimelines(obs.timeline, s.lease.timeline); err != nil {
				return nil, err
			}
			return nil, m.promote(ctx)
		case m.role == stopped && m.c.standby():
			// Never run a standby's data as a primary without promoting
			// it: only a new timeline keeps it apart from WAL another
			// primary wrote on the old one.
			return nil, m.start(ctx, asReplica, "")
		case m.role == stopped:
			// Still the holder after a restart of the container within
			// the Lease: renew before starting, so that the fence is
			// open from the start, and the primary resumes in place
			// rather than being fenced at its first turn and replaced.
			// The renewal is conditional on the version read, so it fails
			// if another instance took the Lease meanwhile.
			if err := m.take(ctx, m.lastSeen.timeline); err != nil {
				return nil, err
			}
			return nil, m.start(ctx, asPrimary, "")
		}
	case renew:
		return nil, m.keepHold(ctx, s, obs.timeline)
	case handOver:
		stopped, err := m.handOver(ctx, s.lease.switchoverTo)
		if stopped {
			return nil, err
		}
		m.logOnce(err)
		return m.act(ctx, renew, s, obs)
	case release:
		m.log("the WAL here ends before %s, where the Lease's last holder stopped: giving the Lease up", contract.FormatLSN(s.lease.handoff))
		return nil, m.leases.release(ctx)
	case fenceOff:
		m.fence.close()
		m.stop()
	case follow:
		return nil, m.follow(ctx, s.lease.holder, s.ready)
	case runReplica:
		return nil, m.start(ctx, asReplica, "")
	case stand:
		return m.stand(ctx, s, obs)
	case reclone:
		return nil, m.reclone(ctx)
	case promote:
		return nil, m.promoteReplica(ctx, obs.timeline, s.lease.timeline)
	case demote:
		m.log("demoting: this MyDatabase follows its source from now on")
		m.stop()
		if err := m.demoteData(ctx); err != nil {
			return nil, err
		}
		return nil, m.runDesignated(ctx)
	}
	return nil, nil
}

// report publishes this instance's report when it changed materially, or
// its WAL positions changed and MinInterval has passed; the storage is
// measured then. seen is what the running server answered, nil to ask it.
func (m *manager) report(ctx context.Context, candidate *contract.Candidacy, seen *serverState) {
	r := contract.Report{Manager: m.digest, Address: m.c.AdvertiseAddress, Failsafe: m.c.failsafeAddress(), Candidate: candidate, Time: time.Now().UTC().Truncate(time.Millisecond),
		Passwords: m.acceptedPasswords(), Backup: m.backupRun.Load(), Restore: m.restore.Load()}
	r.Declared, r.DeclaredOf = m.declared.outcome(m.writable())
	if m.role != stopped && seen == nil {
		if o, err := m.observe(ctx); err == nil && o.primary == m.writable() {
			seen = &o
		}
	}
	if o := seen; o != nil && m.role != stopped {
		r.Ready, r.SystemID, r.Timeline = true, o.systemID, o.timeline
		r.LSN = contract.FormatLSN(o.lsn)
		r.Role = databasev1alpha1.RoleReplica
		switch {
		case o.primary:
			r.Role, r.Archive = databasev1alpha1.RolePrimary, o.archive
		case m.designated:
			r.Role, r.Replayed, r.Replica = databasev1alpha1.RolePrimary, contract.FormatLSN(o.replayed), m.replicaState(ctx)
		default:
			r.Replayed = contract.FormatLSN(o.replayed)
		}
	}
	if !m.sent.Material(r) && (r.LSN == m.sent.LSN || r.Time.Sub(m.sent.Time) < contract.MinInterval) {
		return
	}
	r.Storage = m.c.storage()
	if err := m.kube.publish(ctx, r); err != nil {
		m.log("reporting: %v", err)
		return
	}
	m.sent = r
}

// logOnce logs err unless it is the one it logged last: for what a turn
// finds again and again while it waits.
func (m *manager) logOnce(err error) {
	if err == nil {
		m.logged = ""
		return
	}
	if err.Error() != m.logged {
		m.log("%v", err)
	}
	m.logged = err.Error()
}

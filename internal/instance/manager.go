package instance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
)

// manager runs one instance: the HA loop, the server, the fence.
type manager struct {
	c      Config
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

	server    *server
	lastSeen  observation // the server's last answer, kept after it stops
	role      serverRole
	following string
	renewed   time.Time // start of the last successful renewal or take
	stopFence context.CancelFunc

	pw       *passwords      // password rotation (rotate.go)
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
		failsafe: newFailsafe(c.PodName)}, nil
}

// loop runs a turn every tick, and at once when the server exits, the
// Lease changes hands, or the Lease another instance holds expires.
func (m *manager) loop(ctx context.Context, reload <-chan struct{}) {
	ticker := time.NewTicker(m.t.tick)
	defer ticker.Stop()
	seen := make(chan *coordinationv1.Lease, 1)
	go m.kube.watchLease(ctx, seen)
	for ctx.Err() == nil {
		m.turn(ctx)
		m.awaitTurn(ctx, ticker, reload, seen)
	}
}

// awaitTurn returns when the next turn is due. A renewal that the Lease
// watch brings is recorded without a turn: it dates the renewal to when
// it happened rather than to the next tick's read, and the expiry timer
// then fires L after it.
func (m *manager) awaitTurn(ctx context.Context, ticker *time.Ticker, reload <-chan struct{}, seen <-chan *coordinationv1.Lease) {
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
		return
	}
}

// restartBackoff: a server that exits sooner than this after its start
// is started again only at the next tick, not at once.
const restartBackoff = 10 * time.Second

// turn observes, decides and acts once.
func (m *manager) turn(ctx context.Context) {
	s := situation{
		me:        m.c.PodName,
		bootstrap: m.c.PodName == m.c.BootstrapPod,
		hasData:   m.c.initialised(),
		running:   m.role,
		following: m.following,
		fenceOpen: m.fence.open(),
		lapsed:    time.Since(m.renewed) >= m.t.lease,
	}
	var obs observation
	if m.role != stopped {
		o, err := m.observe(ctx)
		obs, s.ready = o, err == nil && o.primary == (m.role == asPrimary)
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
	m.keepCertificate()
	// What the server said at the start of the turn still holds unless the
	// action changed the server.
	var seen *observation
	if s.ready && (a == wait || a == renew) {
		seen = &obs
	}
	m.report(ctx, candidate, seen)
}

// act carries out an action. It returns the candidacy to report when it
// stood for election.
func (m *manager) act(ctx context.Context, a action, s situation, obs observation) (*contract.Candidacy, error) {
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
	}
	return nil, nil
}

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
func (m *manager) stand(ctx context.Context, s situation, obs observation) (*contract.Candidacy, error) {
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
	if won, why := elect(m.c.PodName, position{obs.timeline, obs.lsn}, term, peers, s.lease.holder, patient, s.lease.quorum.Electors()); !won {
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
				m.log("renewing the Lease while promoting: %v", err)
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
	m.role, m.following = asPrimary, ""
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
// no data, rewound otherwise.
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
	if m.c.initialised() {
		// A running replica's last answer is not where its data stands: it
		// goes on receiving what the old primary writes until that one
		// stops, and a primary being fenced writes on (never acknowledged)
		// past the point the new primary forked from. Only the stopped
		// data tells whether it must be rewound.
		m.stop()
		seen, err := m.dataPosition(ctx)
		if err != nil {
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
	if !m.c.initialised() {
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
			err = m.rewind(ctx, r.Address)
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

// start starts the server in a role; a replica streams from address.
func (m *manager) start(ctx context.Context, role serverRole, address string) error {
	if _, err := m.c.copyTLS(); err != nil {
		return err
	}
	args := m.c.serverArgs()
	if role == asReplica {
		var err error
		if args, err = m.standbyArgs(ctx, address); err != nil {
			return err
		}
	} else {
		if err := os.Remove(m.c.PGData + "/standby.signal"); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	srv, err := m.startServer(args)
	if err != nil {
		return err
	}
	m.server, m.role, m.following = srv, role, ""
	m.log("postgres started as %v", role)
	if role == asPrimary {
		m.startFence()
	}
	return nil
}

// stop stops the server, if it runs: a fast shutdown, immediate if that
// takes longer than a Lease. The fence's standby goes first: it confirms
// nothing more, and a fast shutdown would wait for its confirmation.
func (m *manager) stop() {
	m.closeFence()
	if m.server != nil {
		m.server.stop(m.t.lease)
	}
	m.serverGone()
}

func (m *manager) serverGone() {
	m.server, m.role, m.following = nil, stopped, ""
	m.closeFence()
}

func (m *manager) closeFence() {
	if m.stopFence != nil {
		m.stopFence()
		m.stopFence = nil
	}
}

// startFence runs the fence's standby while the server is the primary.
func (m *manager) startFence() {
	if m.stopFence != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.stopFence = cancel
	go func() {
		for ctx.Err() == nil {
			if err := witness(ctx, m.c, m.fence); err != nil && ctx.Err() == nil {
				time.Sleep(witnessWake)
			}
		}
	}()
}

// report publishes this instance's report when it changed materially, or
// its WAL positions changed and MinInterval has passed. seen is what the
// running server answered, nil to ask it.
func (m *manager) report(ctx context.Context, candidate *contract.Candidacy, seen *observation) {
	r := contract.Report{Address: m.c.AdvertiseAddress, Failsafe: m.c.failsafeAddress(), Candidate: candidate, Time: time.Now().UTC().Truncate(time.Millisecond),
		Passwords: m.acceptedPasswords(), Backup: m.backupRun.Load(), Restore: m.restore.Load()}
	if m.role != stopped && seen == nil {
		if o, err := m.observe(ctx); err == nil && o.primary == (m.role == asPrimary) {
			seen = &o
		}
	}
	if o := seen; o != nil && m.role != stopped {
		r.Ready, r.SystemID, r.Timeline = true, o.systemID, o.timeline
		r.LSN = contract.FormatLSN(o.lsn)
		r.Role = databasev1alpha1.RoleReplica
		if o.primary {
			r.Role, r.Archive = databasev1alpha1.RolePrimary, o.archive
		} else {
			r.Replayed = contract.FormatLSN(o.replayed)
		}
	}
	if !m.sent.Material(r) && (r.LSN == m.sent.LSN || r.Time.Sub(m.sent.Time) < contract.MinInterval) {
		return
	}
	if err := m.kube.publish(ctx, r); err != nil {
		m.log("reporting: %v", err)
		return
	}
	m.sent = r
}

// shutdown stops the server and, when it was the primary, gives up the
// Lease: only once the server no longer accepts writes. It returns the
// exit code.
func (m *manager) shutdown() int {
	wasPrimary := m.role == asPrimary
	m.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*m.t.tick)
	defer cancel()
	if wasPrimary {
		if err := m.leases.release(ctx); err != nil {
			m.log("giving up the Lease: %v", err)
		} else {
			m.log("gave up the Lease")
		}
	}
	m.report(ctx, nil, nil)
	return 0
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

func (r serverRole) String() string { return [...]string{"stopped", "primary", "replica"}[r] }

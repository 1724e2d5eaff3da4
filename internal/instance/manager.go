package instance

import (
	"context"
	"fmt"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
)

// manager runs one instance: the HA loop (ha, which it embeds), the
// local server (pg, the loop's database) and everything else the loop
// leaves to it (its side concerns, seams.go), each a type of its own that
// reaches the server through pg.
type manager struct {
	*ha
	pg     *pgServer // the local server, the loop's database
	digest string    // this binary's, its version (reexec.go)
	procs  *reaper
	kube   *kube

	backups   *backupKeeper     // the object store's base backups (archive.go, backuprun.go)
	passwords *passwordRotation // password rotation (rotate.go)
	declared  *declaredKeeper   // declared roles and databases (declared.go)
	slots     *slotKeeping      // the replication slots (slots.go)
	sent      contract.Report   // the last report published
}

func newManager(c Config, log Logger) (*manager, error) {
	t := newTiming(c.LeaseDuration)
	k, err := newKube(c, t.tick)
	if err != nil {
		return nil, err
	}
	procs := startReaper()
	pg := &pgServer{c: c, t: t, log: log, procs: procs, kube: k}
	declared := newDeclaredKeeper()
	declared.c, declared.t, declared.log, declared.kube, declared.pg = c, t, log, k, pg
	m := &manager{pg: pg, procs: procs, kube: k, declared: declared,
		slots:     &slotKeeping{c: c, t: t, log: log, pg: pg},
		passwords: &passwordRotation{c: c, t: t, log: log, kube: k, pg: pg},
		backups:   &backupKeeper{c: c, log: log, procs: procs, kube: k, pg: pg}}
	m.ha = newHA(c, log, time.Now, k, httpPromises{c}, pg, m)
	// The server shares what newHA made (the fence, the Lease, the last
	// answer, logOnce's memory) and publishes a restore's progress.
	pg.logOnce, pg.fence, pg.leases, pg.lastSeen = m.logOnce, m.fence, m.leases, &m.lastSeen
	pg.report, pg.backups = m.report, &m.backups.backups
	return m, nil
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
	go m.declared.keepDeclared(watchCtx)
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
		if m.pg.server != nil && !m.pg.server.done {
			exited = m.pg.server.exited
		}
		expiry := time.NewTimer(time.Hour)
		if d, ok := m.leases.expiresIn(); ok && m.pg.role != asPrimary {
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
			if m.pg.role != asPrimary {
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
			if m.pg.server != nil && !m.pg.server.exitedNow() {
				_ = m.pg.server.cmd.Process.Signal(syscall.SIGHUP)
			}
		case ws := <-exited:
			m.pg.server.status, m.pg.server.done = ws, true
			_ = m.pg.server.cmd.Process.Release()
			m.log("postgres exited with code %d", exitCode(ws))
			crashLoop := time.Since(m.pg.server.started) < restartBackoff
			m.pg.serverGone()
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

// report publishes this instance's report when it changed materially, or
// its WAL positions changed and MinInterval has passed; the storage is
// measured then. seen is what the running server answered, nil to ask it.
func (m *manager) report(ctx context.Context, candidate *contract.Candidacy, seen *serverState) {
	r := contract.Report{Manager: m.digest, Address: m.c.AdvertiseAddress, Failsafe: m.c.failsafeAddress(), Candidate: candidate, Time: time.Now().UTC().Truncate(time.Millisecond),
		Passwords: m.passwords.acceptedPasswords(), Backup: m.backups.backupRun.Load(), Restore: m.pg.restore.Load(),
		Certificates: m.pg.certificates.Load()}
	r.Declared, r.DeclaredOf = m.declared.outcome(m.pg.writable())
	if m.pg.role != stopped && seen == nil {
		if o, err := m.pg.observe(ctx); err == nil && o.primary == m.pg.writable() {
			seen = &o
		}
	}
	if o := seen; o != nil && m.pg.role != stopped {
		r.Ready, r.SystemID, r.Timeline = true, o.systemID, o.timeline
		r.LSN = contract.FormatLSN(o.lsn)
		r.Role = databasev1alpha1.RoleReplica
		switch {
		case o.primary:
			r.Role, r.Archive = databasev1alpha1.RolePrimary, o.archive
		case m.pg.designated:
			r.Role, r.Replayed, r.Replica = databasev1alpha1.RolePrimary, contract.FormatLSN(o.replayed), m.pg.replicaState(ctx)
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

// shutdown stops the server and, when it was the primary, gives up the
// Lease: only once the server no longer accepts writes. It returns the
// exit code.
func (m *manager) shutdown() int {
	wasPrimary := m.pg.role == asPrimary
	if wasPrimary {
		m.pg.checkpointFirst(context.Background())
		// The poolers hold their clients' transactions until the next
		// primary is elected; a tick at most is spent waiting for them.
		if waiting, err := m.pg.pausePoolers(context.Background(), ""); err != nil {
			m.log("stopping without asking the poolers to pause: %v", err)
		} else if waiting > 0 {
			m.log("stopping before %d poolers paused", waiting)
		}
	}
	m.pg.stop()
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

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

// manager runs one instance: the HA loop (ha, which it embeds), and the
// server and everything else the loop leaves to it (seams.go).
type manager struct {
	*ha
	// hba is pg_hba.conf as the server last read it (keepCertificate).
	hba    []byte
	digest string // this binary's, its version (reexec.go)
	procs  *reaper
	kube   *kube
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

	server *server
	role   serverRole
	// designated: the server runs as a replica MyDatabase's designated
	// primary (role asPrimary, but a standby: replica.go); waiting, what
	// its promotion waits for, for the report.
	designated bool
	waiting    atomic.Pointer[string]
	following  string
	upstream   string    // the address a replica streams from, "" for none
	stranded   stranding // a replica that neither streams nor replays (stranded.go)
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
	sent contract.Report // the last report published
}

func newManager(c Config, log Logger) (*manager, error) {
	k, err := newKube(c, newTiming(c.LeaseDuration).tick)
	if err != nil {
		return nil, err
	}
	m := &manager{procs: startReaper(), kube: k, declared: newDeclaredKeeper()}
	m.ha = newHA(c, log, time.Now, k, httpPromises{c}, m, m)
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

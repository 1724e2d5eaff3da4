package instance

import (
	"context"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
)

// The server process as the loop sees it: started in a role, stopped,
// and the fence that goes with a primary.

// start starts the server in a role; a replica streams from address.
func (m *manager) start(ctx context.Context, role serverRole, address string) error {
	if _, err := m.c.copyTLS(); err != nil {
		return err
	}
	if err := m.placeWAL(); err != nil {
		return err
	}
	args := m.c.serverArgs()
	// The data of a replica MyDatabase is a standby's until it is promoted:
	// its holder runs it as the designated primary (replica.go).
	designated := role == asPrimary && m.c.replicaDB() && m.c.standby()
	switch {
	case role == asReplica:
		var err error
		if args, err = m.standbyArgs(ctx, address); err != nil {
			return err
		}
	case designated:
		var err error
		if args, err = m.designatedArgs(ctx); err != nil {
			return err
		}
	default:
		if err := os.Remove(m.c.PGData + "/standby.signal"); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	srv, err := m.startServer(args)
	if err != nil {
		return err
	}
	m.server, m.role, m.following, m.upstream, m.designated = srv, role, "", address, designated
	if designated {
		m.log("postgres started as the designated primary: a standby of the source's archive")
		return nil // no commit to confirm: no fence
	}
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
	m.server, m.role, m.following, m.upstream, m.designated = nil, stopped, "", "", false
	m.closeFence()
}

func (m *manager) closeFence() {
	if m.stopFence != nil {
		m.stopFence()
		m.stopFence = nil
	}
	m.bridge.stopIfAny("the fence is closed")
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

// checkpointFirst runs a CHECKPOINT on the primary before a planned stop
// (a deleted pod, a switchover), for a tick at most: the shutdown
// checkpoint, during which no write is taken, then has little left to
// write. Writes go on meanwhile: the Lease was renewed within the last
// tick, so the fence stays open. A CHECKPOINT that runs past the tick is
// not waited for; the checkpointer goes on with it, and the shutdown
// finishes it.
func (m *manager) checkpointFirst(ctx context.Context) {
	start := time.Now()
	err := m.withServerFor(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "CHECKPOINT")
		return err
	})
	if err != nil {
		m.log("checkpoint before stopping: %v after %s; the shutdown finishes it", err, time.Since(start).Round(time.Millisecond))
	}
}

// shutdown stops the server and, when it was the primary, gives up the
// Lease: only once the server no longer accepts writes. It returns the
// exit code.
func (m *manager) shutdown() int {
	wasPrimary := m.role == asPrimary
	if wasPrimary {
		m.checkpointFirst(context.Background())
		// The poolers hold their clients' transactions until the next
		// primary is elected; a tick at most is spent waiting for them.
		if waiting, err := m.pausePoolers(context.Background(), ""); err != nil {
			m.log("stopping without asking the poolers to pause: %v", err)
		} else if waiting > 0 {
			m.log("stopping before %d poolers paused", waiting)
		}
	}
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

func (r serverRole) String() string { return [...]string{"stopped", "primary", "replica"}[r] }

// The manager is the loop's database (seams.go): the methods below are
// the ones that have no other home.

func (m *manager) runningAs() serverRole { return m.role }
func (m *manager) streamsFrom() string   { return m.following }
func (m *manager) hasData() bool         { return m.c.initialised() }

func (m *manager) initialise(ctx context.Context) error { return m.initPrimary(ctx) }

// promoted records the promotion pg_promote made: the server is the
// primary, its fence's standby runs; then afterPromotion.
func (m *manager) promoted(ctx context.Context) error {
	m.role, m.following, m.designated = asPrimary, "", false
	m.startFence()
	m.log("promoted")
	return m.afterPromotion(ctx)
}

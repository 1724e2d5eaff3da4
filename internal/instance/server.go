package instance

import (
	"context"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"example.com/myoperator/internal/contract"
)

// The server process as the loop sees it: started in a role, stopped,
// and the fence that goes with a primary.

// pgServer is the local PostgreSQL server: the loop's database
// (seams.go). It runs the process, knows its role and what it follows,
// makes and replaces its data (bootstrap.go, follow.go, restore.go),
// keeps its certificates (tls.go) and hands it over (switchover.go). The
// manager's side concerns reach the server through it.
type pgServer struct {
	c       Config
	t       timing
	log     Logger
	logOnce func(error) // the loop's (ha.logOnce)
	procs   *reaper
	kube    *kube
	// fence and leases are the loop's: the fence's standby confirms for
	// the one, a switchover hands the other over.
	fence  *fence
	leases *leases
	// certificates is the digest of the certificate copies the server
	// was last started or reloaded with (tls.go), for the report.
	certificates atomicString
	// lastSeen is the loop's (ha.lastSeen): where the data stood at the
	// server's last answer, which follow and rejoinSource set from the
	// stopped data.
	lastSeen *serverState
	// report publishes the instance's report (the manager's), for a
	// restore's progress; backups is the manager's last look at the
	// object store (watchBackups), which a primary's observation carries.
	report  func(ctx context.Context, candidate *contract.Candidacy, seen *serverState)
	backups *atomic.Pointer[contract.Backups]

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
	// hba is pg_hba.conf as the server last read it (keepCertificate).
	hba []byte
	// restore is the restore of this instance's data while it runs or
	// after it failed (restore.go), for the report; restoreRetryAt is when
	// a failed one is tried again.
	restore        atomic.Pointer[contract.Restore]
	restoreRetryAt time.Time
	// pausing is the switchover the poolers were last asked to pause
	// for, when, and how many pods of each pooler (by ID) had paused at
	// the last look (switchover.go).
	pausing struct {
		target string
		since  time.Time
		paused map[string]int
	}
}

// start starts the server in a role; a replica streams from address.
func (pg *pgServer) start(ctx context.Context, role serverRole, address string) error {
	if _, err := pg.c.copyTLS(); err != nil {
		return err
	}
	pg.certificates.Store(pg.c.certificatesDigest())
	if err := pg.placeWAL(); err != nil {
		return err
	}
	args := pg.c.serverArgs()
	// The data of a replica MyDatabase is a standby's until it is promoted:
	// its holder runs it as the designated primary (replica.go).
	designated := role == asPrimary && pg.c.replicaDB() && pg.c.standby()
	switch {
	case role == asReplica:
		var err error
		if args, err = pg.standbyArgs(ctx, address); err != nil {
			return err
		}
	case designated:
		var err error
		if args, err = pg.designatedArgs(ctx); err != nil {
			return err
		}
	default:
		if err := os.Remove(pg.c.PGData + "/standby.signal"); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	srv, err := pg.startServer(args)
	if err != nil {
		return err
	}
	pg.server, pg.role, pg.following, pg.upstream, pg.designated = srv, role, "", address, designated
	if designated {
		pg.log("postgres started as the designated primary: a standby of the source's archive")
		return nil // no commit to confirm: no fence
	}
	pg.log("postgres started as %v", role)
	if role == asPrimary {
		pg.startFence()
	}
	return nil
}

// stop stops the server, if it runs: a fast shutdown, immediate if that
// takes longer than a Lease. The fence's standby goes first: it confirms
// nothing more, and a fast shutdown would wait for its confirmation.
func (pg *pgServer) stop() {
	pg.closeFence()
	if pg.server != nil {
		pg.server.stop(pg.t.lease)
	}
	pg.serverGone()
}

func (pg *pgServer) serverGone() {
	pg.server, pg.role, pg.following, pg.upstream, pg.designated = nil, stopped, "", "", false
	pg.closeFence()
}

func (pg *pgServer) closeFence() {
	if pg.stopFence != nil {
		pg.stopFence()
		pg.stopFence = nil
	}
	pg.bridge.stopIfAny("the fence is closed")
}

// startFence runs the fence's standby while the server is the primary.
func (pg *pgServer) startFence() {
	if pg.stopFence != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	pg.stopFence = cancel
	go func() {
		for ctx.Err() == nil {
			if err := witness(ctx, pg.c, pg.fence); err != nil && ctx.Err() == nil {
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
func (pg *pgServer) checkpointFirst(ctx context.Context) {
	start := time.Now()
	err := pg.withServerFor(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "CHECKPOINT")
		return err
	})
	if err != nil {
		pg.log("checkpoint before stopping: %v after %s; the shutdown finishes it", err, time.Since(start).Round(time.Millisecond))
	}
}

func (r serverRole) String() string { return [...]string{"stopped", "primary", "replica"}[r] }

// The pgServer is the loop's database (seams.go): the methods below are
// the ones that have no other home.

func (pg *pgServer) runningAs() serverRole { return pg.role }
func (pg *pgServer) streamsFrom() string   { return pg.following }
func (pg *pgServer) hasData() bool         { return pg.c.initialised() }

func (pg *pgServer) initialise(ctx context.Context) error { return pg.initPrimary(ctx) }

// promoted records the promotion pg_promote made: the server is the
// primary, its fence's standby runs; then afterPromotion.
func (pg *pgServer) promoted(ctx context.Context) error {
	pg.role, pg.following, pg.designated = asPrimary, "", false
	pg.startFence()
	pg.log("promoted")
	return pg.afterPromotion(ctx)
}

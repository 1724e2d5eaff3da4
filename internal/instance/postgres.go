package instance

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"example.com/myoperator/internal/contract"
)

// server is a running postgres, this process's child.
type server struct {
	started time.Time
	cmd     *exec.Cmd
	exited  <-chan syscall.WaitStatus
	status  syscall.WaitStatus
	done    bool
}

// startServer starts postgres with args. Pdeathsig takes it down if this
// process dies: in a pod the kernel does so anyway (the instance manager is
// PID 1); outside one (test harnesses) a server must not outlive the
// instance manager that fences it. It fires when the thread that started
// the server ends, not the process: the reaper starts every child on the
// main thread, which lives as long as the process and on across a
// re-execution (reexec.go), so the server survives that.
func (pg *pgServer) startServer(args []string) (*server, error) {
	cmd := exec.Command("postgres", args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	// The environment holds no password: ConfigFromEnv removed them.
	cmd.Env = os.Environ()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	exited, err := pg.procs.start(cmd)
	if err != nil {
		return nil, err
	}
	return &server{cmd: cmd, exited: exited, started: time.Now()}, nil
}

// wait reports whether the server has exited, without blocking.
func (s *server) exitedNow() bool {
	if s.done {
		return true
	}
	select {
	case s.status = <-s.exited:
		s.done = true
		_ = s.cmd.Process.Release()
	default:
	}
	return s.done
}

// stop asks for a fast shutdown (SIGINT) and waits for the exit; past
// patience it asks for an immediate one (SIGQUIT). A fast shutdown waits
// for each standby to confirm the last WAL, up to wal_sender_timeout (60
// s) for one that is unreachable: a server being fenced must not wait
// that long.
func (s *server) stop(patience time.Duration) {
	if s.exitedNow() {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case s.status = <-s.exited:
	case <-time.After(patience):
		_ = s.cmd.Process.Signal(syscall.SIGQUIT)
		s.status = <-s.exited
	}
	s.done = true
	_ = s.cmd.Process.Release()
}

// serverArgs are the arguments of the database server. Every instance
// names the fence as its synchronous standby; a standby ignores it until
// it is promoted.
func (c Config) serverArgs() []string {
	return append([]string{"-D", c.PGData,
		"-c", "config_file=" + c.ConfigDir + "/" + contract.PostgresConfFile, "-c", "hba_file=" + c.ConfigDir + "/" + contract.HBAConfFile,
		"-c", "unix_socket_directories=" + c.SocketDir, "-c", "port=" + c.Port,
		"-c", "synchronous_standby_names=" + fenceName}, slices.Concat(c.tlsArgs(), c.archiveArgs(), c.walBoundArgs())...)
}

// standbyArgs make the server a standby of the primary at address, or of
// none (it replays what it has) when address is empty.
func (pg *pgServer) standbyArgs(ctx context.Context, address string) ([]string, error) {
	if err := os.WriteFile(pg.c.PGData+"/standby.signal", nil, 0o600); err != nil {
		return nil, err
	}
	args := pg.c.serverArgs()
	extra, err := pg.keepPrimaryMinimums(ctx, args)
	if err != nil {
		return nil, err
	}
	args = append(args, extra...)
	if address == "" {
		return append(args, "-c", "primary_conninfo="), nil
	}
	conninfo, err := pg.replicationConninfo(ctx, address)
	if err != nil {
		return nil, err
	}
	primary := fmt.Sprintf("%s application_name=%s", conninfo, pg.c.PodName)
	if slots := pg.c.failoverSlotArgs(); slots != nil {
		// The slot sync worker connects to a database.
		primary += " dbname=postgres"
		args = append(args, slots...)
	}
	args = append(args, "-c", "primary_conninfo="+primary)
	if err := pg.ownSlot(ctx, conninfo); err != nil {
		// Streaming without a slot, as before slots: the primary keeps
		// wal_keep_size for it, and makes the slot (keepSlots) for the
		// next start.
		pg.log("streaming without a replication slot: %v", err)
	} else {
		args = append(args, "-c", "primary_slot_name="+slotName(pg.c.PodName))
	}
	return append(args, pg.c.fetchArgs()...), nil
}

// serverState is what the server says of itself (observe).
type serverState struct {
	primary  bool
	systemID string
	timeline int64
	lsn      uint64 // primary: current; replica: received, or replayed if more
	replayed uint64
	// streaming: a replica's WAL receiver streams from its primary.
	streaming bool
	archive   *contract.Archive // primary, with spec.backup
}

// observe asks the local server, through its socket, as the postgres OS
// user (peer authentication, no password).
func (pg *pgServer) observe(ctx context.Context) (serverState, error) {
	return pg.observeAt(ctx, pg.c.SocketDir)
}

// observeAt asks the local server whose socket is in dir.
func (pg *pgServer) observeAt(ctx context.Context, dir string) (serverState, error) {
	ctx, cancel := context.WithTimeout(ctx, pg.t.tick)
	defer cancel()
	conn, err := pg.connectAt(ctx, dir)
	if err != nil {
		return serverState{}, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var o serverState
	var recovery bool
	var walfile, current, received, replayed *string
	var tli int64
	var receivedTLI *int64
	err = conn.QueryRow(ctx, `SELECT pg_is_in_recovery(), (SELECT system_identifier::text FROM pg_control_system()),
		CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_walfile_name(pg_current_wal_lsn()) END,
		CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_current_wal_lsn()::text END,
		pg_last_wal_receive_lsn()::text, pg_last_wal_replay_lsn()::text,
		(SELECT received_tli::bigint FROM pg_stat_wal_receiver), (SELECT timeline_id::bigint FROM pg_control_checkpoint()),
		EXISTS (SELECT FROM pg_stat_wal_receiver WHERE status = 'streaming')`).
		Scan(&recovery, &o.systemID, &walfile, &current, &received, &replayed, &receivedTLI, &tli, &o.streaming)
	if err != nil {
		return o, err
	}
	o.primary, o.timeline = !recovery, tli
	if o.primary {
		// A promoted server writes its new timeline into pg_control only
		// at its next checkpoint; the WAL file name has it at once.
		if walfile != nil && len(*walfile) >= 8 {
			if t, err := strconv.ParseInt((*walfile)[:8], 16, 64); err == nil {
				o.timeline = t
			}
		}
		if o.lsn, err = contract.LSN(deref(current)); err != nil {
			return o, err
		}
		o.archive, err = pg.observeArchive(ctx, conn)
		return o, err
	}
	if o.replayed, err = contract.LSN(deref(replayed)); err != nil {
		return o, err
	}
	if o.lsn, err = contract.LSN(deref(received)); err != nil {
		return o, err
	}
	o.lsn = max(o.lsn, o.replayed)
	if receivedTLI != nil {
		o.timeline = *receivedTLI
	} else {
		o.timeline = replicaTimeline(pg.c.PGData+"/pg_wal", o.lsn, tli)
	}
	return o, nil
}

// replicaTimeline is the timeline of the WAL a replica holds up to lsn
// when no WAL receiver says it (none runs: its primary is lost, or the
// server was started only to be asked). pg_control's checkpoint timeline
// lags: a replica that followed a new primary keeps the timeline of its
// last restartpoint until the next one, and would stand as behind a
// member left on the older timeline with more WAL past the fork, which an
// election must never prefer. The newest history file in pg_wal (not one
// reserveTimelines wrote, which lists no timeline) names the timeline the
// replica followed, and its switch points say which timeline the WAL up
// to lsn is on: one that ends at or past lsn holds all of it.
func replicaTimeline(walDir string, lsn uint64, checkpoint int64) int64 {
	names, _ := filepath.Glob(walDir + "/*.history") // eight hex digits: in the order of their numbers
	for i := len(names) - 1; i >= 0; i-- {
		followed, err := strconv.ParseInt(strings.TrimSuffix(filepath.Base(names[i]), ".history"), 16, 64)
		if err != nil {
			continue
		}
		content, err := os.ReadFile(names[i])
		if err != nil {
			continue
		}
		listed := false
		for line := range strings.Lines(string(content)) {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			parent, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				continue
			}
			end, err := contract.LSN(f[1])
			if err != nil {
				continue
			}
			if lsn <= end {
				return max(parent, checkpoint)
			}
			listed = true
		}
		if listed {
			return max(followed, checkpoint)
		}
	}
	return checkpoint
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// connect opens a connection to the local server as postgres. Its own
// commits (the grants after a promotion) are acknowledged locally: they
// must not wait for the fence or the synchronous quorum, which may need
// the replicas that only follow a new primary once it has reported.
func (pg *pgServer) connect(ctx context.Context) (*pgx.Conn, error) {
	return pg.connectAt(ctx, pg.c.SocketDir)
}

func (pg *pgServer) connectAt(ctx context.Context, dir string) (*pgx.Conn, error) {
	return pg.connectTo(ctx, dir, "postgres")
}

// connectTo connects to the database dbname of the server whose socket
// is in dir. dbname is quoted: the poolers' lookup goes to every database
// the server has, whatever its name.
func (pg *pgServer) connectTo(ctx context.Context, dir, dbname string) (*pgx.Conn, error) {
	return pgx.Connect(ctx, fmt.Sprintf("host=%s port=%s user=postgres dbname=%s application_name=mydatabase_instance synchronous_commit=local",
		dir, pg.c.Port, conninfoValue(dbname)))
}

// withServer runs f on a connection to the local server, within a
// minute.
func (pg *pgServer) withServer(ctx context.Context, f func(context.Context, *pgx.Conn) error) error {
	return pg.withDatabase(ctx, "postgres", f)
}

// withDatabase runs f on a connection to the database dbname of the local
// server, within a minute.
func (pg *pgServer) withDatabase(ctx context.Context, dbname string, f func(context.Context, *pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := pg.connectTo(ctx, pg.c.SocketDir, dbname)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	return f(ctx, conn)
}

// promoteServer ends recovery: the server becomes a primary on a new
// timeline.
func (pg *pgServer) promoteServer(ctx context.Context) error {
	return pg.withServer(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		var done bool
		if err := conn.QueryRow(ctx, "SELECT pg_promote(true, 60)").Scan(&done); err != nil {
			return err
		}
		if !done {
			return fmt.Errorf("pg_promote did not finish within 60 s")
		}
		return nil
	})
}

// afterPromotion checkpoints the new primary, so that its pg_control
// holds its new timeline, which pg_rewind reads: before that checkpoint,
// pg_rewind finds the source on the old timeline and rewinds nothing. Then
// it runs rewindGrants, and removes the replication role's password if it
// still has one (data made before replicas authenticated by certificate,
// replication.go).
func (pg *pgServer) afterPromotion(ctx context.Context) error {
	return pg.withServer(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, rewindGrants); err != nil {
			return err
		}
		var hasPassword bool
		if err := conn.QueryRow(ctx, "SELECT rolpassword IS NOT NULL FROM pg_catalog.pg_authid WHERE rolname = $1", contract.ReplicationRole).Scan(&hasPassword); err != nil {
			return err
		}
		if hasPassword {
			if _, err := conn.Exec(ctx, "ALTER ROLE "+contract.ReplicationRole+" PASSWORD NULL"); err != nil {
				return err
			}
			pg.log("removed the password of role %s: replicas authenticate by certificate", contract.ReplicationRole)
		}
		return nil
	})
}

package instance

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"

	"example.com/myoperator/internal/contract"
)

// bootstrapSQL creates the application's role and database and the
// replication role, which has no password (replication.go). psql reads
// the values from its environment with \getenv, so that no password is
// ever on a command line.
const bootstrapSQL = `\getenv app_user POSTGRES_USER
\getenv app_password POSTGRES_PASSWORD
\getenv app_db POSTGRES_DB
CREATE ROLE :"app_user" LOGIN PASSWORD :'app_password';
CREATE DATABASE :"app_db" OWNER :"app_user";
REVOKE ALL ON DATABASE :"app_db" FROM PUBLIC;
CREATE ROLE replicator WITH REPLICATION LOGIN;
`

// rewindGrants let the replication role run pg_rewind against a primary
// (the functions PostgreSQL's documentation of pg_rewind lists), so that
// pg_rewind needs no superuser. GRANT is idempotent: a new primary runs
// them too, for data made before they were part of bootstrapSQL.
const rewindGrants = `GRANT EXECUTE ON FUNCTION pg_catalog.pg_ls_dir(text, boolean, boolean) TO replicator;
GRANT EXECUTE ON FUNCTION pg_catalog.pg_stat_file(text, boolean) TO replicator;
GRANT EXECUTE ON FUNCTION pg_catalog.pg_read_binary_file(text) TO replicator;
GRANT EXECUTE ON FUNCTION pg_catalog.pg_read_binary_file(text, bigint, bigint, boolean) TO replicator;
`

// initialised tells whether PGDATA holds a data directory that may be
// started: not one a pg_rewind left half done (rewindMarker).
func (c Config) initialised() bool {
	fi, err := os.Stat(c.PGData + "/PG_VERSION")
	if err != nil || fi.Size() == 0 {
		return false
	}
	_, err = os.Stat(c.rewindMarker())
	return os.IsNotExist(err)
}

// rewindMarker exists while pg_rewind changes PGDATA, and stays when it
// did not finish (the source lost half way, the container killed): such
// data is neither the old history nor the new one, and PostgreSQL may
// well start on it. While it exists the data counts as none: the instance
// never starts a server on it, never stands for election, and clones the
// primary, which removes it.
func (c Config) rewindMarker() string { return c.PGData + ".rewinding" }

// standby tells whether the data directory is a standby's.
func (c Config) standby() bool {
	_, err := os.Stat(c.PGData + "/standby.signal")
	return err == nil
}

// initPrimary makes a new data directory with the roles and database of
// the spec, or restores it from an object store (restore.go), or from a
// replica MyDatabase's source (replica.go). All of it
// happens in a scratch directory, renamed into place at the end.
func (pg *pgServer) initPrimary(ctx context.Context) error {
	c := pg.c
	scratch := c.PGData + ".init"
	pg.log("initialising a new primary in %s", c.PGData)
	if err := os.RemoveAll(scratch); err != nil {
		return err
	}
	switch {
	case c.replicaDB():
		if err := pg.restoreStandby(ctx, scratch); err != nil {
			return err
		}
	case c.Restore != nil:
		if err := pg.restorePrimary(ctx, scratch); err != nil {
			return err
		}
	default:
		if err := pg.initdb(ctx, scratch); err != nil {
			return err
		}
	}
	if err := os.Rename(scratch, c.PGData); err != nil {
		return err
	}
	pg.log("primary initialised")
	return nil
}

// initdb makes a new database with the roles and database of the spec.
func (pg *pgServer) initdb(ctx context.Context, scratch string) error {
	if _, err := pg.procs.run(ctx, nil, "", "initdb", "--pgdata="+scratch, "--username=postgres", "--encoding=UTF8", "--locale=C",
		"--data-checksums", "--auth-local=trust", "--auth-host=scram-sha-256"); err != nil {
		return err
	}
	return pg.bootstrap(ctx, scratch)
}

// bootstrap runs bootstrapSQL on a private server of the scratch data
// directory.
func (pg *pgServer) bootstrap(ctx context.Context, scratch string) error {
	c := pg.c
	env := []string{"POSTGRES_USER=" + c.User, "POSTGRES_DB=" + c.Database, "POSTGRES_PASSWORD=" + c.Password}
	return pg.withPrivateServer(ctx, scratch, nil, fmt.Errorf("the private server on %s exited at start", scratch), env, bootstrapSQL+rewindGrants)
}

// withPrivateServer runs sql (psql, as the superuser, with env) on a
// private server (startPrivate) of the scratch data directory started with
// extra settings, its socket in that directory. exited is the error when
// the server ends before it accepts connections.
func (pg *pgServer) withPrivateServer(ctx context.Context, scratch string, extra []string, exited error, env []string, sql string) error {
	server, err := pg.startPrivate(ctx, append([]string{"-D", scratch}, extra...), scratch, exited, 0)
	if err != nil {
		return err
	}
	defer server.stop(killDelay)
	_, err = pg.procs.run(ctx, env, sql, "psql", "--no-psqlrc", "--quiet", "--set=ON_ERROR_STOP=1",
		"--host="+scratch, "--port="+pg.c.Port, "--username=postgres", "--dbname=postgres")
	return err
}

// startPrivate starts a server with args that no client, replica or probe
// can reach: no TCP listener, and its socket in dir (mode 0700), not in
// the socket directory where the probes would take it for the real server
// and report the pod ready too soon. The server is this process's child,
// not pg_ctl's daemon, so that it is stopped whatever happens, a signal
// included. It returns once the server accepts connections; exited is the
// error when the server ends first. With stall > 0, a server whose
// recovery reads no new WAL file for stall is stopped (errReplayStalled).
// The caller stops it.
func (pg *pgServer) startPrivate(ctx context.Context, args []string, dir string, exited error, stall time.Duration) (*server, error) {
	port := pg.c.Port
	server, err := pg.startServer(append(args, "-c", "listen_addresses=", "-c", "unix_socket_directories="+dir, "-c", "port="+port))
	if err != nil {
		return nil, fmt.Errorf("starting a private server on %s: %w", dir, err)
	}
	recovering, since := "", time.Now()
	for {
		if _, err := pg.procs.run(ctx, nil, "", "pg_isready", "--quiet", "--host="+dir, "--port="+port); err == nil {
			return server, nil
		}
		if stall > 0 {
			if now := recoveringFile(server.cmd.Process.Pid); now != recovering {
				recovering, since = now, time.Now()
			} else if time.Since(since) > stall {
				server.stop(killDelay)
				return nil, fmt.Errorf("%w: no WAL file read for %s since %q", errReplayStalled, stall, recovering)
			}
		}
		select {
		case server.status = <-server.exited:
			server.done = true
			_ = server.cmd.Process.Release()
			return nil, exited
		case <-ctx.Done():
			server.stop(killDelay)
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// errReplayStalled: a standby of no one stopped replaying before its data
// was consistent. It happens when pg_wal holds a segment of a newer
// timeline that the WAL receiver began and never finished (it streams a
// segment from its start, and the primary was lost part way): recovery
// reads the newer timeline's file for that segment, finds its end, and
// waits for WAL that only a primary can send.
var errReplayStalled = errors.New("recovery stalled before the data was consistent")

// replayStall is how long a private standby may read no new WAL file
// before it counts as stalled: a WAL file replays in well under a second.
const replayStall = time.Minute

// recoveringFile is the title of the startup process of the server whose
// postmaster is pid ("postgres: startup recovering <WAL file>"), "" when
// there is none yet.
func recoveringFile(pid int) string {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(pid) {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if title := string(bytes.TrimRight(cmdline, "\x00")); err == nil && strings.Contains(title, "startup") {
			return title
		}
	}
	return ""
}

// dataPosition is where the stopped data directory stands: its system,
// timeline and the WAL it holds. A standby of no one replays what it has
// (crash recovery included, which pg_rewind cannot do for a standby's
// data) on a private server, and answers. Nobody reads from it meanwhile:
// data that a former primary wrote past the new primary's fork must not
// be served, and the pod is not ready until its server follows. A replay
// that stalls ends with errReplayStalled.
func (pg *pgServer) dataPosition(ctx context.Context) (serverState, error) {
	if _, err := pg.c.copyTLS(); err != nil {
		return serverState{}, err
	}
	if err := pg.placeWAL(); err != nil {
		return serverState{}, err
	}
	args, err := pg.standbyArgs(ctx, "")
	if err != nil {
		return serverState{}, err
	}
	dir := pg.c.PGData
	server, err := pg.startPrivate(ctx, args, dir, fmt.Errorf("the data in %s does not start as a standby", dir), replayStall)
	if err != nil {
		return serverState{}, err
	}
	defer server.stop(pg.t.lease)
	return pg.observeAt(ctx, dir)
}

// cloneReplica copies the primary at address with pg_basebackup, as
// replaceData does.
func (pg *pgServer) cloneReplica(ctx context.Context, address string) error {
	conninfo, err := pg.replicationConninfo(ctx, address)
	if err != nil {
		return err
	}
	pg.log("cloning the primary at %s", address)
	if err := pg.replaceData(ctx, func(scratch string) error { return pg.baseBackup(ctx, conninfo, scratch) }); err != nil {
		return err
	}
	pg.log("replica cloned")
	return nil
}

// baseBackup copies the server at conninfo (a replication connection's
// keywords) into dir with pg_basebackup.
func (pg *pgServer) baseBackup(ctx context.Context, conninfo, dir string) error {
	_, err := pg.procs.run(ctx, nil, "", "pg_basebackup", "--pgdata="+dir, "--dbname="+conninfo, "--no-password",
		"--wal-method=stream", "--checkpoint=fast")
	return err
}

// replaceData has fill make new data in a scratch directory, renamed into
// place when complete. Data already there is replaced only then: a copy
// that fails (its source lost half way) leaves it as it was.
func (pg *pgServer) replaceData(ctx context.Context, fill func(scratch string) error) error {
	c := pg.c
	scratch := c.PGData + ".clone"
	if err := os.RemoveAll(scratch); err != nil {
		return err
	}
	if err := fill(scratch); err != nil {
		return err
	}
	old := c.PGData + ".replaced"
	if _, err := os.Stat(c.PGData); err == nil {
		if err := os.RemoveAll(old); err != nil {
			return err
		}
		if err := os.Rename(c.PGData, old); err != nil {
			return err
		}
	}
	if err := os.Rename(scratch, c.PGData); err != nil {
		return err
	}
	if err := os.Remove(c.rewindMarker()); err != nil && !os.IsNotExist(err) {
		return err
	}
	return os.RemoveAll(old)
}

// rewind makes the stopped data directory of a former primary a copy of
// the server at conninfo (a replication connection's keywords; what names
// it in the log) from the point where their timelines diverged (nothing
// when they have not). When pg_rewind cannot (the WAL it needs is gone),
// reclone copies it again: what it held beyond the divergence was never
// replicated, so it is no longer part of the database's history.
func (pg *pgServer) rewind(ctx context.Context, conninfo, what string, reclone func() error) error {
	if err := os.WriteFile(pg.c.rewindMarker(), nil, 0o600); err != nil {
		return err
	}
	_, err := pg.procs.run(ctx, nil, "", "pg_rewind", "--target-pgdata="+pg.c.PGData, "--source-server="+conninfo+" dbname=postgres")
	if err == nil {
		// Its own lines (on stderr, in the log) say what it changed.
		pg.log("rewound to %s", what)
		return os.Remove(pg.c.rewindMarker())
	}
	if ctx.Err() != nil {
		return err
	}
	pg.log("pg_rewind against %s failed (%v): cloning it again; until a clone succeeds this data is never started", what, err)
	return reclone()
}

// history is how a replica's data stands against a primary's timeline
// history.
type history int

const (
	inHistory history = iota // nothing the primary lacks: restart and follow
	forked                   // WAL past the point where the primary's timeline forked: pg_rewind
	foreign                  // a timeline of the same number but another history: clone again
)

// diverged compares data at position seen (its timeline and the WAL it
// has) with the primary at address (against).
func (pg *pgServer) diverged(ctx context.Context, address string, seen serverState) (history, error) {
	conninfo, err := pg.replicationConninfo(ctx, address)
	if err != nil {
		return 0, err
	}
	theirs, content, err := pg.timelineOf(ctx, conninfo)
	if err != nil {
		return 0, err
	}
	return pg.against(theirs, content, seen), nil
}

// timelineOf asks the server at conninfo (a replication connection's
// keywords) for its timeline and that timeline's history file (none for
// timeline 1).
func (pg *pgServer) timelineOf(ctx context.Context, conninfo string) (int64, string, error) {
	conn, err := pg.dialReplication(ctx, conninfo)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	sys, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return 0, "", err
	}
	if sys.Timeline <= 1 {
		return int64(sys.Timeline), "", nil
	}
	h, err := pglogrepl.TimelineHistory(ctx, conn, sys.Timeline)
	if err != nil {
		return 0, "", err
	}
	return int64(sys.Timeline), string(h.Content), nil
}

// against compares data at position seen with a server on timeline
// theirs, whose history file is content. That history says where each
// earlier timeline ended; data past that point on its timeline holds WAL
// the server does not have: what a fenced former primary wrote and never
// had acknowledged. Data on a timeline newer than theirs is past it too.
// Two instances promoted one after the other without hearing of each
// other's timeline can pick the same number: their history files differ,
// and pg_rewind, which compares numbers, would see nothing to do.
func (pg *pgServer) against(theirs int64, content string, seen serverState) history {
	if theirs < seen.timeline {
		return forked
	}
	if theirs == seen.timeline {
		if theirs > 1 {
			mine, err := os.ReadFile(fmt.Sprintf("%s/pg_wal/%08X.history", pg.c.PGData, theirs))
			if err == nil && string(mine) != content {
				return foreign
			}
		}
		return inHistory
	}
	end, found := timelineEnd(content, seen.timeline)
	if !found || seen.lsn > end {
		return forked
	}
	return inHistory
}

// timelineEnd reads where timeline tli ended in a timeline history file
// (lines of "timeline<TAB>switch point<TAB>reason").
func timelineEnd(history string, tli int64) (uint64, bool) {
	for line := range strings.Lines(history) {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != strconv.FormatInt(tli, 10) {
			continue
		}
		end, err := contract.LSN(f[1])
		return end, err == nil
	}
	return 0, false
}

// hotStandbyMinimums are the settings a standby may not run lower than the
// primary whose WAL it replays, by their names in pg_controldata's output.
var hotStandbyMinimums = map[string]string{
	"max_connections setting":      "max_connections",
	"max_worker_processes setting": "max_worker_processes",
	"max_wal_senders setting":      "max_wal_senders",
	"max_prepared_xacts setting":   "max_prepared_transactions",
	"max_locks_per_xact setting":   "max_locks_per_transaction",
}

// keepPrimaryMinimums returns the -c options that raise a standby's
// settings to the primary's. PostgreSQL aborts recovery if a standby runs
// with less; the primary's values, as of the last change replayed, are in
// pg_control. So lowering one (the replicas restart first) or re-creating
// the MyDatabase from an older manifest never leaves a replica failing at
// every start. The standby takes its own value at the first restart after
// the primary has run with it.
func (pg *pgServer) keepPrimaryMinimums(ctx context.Context, args []string) ([]string, error) {
	control, err := pg.controlData(ctx)
	if err != nil {
		return nil, err
	}
	var extra []string
	for _, field := range slices.Sorted(maps.Keys(hotStandbyMinimums)) {
		name := hotStandbyMinimums[field]
		recorded, err := strconv.Atoi(control[field])
		if err != nil {
			return nil, fmt.Errorf("pg_controldata: %s: %w", field, err)
		}
		conf, err := pg.procs.run(ctx, nil, "", "postgres", append(append([]string{}, args...), "-C", name)...)
		if err != nil {
			return nil, err
		}
		configured, err := strconv.Atoi(strings.TrimSpace(conf))
		if err != nil {
			return nil, fmt.Errorf("postgres -C %s: %w", name, err)
		}
		if recorded > configured {
			pg.log("%s: keeping the primary's %d until it runs with the configured %d", name, recorded, configured)
			extra = append(extra, "-c", fmt.Sprintf("%s=%d", name, recorded))
		}
	}
	return extra, nil
}

// controlData is pg_controldata's output: each field's value by its name.
func (pg *pgServer) controlData(ctx context.Context) (map[string]string, error) {
	out, err := pg.procs.run(ctx, []string{"LC_ALL=C"}, "", "pg_controldata", pg.c.PGData)
	if err != nil {
		return nil, err
	}
	fields := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if field, value, ok := strings.Cut(sc.Text(), ":"); ok {
			fields[strings.TrimSpace(field)] = strings.TrimSpace(value)
		}
	}
	return fields, sc.Err()
}

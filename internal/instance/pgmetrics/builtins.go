package pgmetrics

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(Prefix+name, help, labels, nil)
}

// The built-in metrics. Their names and meanings are the README's
// Monitoring table; TestMetrics (test/postgres) checks each on a primary
// and a replica.
var (
	upDesc               = desc("up", "1 when this scrape reached PostgreSQL and every built-in query succeeded; 0 otherwise, with no other metric.")
	versionDesc          = desc("server_version_num", "PostgreSQL's server_version_num (170006 for 17.6).")
	primaryDesc          = desc("is_primary", "1 on the primary (not in recovery), 0 on a replica.")
	timelineDesc         = desc("timeline", "The timeline the server writes (primary) or receives (replica); it grows at each promotion.")
	maxConnectionsDesc   = desc("max_connections", "The max_connections setting.")
	connectionsDesc      = desc("connections", "Client connections by state (pg_stat_activity), the scrape's own excluded.", "state")
	oldestXactDesc       = desc("oldest_transaction_age_seconds", "Age of the oldest open transaction of a client, 0 when none is open.")
	commitsDesc          = desc("xact_commit_total", "Transactions committed in the database (pg_stat_database).", "datname")
	rollbacksDesc        = desc("xact_rollback_total", "Transactions rolled back in the database (pg_stat_database).", "datname")
	deadlocksDesc        = desc("deadlocks_total", "Deadlocks detected in the database (pg_stat_database).", "datname")
	databaseSizeDesc     = desc("database_size_bytes", "Disk space the database uses (pg_database_size).", "datname")
	replicationLagDesc   = desc("replication_lag_bytes", "Primary only: WAL the replica has not replayed yet (pg_stat_replication: current LSN - replay_lsn).", "replica")
	replicationSecsDesc  = desc("replication_lag_seconds", "Primary only: the replica's replay_lag from pg_stat_replication, 0 when it is caught up.", "replica")
	streamingDesc        = desc("replication_streaming", "Primary only: 1 while the replica's walsender is streaming, 0 in another state (catchup, backup).", "replica")
	slotRetainedDesc     = desc("replication_slot_retained_bytes", "Primary only: WAL the physical replication slot holds back (current LSN - restart_lsn); 0 once it is lost (past max_slot_wal_keep_size).", "slot")
	slotActiveDesc       = desc("replication_slot_active", "Primary only: 1 while a replica streams through the physical replication slot.", "slot")
	replayLagBytesDesc   = desc("replica_replay_lag_bytes", "Replica only: WAL received but not replayed yet.")
	replayLagSecsDesc    = desc("replica_replay_lag_seconds", "Replica only: seconds since the last replayed transaction's commit while WAL waits to be replayed, 0 when everything received is replayed.")
	replayPausedDesc     = desc("replica_replay_paused", "Replica only: 1 while replay is paused (pg_wal_replay_pause).")
	archivingDesc        = desc("archiving_enabled", "1 when archive_mode is on (or always).")
	walBytesDesc         = desc("wal_bytes", "What pg_wal holds (pg_ls_waldir): WAL kept for checkpoints, replicas and the archive.")
	archivedDesc         = desc("archiver_archived_total", "WAL files archived (pg_stat_archiver).")
	archiveFailedDesc    = desc("archiver_failed_total", "Failed attempts to archive a WAL file (pg_stat_archiver).")
	lastArchivedDesc     = desc("archiver_last_archive_timestamp_seconds", "When a WAL file was last archived, 0 if never.")
	lastFailedDesc       = desc("archiver_last_failure_timestamp_seconds", "When archiving last failed, 0 if never.")
	lastArchiveAgeDesc   = desc("archiver_last_archive_age_seconds", "Seconds since a WAL file was last archived; absent while none ever was.")
	checkpointsTimedDesc = desc("checkpoints_timed_total", "Scheduled checkpoints (pg_stat_bgwriter before 17, pg_stat_checkpointer from 17).")
	checkpointsReqDesc   = desc("checkpoints_requested_total", "Requested checkpoints, e.g. max_wal_size reached (pg_stat_bgwriter before 17, pg_stat_checkpointer from 17).")
	checkpointWriteDesc  = desc("checkpoint_write_seconds_total", "Time checkpoints spent writing files.")
	checkpointSyncDesc   = desc("checkpoint_sync_seconds_total", "Time checkpoints spent syncing files.")
	checkpointBufsDesc   = desc("checkpoint_buffers_written_total", "Buffers written by checkpoints.")
	bgwriterCleanDesc    = desc("bgwriter_buffers_clean_total", "Buffers written by the background writer (pg_stat_bgwriter).")
	bgwriterMaxDesc      = desc("bgwriter_maxwritten_clean_total", "Times the background writer stopped a round for writing too many buffers (pg_stat_bgwriter).")
	buffersAllocDesc     = desc("buffers_alloc_total", "Buffers allocated (pg_stat_bgwriter).")
	customQueriesOKDesc  = desc("custom_queries_ok", "1 when the custom queries (spec.monitoring.customQueriesConfigMap) parsed and ran, or there are none; 0 otherwise (the instance manager's log says why).")
)

// server is what the first query learns, which the others depend on.
type server struct {
	versionNum int
	primary    bool
}

func readServer(ctx context.Context, conn *pgx.Conn, s *sink) (server, error) {
	var srv server
	var timeline, maxConnections, oldest float64
	// A primary's timeline is in its current WAL file's name at once; its
	// pg_control has it only after the next checkpoint.
	err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, NOT pg_is_in_recovery(),
		CASE WHEN pg_is_in_recovery()
			THEN COALESCE((SELECT received_tli FROM pg_stat_wal_receiver), (SELECT timeline_id FROM pg_control_checkpoint()))
			ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint END::float8,
		current_setting('max_connections')::float8,
		COALESCE((SELECT extract(epoch FROM max(clock_timestamp() - xact_start)) FROM pg_stat_activity
			WHERE xact_start IS NOT NULL AND backend_type = 'client backend' AND pid <> pg_backend_pid()), 0)::float8`).
		Scan(&srv.versionNum, &srv.primary, &timeline, &maxConnections, &oldest)
	if err != nil {
		return srv, err
	}
	s.gauge(versionDesc, float64(srv.versionNum))
	s.gauge(primaryDesc, boolValue(srv.primary))
	s.gauge(timelineDesc, timeline)
	s.gauge(maxConnectionsDesc, maxConnections)
	s.gauge(oldestXactDesc, oldest)
	return srv, nil
}

type step struct {
	name    string
	collect func(context.Context, *pgx.Conn, *sink) error
}

// builtins are the queries of a server in its role and major version.
func builtins(srv server) []step {
	steps := []step{
		{"connections", collectConnections},
		{"databases", collectDatabases},
		{"archiver", collectArchiver},
		{"checkpoints", checkpoints(srv.versionNum)},
		{"wal", collectWAL},
	}
	if srv.primary {
		return append(steps, step{"replication", collectReplication}, step{"slots", collectSlots})
	}
	return append(steps, step{"replay", collectReplay})
}

// connectionStates are pg_stat_activity's states, each reported even at 0
// so that a graph of one has no gaps.
const connectionStates = `ARRAY['active', 'idle', 'idle in transaction', 'idle in transaction (aborted)', 'fastpath function call', 'disabled']`

func collectConnections(ctx context.Context, conn *pgx.Conn, s *sink) error {
	rows, err := conn.Query(ctx, `SELECT s.state, count(a.pid)::float8 FROM unnest(`+connectionStates+`) AS s(state)
		LEFT JOIN pg_stat_activity a ON a.state = s.state AND a.backend_type = 'client backend' AND a.pid <> pg_backend_pid()
		GROUP BY s.state`)
	if err != nil {
		return err
	}
	return eachRow(rows, func(r pgx.CollectableRow) error {
		var state string
		var n float64
		if err := r.Scan(&state, &n); err != nil {
			return err
		}
		s.gauge(connectionsDesc, n, state)
		return nil
	})
}

func collectDatabases(ctx context.Context, conn *pgx.Conn, s *sink) error {
	rows, err := conn.Query(ctx, `SELECT d.datname, s.xact_commit::float8, s.xact_rollback::float8, s.deadlocks::float8,
			pg_database_size(d.oid)::float8
		FROM pg_database d JOIN pg_stat_database s ON s.datid = d.oid
		WHERE d.datallowconn AND NOT d.datistemplate`)
	if err != nil {
		return err
	}
	return eachRow(rows, func(r pgx.CollectableRow) error {
		var name string
		var commits, rollbacks, deadlocks, size float64
		if err := r.Scan(&name, &commits, &rollbacks, &deadlocks, &size); err != nil {
			return err
		}
		s.counter(commitsDesc, commits, name)
		s.counter(rollbacksDesc, rollbacks, name)
		s.counter(deadlocksDesc, deadlocks, name)
		s.gauge(databaseSizeDesc, size, name)
		return nil
	})
}

// collectReplication reads the primary's view of each replica. The
// instance managers name their replication connection after their pod
// (application_name), so replica is the pod's name.
func collectReplication(ctx context.Context, conn *pgx.Conn, s *sink) error {
	rows, err := conn.Query(ctx, `SELECT application_name, state = 'streaming',
			pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::float8,
			COALESCE(extract(epoch FROM replay_lag), 0)::float8
		FROM pg_stat_replication WHERE replay_lsn IS NOT NULL`)
	if err != nil {
		return err
	}
	return eachRow(rows, func(r pgx.CollectableRow) error {
		var name string
		var streaming bool
		var bytes, seconds float64
		if err := r.Scan(&name, &streaming, &bytes, &seconds); err != nil {
			return err
		}
		s.gauge(streamingDesc, boolValue(streaming), name)
		s.gauge(replicationLagDesc, bytes, name)
		s.gauge(replicationSecsDesc, seconds, name)
		return nil
	})
}

func collectWAL(ctx context.Context, conn *pgx.Conn, s *sink) error {
	var size float64
	if err := conn.QueryRow(ctx, `SELECT COALESCE(sum(size), 0)::float8 FROM pg_ls_waldir()`).Scan(&size); err != nil {
		return err
	}
	s.gauge(walBytesDesc, size)
	return nil
}

// collectSlots reads the primary's physical replication slots: how much
// WAL each keeps, and whether a replica streams through it.
func collectSlots(ctx context.Context, conn *pgx.Conn, s *sink) error {
	rows, err := conn.Query(ctx, `SELECT slot_name, active,
			COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::float8
		FROM pg_replication_slots WHERE slot_type = 'physical'`)
	if err != nil {
		return err
	}
	return eachRow(rows, func(r pgx.CollectableRow) error {
		var name string
		var active bool
		var retained float64
		if err := r.Scan(&name, &active, &retained); err != nil {
			return err
		}
		s.gauge(slotActiveDesc, boolValue(active), name)
		s.gauge(slotRetainedDesc, retained, name)
		return nil
	})
}

// collectReplay reads a replica's own view: what it received and has not
// replayed. The lag in seconds is the usual estimate, the age of the last
// replayed commit while WAL waits; it is 0 when nothing waits, so an idle
// primary does not look like a lagging replica.
func collectReplay(ctx context.Context, conn *pgx.Conn, s *sink) error {
	var bytes, seconds float64
	var paused bool
	err := conn.QueryRow(ctx, `SELECT
			GREATEST(COALESCE(pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()), 0), 0)::float8,
			CASE WHEN pg_last_wal_receive_lsn() IS NULL OR pg_last_wal_receive_lsn() <= pg_last_wal_replay_lsn() THEN 0
				ELSE COALESCE(extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp()), 0) END::float8,
			pg_is_wal_replay_paused()`).Scan(&bytes, &seconds, &paused)
	if err != nil {
		return err
	}
	s.gauge(replayLagBytesDesc, bytes)
	s.gauge(replayLagSecsDesc, seconds)
	s.gauge(replayPausedDesc, boolValue(paused))
	return nil
}

// collectArchiver exports pg_stat_archiver as it is. The operator takes no
// backups yet and leaves archive_mode off, so archiving_enabled is 0 and
// the counters stay at 0 until it does.
func collectArchiver(ctx context.Context, conn *pgx.Conn, s *sink) error {
	var enabled bool
	var archived, failed, lastArchived, lastFailed float64
	var age *float64
	err := conn.QueryRow(ctx, `SELECT current_setting('archive_mode') <> 'off', archived_count::float8, failed_count::float8,
			COALESCE(extract(epoch FROM last_archived_time), 0)::float8, COALESCE(extract(epoch FROM last_failed_time), 0)::float8,
			extract(epoch FROM clock_timestamp() - last_archived_time)::float8
		FROM pg_stat_archiver`).Scan(&enabled, &archived, &failed, &lastArchived, &lastFailed, &age)
	if err != nil {
		return err
	}
	s.gauge(archivingDesc, boolValue(enabled))
	s.counter(archivedDesc, archived)
	s.counter(archiveFailedDesc, failed)
	s.gauge(lastArchivedDesc, lastArchived)
	s.gauge(lastFailedDesc, lastFailed)
	if age != nil {
		s.gauge(lastArchiveAgeDesc, *age)
	}
	return nil
}

// checkpoints reads the checkpointer's and background writer's counters:
// PostgreSQL 17 moved the checkpointer's from pg_stat_bgwriter to
// pg_stat_checkpointer, and renamed them.
func checkpoints(versionNum int) func(context.Context, *pgx.Conn, *sink) error {
	query := `SELECT checkpoints_timed::float8, checkpoints_req::float8, checkpoint_write_time / 1000, checkpoint_sync_time / 1000,
			buffers_checkpoint::float8, buffers_clean::float8, maxwritten_clean::float8, buffers_alloc::float8
		FROM pg_stat_bgwriter`
	if versionNum >= 170000 {
		query = `SELECT c.num_timed::float8, c.num_requested::float8, c.write_time / 1000, c.sync_time / 1000,
			c.buffers_written::float8, b.buffers_clean::float8, b.maxwritten_clean::float8, b.buffers_alloc::float8
		FROM pg_stat_checkpointer c, pg_stat_bgwriter b`
	}
	return func(ctx context.Context, conn *pgx.Conn, s *sink) error {
		var timed, requested, write, sync, written, clean, maxWritten, alloc float64
		if err := conn.QueryRow(ctx, query).Scan(&timed, &requested, &write, &sync, &written, &clean, &maxWritten, &alloc); err != nil {
			return err
		}
		s.counter(checkpointsTimedDesc, timed)
		s.counter(checkpointsReqDesc, requested)
		s.counter(checkpointWriteDesc, write)
		s.counter(checkpointSyncDesc, sync)
		s.counter(checkpointBufsDesc, written)
		s.counter(bgwriterCleanDesc, clean)
		s.counter(bgwriterMaxDesc, maxWritten)
		s.counter(buffersAllocDesc, alloc)
		return nil
	}
}

// eachRow calls f on every row, then reports the query's error.
func eachRow(rows pgx.Rows, f func(pgx.CollectableRow) error) error {
	defer rows.Close()
	for rows.Next() {
		if err := f(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

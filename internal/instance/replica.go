package instance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"example.com/myoperator/internal/backup"
	"example.com/myoperator/internal/contract"
)

// A replica MyDatabase (spec.replica) is a standby copy of another one,
// its source, fed from the source's WAL archive (REPLICA_*: Config.Replica),
// a stream from the source's primary (REPLICA_STREAM_*:
// Config.ReplicaStream), or both (docs/replica-clusters.md):
//
//   - Its bootstrap pod restores the source's latest base backup, or
//     clones the source's primary, as a standby's data (restoreStandby),
//     never initdb.
//   - The Lease's holder runs that data as the designated primary
//     (designatedArgs): a hot standby of the source, streaming from its
//     primary, fetching each WAL file it archives, or both (PostgreSQL
//     falls back to the archive while the stream is down). It reports
//     role primary, so the replicas stream from it and the Services route
//     to it, and its replay (ReplicaState); it takes no writes, confirms
//     no commit (no fence) and hands nothing over.
//   - The HA loop is the usual one: a designated primary renews the Lease,
//     and when it is lost an elected replica takes it and restarts as the
//     designated primary (runDesignated) instead of promoting.
//   - The operator promotes the replica by writing contract.ReplicaPromote
//     on the Lease: the designated primary promotes in place (decide,
//     promote): PostgreSQL restores what the archive still holds, then
//     starts a new timeline above every one the source's archive names.
//     From then on the data is this MyDatabase's alone, archived to its
//     own spec.backup path: no instance reads the source's WAL again.
//     With a promotion token on the Lease, it first waits until it has
//     replayed past it (tokenReached).
//   - The operator demotes a MyDatabase that takes writes by writing
//     contract.ReplicaFollow on its Lease: its primary stops, its WAL ends
//     at a shutdown checkpoint, the demotion token (demoteData), and it
//     restarts as the designated primary of its new source, keeping the
//     Lease. A planned switchover between two MyDatabases is the demotion
//     of one and the promotion of the other with its token
//     (docs/replica-clusters.md).

// followsSource tells whether the holder's server runs as the designated
// primary: a replica MyDatabase asked to follow its source (the operator
// says so on the Lease: pods that know a source may run before it does,
// and a MyDatabase that learns its source before it is demoted must not
// follow it yet), on a standby's data.
func (m *manager) followsSource(l leaseView) bool {
	return m.c.replicaDB() && l.follow && m.c.standby()
}

// ReplicaStream is the source's primary a replica MyDatabase streams from.
type ReplicaStream struct {
	Host, Port string
	// TLSDir holds tls.crt and tls.key, a client certificate of the
	// source's replication role, and ca.crt, the source's CA.
	TLSDir string
}

// replicaDB: this is a replica MyDatabase (spec.replica), whatever it
// follows.
func (c Config) replicaDB() bool { return c.Replica != nil || c.ReplicaStream != nil }

// sourceConninfo are the libpq keywords of a replication connection to the
// source's primary: by the source's client certificate, the server's
// checked against the source's CA (verify-ca, as between instances:
// replication.go). Its application_name keeps it apart from the source's
// own instances in the source's pg_stat_replication: the source never
// counts it in a quorum, asks it for a failsafe promise nor keeps a slot
// for it.
func (c Config) sourceConninfo() string {
	s := c.ReplicaStream
	return fmt.Sprintf("host=%s port=%s user=%s connect_timeout=5 sslmode=verify-ca sslrootcert=%s sslcert=%s sslkey=%s application_name='%s'",
		s.Host, s.Port, contract.ReplicationRole, c.tlsCopy(sourceCA), c.tlsCopy(sourceCert), c.tlsCopy(sourceKey), sourceApplicationName(c.PodName))
}

// sourceApplicationName is how a replica MyDatabase's pod shows in its
// source's pg_stat_replication.
func sourceApplicationName(pod string) string {
	name := "mydatabase_replica " + pod
	return name[:min(len(name), 63)]
}

// writable: the server runs as the primary that takes writes, not as a
// designated primary.
func (pg *pgServer) writable() bool { return pg.role == asPrimary && !pg.designated }

// replicaConfigFile holds the source's object store, for wal-fetch.
func (c Config) replicaConfigFile() string { return filepath.Join(c.SocketDir, "replica.json") }

// restoreStandby makes a replica MyDatabase's data in scratch: the
// source's latest base backup (from its archive, else cloned from its
// primary), with standby.signal, so that the server started on it replays
// the source's WAL and never promotes by itself.
func (pg *pgServer) restoreStandby(ctx context.Context, scratch string) error {
	if pg.c.Replica == nil {
		return pg.cloneSource(ctx, scratch)
	}
	store, chain, err := pg.chooseBackup(ctx, *pg.c.Replica, "", time.Time{})
	if err != nil {
		return err
	}
	chosen := chain[len(chain)-1]
	pg.log("restoring base backup %s%s (from %s on timeline %d) of the source %s/%s as a standby", chosen.ID, chainNote(chain),
		chosen.BeginLSN, chosen.Timeline, pg.c.Replica.Bucket, pg.c.Replica.Path)
	w := pg.watchRestore(ctx, chosen.ID, fmt.Sprintf("downloading base backup %s%s of the source", chosen.ID, chainNote(chain)))
	err = store.Restore(ctx, pg.procs.exec, chain, scratch, nil)
	if err == nil {
		err = os.Chmod(scratch, 0o700)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(scratch, "standby.signal"), nil, 0o600)
	}
	w.stop(err)
	return err
}

// cloneSource copies the source's primary with pg_basebackup into scratch,
// as a standby's data.
func (pg *pgServer) cloneSource(ctx context.Context, scratch string) error {
	if _, err := pg.c.copyTLS(); err != nil {
		return err
	}
	s := pg.c.ReplicaStream
	pg.log("cloning the source's primary at %s:%s", s.Host, s.Port)
	w := pg.watchRestore(ctx, "", fmt.Sprintf("cloning the source's primary at %s:%s", s.Host, s.Port))
	err := pg.baseBackup(ctx, pg.c.sourceConninfo(), scratch)
	if err == nil {
		err = os.WriteFile(filepath.Join(scratch, "standby.signal"), nil, 0o600)
	}
	w.stop(err)
	return err
}

// runDesignated (re)starts the holder's server as the designated primary:
// from a stopped server, or from a replica that streamed from the last
// one. The Lease is already this instance's.
func (m *manager) runDesignated(ctx context.Context) error {
	if m.pg.role != stopped {
		m.pg.stop()
	}
	// A rewind or a copy can outlast the Lease: held meanwhile, so that no
	// other server stands for election.
	if err := m.holdWhile(ctx, func() error { return m.pg.rejoinSource(ctx) }); err != nil {
		return err
	}
	return m.pg.start(ctx, asPrimary, "")
}

// sourceAskTimeout bounds rejoinSource's question to the source.
const sourceAskTimeout = 20 * time.Second

// rejoinSource makes the stopped data one whose history the source's
// continues, before it runs as the designated primary. Data that took
// writes past the point where the source's timeline forked from it (an
// old source back after its replica was promoted without its demotion
// token) would never replay the source's WAL: PostgreSQL refuses a
// timeline that forked before its position. Such data is rewound to the
// fork with pg_rewind against the source's primary, or copied again when
// pg_rewind cannot or there is no stream: cloned from the source's
// primary, else restored from the latest base backup in the source's
// archive. What it held past the fork was never the source's: with
// spec.backup it stays in this MyDatabase's own archive (demoteData
// archived its last segment). A source on an older timeline than the
// data has not promoted yet (a planned switchover, before the other side
// promotes): nothing to do. A source that cannot be asked (the network,
// the store) leaves the data as it is: the server starts and waits for
// the source's WAL.
func (pg *pgServer) rejoinSource(ctx context.Context) error {
	if !pg.c.initialised() {
		return nil
	}
	seen, err := pg.dataPosition(ctx)
	if err != nil {
		return err
	}
	// The timeline of the WAL the data ends with, not one it was asked to
	// follow and could not.
	seen.timeline = pg.walTimeline(ctx, seen)
	*pg.lastSeen = seen
	// Bounded: an unreachable source must not keep the server from
	// starting for long.
	askCtx, cancel := context.WithTimeout(ctx, sourceAskTimeout)
	theirs, content, err := pg.sourceTimeline(askCtx, seen.timeline)
	cancel()
	if err != nil {
		pg.log("asking the source for its timeline: %v: starting on the data as it is", err)
		return nil
	}
	if theirs < seen.timeline {
		return nil
	}
	h := pg.against(theirs, content, seen)
	if h == inHistory {
		return nil
	}
	fork := "before"
	if end, ok := timelineEnd(content, seen.timeline); ok {
		fork = "at " + contract.FormatLSN(end) + ", before"
	}
	kept := "this MyDatabase has no spec.backup to keep it"
	if pg.c.Backup != nil {
		kept = "it stays in this MyDatabase's own archive"
	}
	what := fmt.Sprintf("the source's timeline %d forked from this data's %s its end (timeline %d, WAL to %s): what was written here past the fork "+
		"is no part of the source's history (%s)", theirs, fork, seen.timeline, contract.FormatLSN(seen.lsn), kept)
	pg.log("%s", what)
	// The token marks WAL that is no longer this data's.
	if err := os.Remove(pg.c.demotionTokenFile()); err != nil && !os.IsNotExist(err) {
		return err
	}
	how := "copied again"
	if h == forked && pg.c.ReplicaStream != nil {
		how = "rewound"
		err = pg.rewind(ctx, pg.c.sourceConninfo(), "the source's primary", func() error {
			how = "copied again"
			return pg.copySource(ctx)
		})
	} else {
		err = pg.copySource(ctx)
	}
	if err != nil {
		return err
	}
	if err := os.WriteFile(pg.c.rejoinedFile(), []byte(how+": "+what), 0o600); err != nil {
		return err
	}
	// pg_rewind copies the source primary's files, which hold no
	// standby.signal: the data stays a standby's.
	return os.WriteFile(filepath.Join(pg.c.PGData, "standby.signal"), nil, 0o600)
}

// rejoinedFile says, beside the data, how rejoinSource changed it, until
// the data is promoted: what the operator reports and warns of.
func (c Config) rejoinedFile() string { return c.PGData + ".rejoined" }

// copySource replaces the data with a new copy of the source's: a clone of
// its primary when there is a stream (its latest state), else its latest
// base backup.
func (pg *pgServer) copySource(ctx context.Context) error {
	if pg.c.ReplicaStream != nil {
		return pg.replaceData(ctx, func(scratch string) error { return pg.cloneSource(ctx, scratch) })
	}
	return pg.replaceData(ctx, func(scratch string) error { return pg.restoreStandby(ctx, scratch) })
}

// sourceTimeline is the source's newest timeline and its history file:
// its primary's, or, from its archive, the newest above timeline from
// (probed one after the other, as PostgreSQL does), else from's own when
// the archive holds it (0 and none when it holds neither: the source has
// not gone past from).
func (pg *pgServer) sourceTimeline(ctx context.Context, from int64) (int64, string, error) {
	if pg.c.ReplicaStream != nil {
		return pg.timelineOf(ctx, pg.c.sourceConninfo())
	}
	store, err := backup.Open(*pg.c.Replica)
	if err != nil {
		return 0, "", err
	}
	path := filepath.Join(pg.c.SocketDir, "source.history")
	defer func() { _ = os.Remove(path) }()
	fetch := func(tli int64) (string, error) {
		if err := store.FetchWAL(ctx, fmt.Sprintf("%08X.history", tli), path); err != nil {
			return "", err
		}
		b, err := os.ReadFile(path)
		return string(b), err
	}
	newest, content := int64(0), ""
	for tli := from + 1; ; tli++ {
		text, err := fetch(tli)
		if errors.Is(err, backup.ErrNotFound) {
			break
		}
		if err != nil {
			return 0, "", err
		}
		newest, content = tli, text
	}
	if newest > 0 || from < 2 {
		return newest, content, nil
	}
	text, err := fetch(from)
	if errors.Is(err, backup.ErrNotFound) {
		return 0, "", nil
	}
	return from, text, err
}

// designatedArgs are the settings of a designated primary: a standby's of
// no one (standbyArgs) but the source: its primary_conninfo streams from
// the source's primary, its restore_command fetches from the source's
// archive, not this MyDatabase's own. With both, PostgreSQL streams, and
// when the stream breaks replays the archive until it can stream again.
func (pg *pgServer) designatedArgs(ctx context.Context) ([]string, error) {
	args, err := pg.standbyArgs(ctx, "")
	if err != nil {
		return nil, err
	}
	if pg.c.ReplicaStream != nil {
		args = append(args, "-c", "primary_conninfo="+pg.c.sourceConninfo())
	}
	if pg.c.Replica == nil {
		return append(args, "-c", "restore_command="), nil
	}
	if err := backup.WriteConfig(pg.c.replicaConfigFile(), *pg.c.Replica); err != nil {
		return nil, err
	}
	return append(args, "-c", fmt.Sprintf("restore_command=%s wal-fetch --config %s %%f %%p", shellQuote(pg.c.Self), shellQuote(pg.c.replicaConfigFile()))), nil
}

// promoteReplica promotes the designated primary in place: PostgreSQL
// restores what the source's archive still holds, then starts a new
// timeline. The application's role then gets this MyDatabase's password
// (the source's came with the data), as a restore's does.
func (m *manager) promoteReplica(ctx context.Context, mine, newest int64) error {
	if err := m.pg.reserveTimelines(mine, newest); err != nil {
		return err
	}
	if err := m.promote(ctx); err != nil {
		return err
	}
	if err := os.Remove(m.c.rejoinedFile()); err != nil && !os.IsNotExist(err) {
		return err
	}
	if err := m.pg.setPassword(ctx, m.c.User, m.c.Password); err != nil {
		return fmt.Errorf("setting the password of role %s after the promotion: %w", m.c.User, err)
	}
	m.log("promoted the replica MyDatabase: role %s has this MyDatabase's password", m.c.User)
	return nil
}

// demotionTokenFile keeps where this MyDatabase's own WAL ended when it
// was demoted, beside the data (never in it: a base backup or a clone
// must not carry it).
func (c Config) demotionTokenFile() string { return c.PGData + ".demotion-token" }

// demoteData ends this MyDatabase's own history on the stopped data of its
// primary and makes it a standby's. A clean stop (the fast shutdown of
// stop, which sends all of its WAL to every standby connected) ends the
// WAL with a shutdown checkpoint: the demotion token is that checkpoint's
// position, which the MyDatabase that promotes in its place must have
// replayed. With spec.backup, the WAL segment the checkpoint is in is
// archived now (the archiver leaves the last, incomplete one), so that a
// replica that reads this archive gets all of it. Data that was not
// stopped cleanly gets no token: where its WAL ends is known only once it
// has recovered, and whatever it holds past what the other side has is
// lost when that side promotes.
func (m *manager) demoteData(ctx context.Context) error {
	control, err := m.pg.controlData(ctx)
	if err != nil {
		return err
	}
	if state := control["Database cluster state"]; state != "shut down" {
		m.log("demoting data whose state is %q, not shut down: no demotion token", state)
		_ = os.Remove(m.c.demotionTokenFile())
	} else {
		tli, terr := strconv.ParseInt(control["Latest checkpoint's TimeLineID"], 10, 64)
		lsn, lerr := contract.LSN(control["Latest checkpoint location"])
		segment, serr := strconv.ParseUint(control["Bytes per WAL segment"], 10, 64)
		if err := errors.Join(terr, lerr, serr); err != nil {
			return fmt.Errorf("reading where the WAL ends: %w", err)
		}
		if m.c.Backup != nil {
			name := fmt.Sprintf("%08X%08X%08X", tli, lsn>>32, (lsn&0xFFFFFFFF)/segment)
			store, err := backup.Open(*m.c.Backup)
			if err == nil {
				err = store.PushWAL(ctx, filepath.Join(m.c.PGData, "pg_wal", name))
			}
			if err != nil {
				return fmt.Errorf("archiving %s, where the WAL ends: %w", name, err)
			}
		}
		token := contract.FormatToken(tli, lsn)
		if err := os.WriteFile(m.c.demotionTokenFile(), []byte(token), 0o600); err != nil {
			return err
		}
		m.log("demoted: the WAL ends at %s (demotion token %s)", contract.FormatLSN(lsn), token)
	}
	return os.WriteFile(m.c.PGData+"/standby.signal", nil, 0o600)
}

// tokenReached tells whether the designated primary has replayed past the
// Lease's promotion token (true without one, or for another server).
func (pg *pgServer) tokenReached(l leaseView, obs serverState) bool {
	if !pg.designated || l.promotionToken == "" {
		pg.waiting.Store(nil)
		return true
	}
	tli, lsn, err := contract.ParseToken(l.promotionToken)
	if err != nil {
		pg.logOnce(fmt.Errorf("the promotion token: %w: not promoting", err))
		return false
	}
	if obs.timeline > tli || (obs.timeline == tli && obs.replayed > lsn) {
		pg.waiting.Store(nil)
		return true
	}
	w := fmt.Sprintf("promoting once the source's WAL is replayed past %s (the promotion token): replayed %s on timeline %d",
		l.promotionToken, contract.FormatLSN(obs.replayed), obs.timeline)
	pg.waiting.Store(&w)
	return false
}

// replicaState is the designated primary's replay, for its report: the
// last WAL file fetched from the source's archive, the commit time of the
// last transaction replayed, and whether it streams from the source's
// primary, which had flushed WAL up to SourceLSN at its last message.
func (pg *pgServer) replicaState(ctx context.Context) *contract.ReplicaState {
	st := &contract.ReplicaState{}
	if r, ok := pg.c.lastFetch(); ok {
		st.LastWAL = r.LastSegment
	}
	err := pg.withServerFor(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		var source *string
		err := conn.QueryRow(ctx, `SELECT pg_last_xact_replay_timestamp(),
			coalesce((SELECT status = 'streaming' FROM pg_stat_wal_receiver), false),
			(SELECT latest_end_lsn::text FROM pg_stat_wal_receiver WHERE status = 'streaming')`).Scan(&st.ReplayedAt, &st.Streaming, &source)
		st.SourceLSN = deref(source)
		return err
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		pg.logOnce(fmt.Errorf("reading the replay's time: %w", err))
	}
	if st.ReplayedAt != nil {
		t := st.ReplayedAt.UTC().Truncate(time.Millisecond)
		st.ReplayedAt = &t
	}
	if w := pg.waiting.Load(); w != nil {
		st.Waiting = *w
	}
	if b, err := os.ReadFile(pg.c.rejoinedFile()); err == nil {
		st.Rejoined = string(b)
	}
	// The token holds until this server follows a newer timeline: that of
	// the primary that promoted in this one's place.
	if b, err := os.ReadFile(pg.c.demotionTokenFile()); err == nil {
		if tli, _, err := contract.ParseToken(string(b)); err == nil && pg.lastSeen.timeline > tli {
			_ = os.Remove(pg.c.demotionTokenFile())
		} else {
			st.DemotionToken = string(b)
		}
	}
	return st
}

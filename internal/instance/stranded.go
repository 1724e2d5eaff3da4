package instance

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"example.com/myoperator/internal/contract"
)

// A replica whose primary no longer has the WAL it needs next, and that no
// archive provides, never catches up on its own: its WAL receiver asks
// again and again, and the primary answers "requested WAL segment ... has
// already been removed". It happens to a replica that was down past what
// its slot may hold (max_slot_wal_keep_size) without spec.backup, or that
// followed a new primary which made its slot after that WAL was gone. The
// instance manager notices that the replica neither streams nor replays,
// asks the primary itself, as the WAL receiver does, and on that answer
// clones the primary again. Nothing is lost: the replica is behind on the
// primary's own history, so its data holds nothing the primary lacks.
//
// The other answer that never changes is "requested starting point ... is
// not in this server's history": the primary's timeline forked from the
// replica's before the replica's position. It happens to the replicas of
// a demoted MyDatabase whose designated primary was rewound, or copied
// again, to its new source's history (rejoinSource): what the replicas
// hold past the fork is no part of the database's history any more, and
// they are cloned again too.

// stranding is what a running replica's turns saw of its progress.
type stranding struct {
	replayed uint64    // the replay position, as last seen moving
	since    time.Time // since when it has stood there, not streaming
	askedAt  time.Time // when the primary was last asked
}

// strandedNow tells whether this running replica is stranded. It asks the
// primary only once the replica has neither streamed nor replayed for a
// Lease duration, at most once a Lease duration, and only while that
// primary holds the Lease: a primary that is gone would keep the turn
// waiting for its answer when the replica should stand for election.
func (pg *pgServer) strandedNow(ctx context.Context, s situation, obs serverState) bool {
	st := &pg.stranded
	following := s.leaseRead && !s.lease.expired && s.lease.holder == pg.following
	if pg.role != asReplica || !s.ready || !following || obs.streaming || pg.upstream == "" || obs.replayed != st.replayed {
		*st = stranding{replayed: obs.replayed, since: time.Now()}
		return false
	}
	if time.Since(st.since) < pg.t.lease || time.Since(st.askedAt) < pg.t.lease {
		return false
	}
	st.askedAt = time.Now()
	timeline := pg.walTimeline(ctx, obs)
	gone, forked, err := pg.walGone(ctx, pg.upstream, obs.lsn, timeline)
	if err != nil {
		pg.logOnce(fmt.Errorf("the replica neither streams nor replays; asking the primary at %s for WAL from %s: %w",
			pg.upstream, contract.FormatLSN(obs.lsn), err))
		return false
	}
	switch {
	case gone:
		pg.log("the primary at %s no longer has the WAL from %s this replica needs, and no archive provides it",
			pg.upstream, contract.FormatLSN(obs.lsn))
	case forked:
		pg.log("the primary at %s forked its timeline before %s on timeline %d, where this replica's data is: its history is no longer the primary's",
			pg.upstream, contract.FormatLSN(obs.lsn), timeline)
	}
	return gone || forked
}

// walTimeline is the timeline of the WAL this running replica holds at
// its position, as its WAL receiver asks for it: the newest timeline whose
// segment holding that position is in pg_wal (a standby keeps what it
// streamed and what it restored under their names). The timeline it
// reports is the one it follows (replicaTimeline), which a replica whose
// data went past the point where that timeline forked never reaches.
func (pg *pgServer) walTimeline(ctx context.Context, obs serverState) int64 {
	control, err := pg.controlData(ctx)
	if err != nil {
		return obs.timeline
	}
	size, err := strconv.ParseUint(control["Bytes per WAL segment"], 10, 64)
	if err != nil {
		return obs.timeline
	}
	if tli := segmentTimeline(pg.c.PGData+"/pg_wal", obs.lsn, size); tli > 0 {
		return tli
	}
	return obs.timeline
}

// segmentTimeline is the newest timeline whose WAL segment (of size
// bytes) holding the last byte before lsn is in walDir, 0 when none is.
func segmentTimeline(walDir string, lsn, size uint64) int64 {
	if size == 0 || lsn == 0 {
		return 0
	}
	segment, perID := (lsn-1)/size, 0x100000000/size
	names, _ := filepath.Glob(filepath.Join(walDir, fmt.Sprintf("????????%08X%08X", segment/perID, segment%perID)))
	newest := int64(0)
	for _, name := range names {
		if tli, err := strconv.ParseInt(filepath.Base(name)[:8], 16, 64); err == nil {
			newest = max(newest, tli)
		}
	}
	return newest
}

// walGone asks the primary at address to stream from lsn on timeline, as
// a WAL receiver would, and tells whether it answers that it no longer
// has that WAL (gone), or that its history forked from that timeline
// before lsn (forked).
func (pg *pgServer) walGone(ctx context.Context, address string, lsn uint64, timeline int64) (gone, forked bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, pg.t.lease/2)
	defer cancel()
	conninfo, err := pg.replicationConninfo(ctx, address)
	if err != nil {
		return false, false, err
	}
	conn, err := pg.dialReplication(ctx, conninfo)
	if err != nil {
		return false, false, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	err = startReplication(ctx, conn, pglogrepl.LSN(lsn), int32(timeline))
	if err == nil {
		// The answer comes with the first read of the WAL: data, or the
		// error.
		var msg pgproto3.BackendMessage
		if msg, err = conn.ReceiveMessage(ctx); err == nil {
			e, failed := msg.(*pgproto3.ErrorResponse)
			if !failed {
				return false, false, nil
			}
			err = pgconn.ErrorResponseToPgError(e)
		}
	}
	switch {
	case removed(err):
		return true, false, nil
	case notInHistory(err):
		return false, true, nil
	}
	return false, false, err
}

// removed tells whether err is a walsender's "requested WAL segment ...
// has already been removed", known by its message: its SQLSTATE follows
// an errno, which is not always ENOENT's.
func removed(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Message, "requested WAL segment ") &&
		strings.HasSuffix(pgErr.Message, " has already been removed")
}

// notInHistory tells whether err is a walsender's "requested starting
// point ... on timeline ... is not in this server's history", known by its
// message (its SQLSTATE is the generic one).
func notInHistory(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Message, "requested starting point ") &&
		strings.HasSuffix(pgErr.Message, " is not in this server's history")
}

// reclone replaces this stranded replica's data with a new clone of the
// primary it follows, and follows it again.
func (pg *pgServer) reclone(ctx context.Context) error {
	holder, address := pg.following, pg.upstream
	pg.log("cloning the primary again: the data here cannot catch up")
	pg.stop()
	if err := pg.cloneReplica(ctx, address); err != nil {
		return err
	}
	if err := pg.start(ctx, asReplica, address); err != nil {
		return err
	}
	pg.following = holder
	return nil
}

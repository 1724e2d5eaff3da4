package instance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"example.com/myoperator/internal/contract"
)

// A switchover is a planned change of primary, with no commit lost:
//
//  1. The operator names the target in the Lease
//     (contract.AnnotationSwitchoverTo).
//  2. The primary waits until the target streams from it and is less than
//     maxHandOverLag behind, renewing the Lease meanwhile.
//  3. It runs a CHECKPOINT, for a tick at most (checkpointFirst), so that
//     the shutdown's own checkpoint is short.
//  4. It asks the poolers that follow switchovers to pause, and waits
//     until they have, poolerPauseWait at most (pausePoolers; the
//     protocol is in internal/contract, pooler.go); then it stops its
//     server: a fast shutdown, which ends every session, writes a
//     shutdown checkpoint and sends the WAL up to it to each connected
//     standby before it exits.
//  5. It reads where its WAL ended (pg_controldata) and hands the Lease to
//     the target with that position (handoffAnnotation), in one
//     conditional update.
//  6. The target promotes only once it has received WAL past that
//     position (decide), so it has every commit the old primary made,
//     acknowledged or not. If it has not within half a Lease, it gives the
//     Lease up and the most advanced instance, the old primary, is elected.
//  7. The old primary follows the new one (no rewind needed: its timeline
//     ended where the new one forked).
//
// Until step 5 succeeds the old primary holds the Lease, and the next turn
// starts it again as the primary: a switchover that fails costs a restart,
// never the data.

// maxHandOverLag is how far behind the target may be when the primary
// stops; the shutdown sends it the rest.
const maxHandOverLag = 16 << 20

// handOver carries out a switchover to target, if it has caught up. It
// reports whether it stopped the server (the Lease is then the target's,
// unless err says otherwise).
func (pg *pgServer) handOver(ctx context.Context, target string) (bool, error) {
	lag, err := pg.standbyLag(ctx, target)
	if err != nil {
		return false, err
	}
	if lag > maxHandOverLag {
		return false, fmt.Errorf("switchover to %s: it is %d bytes behind, waiting for it to catch up", target, lag)
	}
	if !pg.pausingFor(target) {
		pg.checkpointFirst(ctx) // once, not again on each turn the poolers take
	}
	waiting, err := pg.pausePoolers(ctx, target)
	if err != nil {
		return false, fmt.Errorf("switchover to %s: asking the poolers to pause: %w", target, err)
	}
	if waiting > 0 {
		return false, fmt.Errorf("switchover to %s: waiting for %d poolers to pause", target, waiting)
	}
	pg.log("switching over to %s, %d bytes behind", target, lag)
	pg.stop()
	end, err := pg.walEnd(ctx)
	if err != nil {
		return true, fmt.Errorf("switchover to %s: %w; keeping the Lease", target, err)
	}
	if err := pg.leases.handOver(ctx, target, end, pg.pausing.paused); err != nil {
		return true, fmt.Errorf("switchover to %s: handing over the Lease: %w", target, err)
	}
	pg.log("handed the Lease to %s, WAL ends at %s", target, contract.FormatLSN(end))
	return true, nil
}

// poolerPauseWait is how long a primary waits for the poolers to pause
// before it stops anyway: a pooler that cannot pause (its transactions run
// long, or it is cut off) must not hold the switchover back.
const poolerPauseWait = 10 * time.Second

// pausePoolers asks the poolers that follow switchovers to pause
// (contract.PoolerSwitchoverChannel) for a switchover to target ("" when
// this primary stops and an election follows), and waits, a tick at most
// in this turn, until each control connection reports it paused. It
// returns how many have not yet, 0 once poolerPauseWait has passed since
// the first ask for target.
func (pg *pgServer) pausePoolers(ctx context.Context, target string) (int, error) {
	now := time.Now()
	if !pg.pausingFor(target) {
		pg.pausing.target, pg.pausing.since = target, now
	}
	what := "switchover to " + target
	if target == "" {
		what = "stopping"
	}
	waiting, paused := 0, map[string]int{}
	err := pg.withServer(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, "SELECT pg_notify($1, $2)", contract.PoolerSwitchoverChannel, target); err != nil {
			return err
		}
		for deadline := now.Add(pg.t.tick); ; {
			var err error
			if waiting, paused, err = controlConnections(ctx, conn); err != nil || waiting == 0 || time.Now().After(deadline) {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	pg.pausing.paused = paused
	switch {
	case err != nil:
		return 0, err
	case waiting > 0 && time.Since(pg.pausing.since) >= poolerPauseWait:
		pg.log("%s: %d poolers did not pause within %s; stopping anyway", what, waiting, poolerPauseWait)
		return 0, nil
	case waiting == 0 && len(paused) > 0:
		pg.log("%s: poolers paused (%s pods by pooler ID), within %s", what, contract.FormatPoolersPaused(paused),
			time.Since(pg.pausing.since).Round(time.Millisecond))
	}
	return waiting, nil
}

// controlConnections counts the poolers' control connections to this
// server: how many have not paused, and how many have by pooler ID.
func controlConnections(ctx context.Context, conn *pgx.Conn) (waiting int, paused map[string]int, err error) {
	rows, err := conn.Query(ctx, "SELECT application_name, count(*) FROM pg_stat_activity WHERE usename = $1 GROUP BY 1", contract.PoolerRole)
	if err != nil {
		return 0, nil, err
	}
	paused = map[string]int{}
	var app string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&app, &n}, func() error {
		switch id, isPaused, ok := contract.ParsePoolerApp(app); {
		case ok && isPaused:
			paused[id] += n
		case ok:
			waiting += n
		}
		return nil
	})
	return waiting, paused, err
}

// pausingFor tells whether the poolers were asked to pause for target
// lately: a switchover that waits for them, not an earlier one.
func (pg *pgServer) pausingFor(target string) bool {
	return !pg.pausing.since.IsZero() && pg.pausing.target == target && time.Since(pg.pausing.since) <= 3*poolerPauseWait
}

// errNotStreaming: the target of a switchover does not stream from this
// primary.
var errNotStreaming = errors.New("it does not stream from this primary")

// standbyLag is how many bytes of WAL the standby named target has yet to
// flush.
func (pg *pgServer) standbyLag(ctx context.Context, target string) (uint64, error) {
	var lag *int64
	err := pg.withServer(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - flush_lsn)::bigint FROM pg_stat_replication
			WHERE application_name = $1 AND state = 'streaming' ORDER BY flush_lsn DESC NULLS LAST LIMIT 1`, target).Scan(&lag)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows) || (err == nil && lag == nil):
		return 0, fmt.Errorf("switchover to %s: %w", target, errNotStreaming)
	case err != nil:
		return 0, err
	}
	return uint64(max(*lag, 0)), nil
}

// walEnd is where the WAL of the stopped server ends: its shutdown
// checkpoint. A server that did not shut down cleanly has no known end.
func (pg *pgServer) walEnd(ctx context.Context) (uint64, error) {
	control, err := pg.controlData(ctx)
	if err != nil {
		return 0, err
	}
	if state := control["Database cluster state"]; state != "shut down" {
		return 0, fmt.Errorf("the server did not shut down cleanly (%q)", state)
	}
	return contract.LSN(control["Latest checkpoint location"])
}

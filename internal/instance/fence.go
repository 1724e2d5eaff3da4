package instance

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"example.com/myoperator/internal/contract"
)

// The fence: a primary acknowledges a commit only while its instance
// manager holds the Lease.
//
// PostgreSQL has no notion of a lease, but it has synchronous replication:
// with synchronous_standby_names naming a standby, a commit is reported to
// the client (and made visible to other sessions) only once that standby
// has confirmed the commit's WAL. The instance manager is that standby: a
// replication connection that receives the WAL and confirms it only while
// the fence is open, that is until the renew deadline after the start of
// its last successful renewal (timing). So a primary whose instance
// manager cannot renew, or that was paused (SIGSTOP) past its Lease, stops
// acknowledging commits the instant the deadline passes: a commit waits
// instead, and the instance manager then stops the server, which fails the
// waiting sessions; it is never acknowledged. A primary whose instance
// manager is gone entirely is gone with it: in a pod the instance manager is
// PID 1, and the server is its child, killed with it (Pdeathsig outside a
// pod).
//
// With synchronous replication the fence confirms WAL only once enough
// members (Config.members) have flushed it: only the instances' own
// replication connections count, by application name.
//
// What the fence does not cover: a session that sets synchronous_commit to
// local or off asks not to wait for any standby, so its commits are
// acknowledged without the fence (docs/high-availability.md).

// fenceName is the fence's application_name, which
// synchronous_standby_names names.
const fenceName = "mydatabase_fence"

// fence is open until a deadline on the local monotonic clock. With
// synchronous replication it also holds the quorum: how many replicas must
// have flushed WAL before the fence confirms it.
type fence struct {
	mu     sync.Mutex
	until  time.Time
	now    func() time.Time
	quorum contract.Quorum
	// streaming: the witness streams from the server.
	streaming bool
}

// setStreaming records whether the witness streams.
func (f *fence) setStreaming(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.streaming = on
}

// awaitStreaming waits up to d for the witness to stream; it tells
// whether it does.
func (f *fence) awaitStreaming(ctx context.Context, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		f.mu.Lock()
		streaming := f.streaming
		f.mu.Unlock()
		if streaming || ctx.Err() != nil || time.Now().After(deadline) {
			return streaming
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// setQuorum sets the quorum that confirmations wait for from now on.
func (f *fence) setQuorum(q contract.Quorum) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.quorum = q
}

func (f *fence) quorumNow() contract.Quorum {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.quorum
}

func newFence(now clock) *fence { return &fence{now: now} }

// extend opens the fence until deadline after start, the start of a
// successful renewal; never moves an open deadline earlier.
func (f *fence) extend(start time.Time, deadline time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if u := start.Add(deadline); u.After(f.until) {
		f.until = u
	}
}

// close shuts the fence now.
func (f *fence) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.until = time.Time{}
}

// left is how long the fence stays open from now; 0 when it is shut.
func (f *fence) left() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return max(f.until.Sub(f.now()), 0)
}

// open tells whether a commit may be acknowledged now.
func (f *fence) open() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now().Before(f.until)
}

// witness is the fence's standby: it streams the local primary's WAL and
// confirms each position it receives while the fence is open. It returns
// when ctx ends or the connection fails; the caller reconnects.
func witness(ctx context.Context, c Config, f *fence) error {
	conn, err := pgconn.Connect(ctx, fmt.Sprintf("host=%s port=%s user=postgres dbname=replication replication=true application_name=%s",
		c.SocketDir, c.Port, fenceName))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	sys, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return err
	}
	// Physical replication without a slot: pglogrepl.StartReplication
	// always names one.
	if err := startReplication(ctx, conn, sys.XLogPos, sys.Timeline); err != nil {
		return err
	}
	f.setStreaming(true)
	defer f.setStreaming(false)
	replicas := &standbys{c: c}
	defer replicas.close()
	received := sys.XLogPos
	confirmed := pglogrepl.LSN(0)
	var sent time.Time
	for {
		q := f.quorumNow()
		wake := witnessWake
		if q.Synchronous > 0 && received > confirmed {
			wake = quorumPoll
		}
		reply, err := receive(ctx, conn, &received, wake)
		if err != nil {
			return err
		}
		// The check and the reply are as close as they can be: a pause
		// between them can only delay the confirmation of WAL received
		// before it, written while the fence was open.
		if !f.open() {
			continue
		}
		upto := received
		if q.Synchronous > 0 {
			if upto, err = replicas.quorumFlushed(ctx, q, received); err != nil {
				return err
			}
		}
		upto = max(upto, confirmed)
		// A confirmation is repeated every witnessWake even when nothing
		// is new: the server releases waiting commits only when a standby
		// it takes as the fence replies, and while two stream (the fence
		// bridge and a witness, bridge.go) it takes the other one until
		// that one leaves.
		if upto == confirmed && !reply && time.Since(sent) < witnessWake {
			continue
		}
		if err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{
			WALWritePosition: upto, WALFlushPosition: upto, WALApplyPosition: upto,
		}); err != nil {
			return err
		}
		confirmed, sent = upto, time.Now()
	}
}

// witnessWake is the longest the witness waits for a message before it
// looks at the fence again: a fence that opens (the first renewal of a new
// primary) confirms what waits within this.
const witnessWake = 50 * time.Millisecond

// quorumPoll is how often the witness asks how far the replicas have
// flushed while WAL waits for a quorum: the most a synchronous commit
// waits beyond the replicas' own confirmation.
const quorumPoll = 2 * time.Millisecond

// standbys reads the replicas' flush positions from the local primary.
type standbys struct {
	c    Config
	conn *pgx.Conn
}

// members are the application names of the replicas the quorum counts:
// the other instances of the MyDatabase's spec.replicas (ordinals 0 to
// instances-1, named after the bootstrap pod, ordinal 0), which each set
// as their own pod name (standbyArgs). Any other WAL stream, such as a
// pg_basebackup --wal-method=stream of a re-clone, holds nothing a
// failover could find, and is never counted.
func (c Config) members(instances int32) []string {
	var out []string
	for i := range instances {
		if name := c.instanceName(int(i)); name != c.PodName {
			out = append(out, name)
		}
	}
	return out
}

// instanceName is the pod name of an ordinal: the bootstrap pod's (ordinal
// 0) with the ordinal in place of its 0.
func (c Config) instanceName(ordinal int) string {
	return strings.TrimSuffix(c.BootstrapPod, "0") + strconv.Itoa(ordinal)
}

// isInstance tells whether name is the pod name of some ordinal.
func (c Config) isInstance(name string) bool {
	n, err := strconv.Atoi(strings.TrimPrefix(name, strings.TrimSuffix(c.BootstrapPod, "0")))
	return err == nil && n >= 0 && c.instanceName(n) == name
}

// quorumFlushed is how far the fence may confirm WAL received up to
// received: as far as q.Synchronous members have flushed it. With fewer
// members streaming, a required quorum confirms nothing more; a preferred
// one waits for those that stream, or for none.
func (s *standbys) quorumFlushed(ctx context.Context, q contract.Quorum, received pglogrepl.LSN) (pglogrepl.LSN, error) {
	if s.conn == nil {
		conn, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%s user=postgres dbname=postgres application_name=%s",
			s.c.SocketDir, s.c.Port, fenceName+"_quorum"))
		if err != nil {
			return 0, err
		}
		s.conn = conn
	}
	rows, err := s.conn.Query(ctx, `SELECT flush_lsn::text FROM pg_stat_replication
		WHERE application_name = ANY($1) AND state = 'streaming' AND flush_lsn IS NOT NULL ORDER BY flush_lsn DESC`,
		s.c.members(q.Instances))
	if err != nil {
		return 0, err
	}
	texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	flushed := make([]uint64, len(texts))
	for i, text := range texts {
		lsn, err := pglogrepl.ParseLSN(text)
		if err != nil {
			return 0, err
		}
		flushed[i] = uint64(lsn)
	}
	return pglogrepl.LSN(quorumPosition(q, flushed, uint64(received))), nil
}

// quorumPosition is how far the fence may confirm WAL received up to
// received, given how far each streaming member has flushed it (largest
// first): as far as q.Synchronous of them. With fewer, a required quorum
// confirms nothing more; a preferred one waits for those that stream, or
// for none.
func quorumPosition(q contract.Quorum, flushed []uint64, received uint64) uint64 {
	need := int(q.Synchronous)
	switch {
	case len(flushed) >= need:
	case q.Required:
		return 0
	case len(flushed) == 0:
		return received
	default:
		need = len(flushed)
	}
	return min(flushed[need-1], received)
}

func (s *standbys) close() {
	if s.conn != nil {
		_ = s.conn.Close(context.Background())
	}
}

// receive reads one message, or none within wake, advancing received; it
// tells whether the server asked for a reply.
func receive(ctx context.Context, conn *pgconn.PgConn, received *pglogrepl.LSN, wake time.Duration) (bool, error) {
	rctx, cancel := context.WithTimeout(ctx, wake)
	msg, err := conn.ReceiveMessage(rctx)
	cancel()
	switch {
	case err != nil && pgconn.Timeout(err) && ctx.Err() == nil:
		return false, nil
	case err != nil:
		return false, err
	}
	switch msg := msg.(type) {
	case *pgproto3.ErrorResponse:
		return false, pgconn.ErrorResponseToPgError(msg)
	case *pgproto3.CopyData:
		switch msg.Data[0] {
		case pglogrepl.XLogDataByteID:
			x, err := pglogrepl.ParseXLogData(msg.Data[1:])
			if err != nil {
				return false, err
			}
			if end := x.WALStart + pglogrepl.LSN(len(x.WALData)); end > *received {
				*received = end
			}
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			k, err := pglogrepl.ParsePrimaryKeepaliveMessage(msg.Data[1:])
			if err != nil {
				return false, err
			}
			return k.ReplyRequested, nil
		}
	}
	return false, nil
}

func startReplication(ctx context.Context, conn *pgconn.PgConn, from pglogrepl.LSN, timeline int32) error {
	conn.Frontend().Send(&pgproto3.Query{String: fmt.Sprintf("START_REPLICATION PHYSICAL %s TIMELINE %d", from, timeline)})
	if err := conn.Frontend().Flush(); err != nil {
		return err
	}
	for {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			return err
		}
		switch msg := msg.(type) {
		case *pgproto3.CopyBothResponse:
			return nil
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(msg)
		}
	}
}

var (
	errNotHolder = errors.New("this instance does not hold the Lease")
	errLostRace  = errors.New("another instance changed the Lease first")
)

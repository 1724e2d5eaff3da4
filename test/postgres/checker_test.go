package postgres

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The write-loss checker, in the manner of Jepsen's: clients insert
// uniquely numbered rows through the read-write endpoint and record every
// commit the server acknowledged, with which server answered (its port
// here, where each instance has its own, and its timeline). After the
// faults every acknowledged row must be on the current primary, and no
// older timeline may acknowledge a write that began after a newer one had
// acknowledged one: that would be two primaries accepting writes at once.

// ack is one acknowledged insert.
type ack struct {
	id             int64
	server         string // port and timeline: "5433/2"
	timeline       int64
	invoked, acked time.Time
	client         int
}

// writers runs clients against conninfo until stopped.
type writers struct {
	conninfo string
	mu       sync.Mutex
	acks     []ack
	failures int
	stop     chan struct{}
	wg       sync.WaitGroup
}

const checkerTable = "CREATE TABLE IF NOT EXISTS acked (id bigint PRIMARY KEY, client int NOT NULL)"

// startWriters starts n clients. Each connects (again after any error, 50
// ms later) and inserts one row per statement, autocommit. All but the last
// connect to conninfo and keep their connection, as a pool's connections
// do: they stay with the server they reached until it fails them. The last
// connects anew for each write, to direct() (any instance that accepts
// writes): it reaches a new primary as soon as it is promoted, so a write
// the old one acknowledges after the new one's first is seen, as split
// brain.
func startWriters(t *testing.T, conninfo string, direct func() string, n int) *writers {
	t.Helper()
	w := &writers{conninfo: conninfo, stop: make(chan struct{})}
	for i := range n {
		w.wg.Add(1)
		if i == n-1 {
			go w.client(i, direct)
		} else {
			go w.client(i, nil)
		}
	}
	t.Cleanup(w.halt)
	return w
}

// nextID numbers the rows of every run of the process: runs share a table.
var nextID atomic.Int64

func (w *writers) id() int64 { return nextID.Add(1) }

// client n writes through conninfo, or through direct() anew for each
// write when direct is set.
func (w *writers) client(n int, direct func() string) {
	defer w.wg.Done()
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		if conn == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			conninfo := w.conninfo
			if direct != nil {
				conninfo = direct()
			}
			c, err := pgx.Connect(ctx, conninfo)
			cancel()
			if err != nil {
				w.fail()
				time.Sleep(50 * time.Millisecond)
				continue
			}
			conn = c
		}
		id := w.id()
		invoked := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var port int
		var walfile string
		err := conn.QueryRow(ctx, `INSERT INTO acked VALUES ($1, $2)
			RETURNING inet_server_port(), pg_walfile_name(pg_current_wal_lsn())`, id, n).Scan(&port, &walfile)
		cancel()
		if err != nil {
			// Not acknowledged: the row may or may not be there.
			_ = conn.Close(context.Background())
			conn = nil
			w.fail()
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if direct != nil {
			_ = conn.Close(context.Background())
			conn = nil
		}
		tli, _ := strconv.ParseInt(walfile[:8], 16, 64)
		w.mu.Lock()
		w.acks = append(w.acks, ack{id: id, server: fmt.Sprintf("%d/%d", port, tli), timeline: tli,
			invoked: invoked, acked: time.Now(), client: n})
		w.mu.Unlock()
	}
}

func (w *writers) fail() { w.mu.Lock(); w.failures++; w.mu.Unlock() }

// halt stops the clients and waits for them.
func (w *writers) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.wg.Wait()
}

// count is the number of acknowledged writes so far.
func (w *writers) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acks)
}

// waitAcks waits until n more writes than now are acknowledged.
func (w *writers) waitAcks(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	target := w.count() + n
	eventually(t, timeout, fmt.Sprintf("%d acknowledged writes", target), func() (bool, string) {
		got := w.count()
		return got >= target, fmt.Sprint(got)
	})
}

// verdict is what the checker found.
type verdict struct {
	acked, lost int
	servers     []string // servers that acknowledged writes, in order of first ack
	splitBrain  []string // descriptions of overlapping writes
	// longestGap is the longest time without an acknowledged write, after
	// the first: the write unavailability; gapEnd the acknowledgement
	// that ended it.
	longestGap time.Duration
	gapEnd     time.Time
}

// check stops the writers, reads every row from the primary at conninfo
// and judges the history.
func (w *writers) check(t *testing.T, primary string) verdict {
	t.Helper()
	w.halt()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, primary)
	if err != nil {
		t.Fatalf("checker: connecting to the primary: %v", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	rows, err := conn.Query(ctx, "SELECT id FROM acked")
	if err != nil {
		t.Fatal(err)
	}
	present := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		present[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return judge(w.acks, present)
}

// judge is the checker's verdict on a history: plain, so that it is
// tested on made-up histories (TestJudge). Servers (an instance on one
// timeline) take turns as primary; their order is that of their first
// acknowledged write. A write acknowledged by a server that began after a
// later server had acknowledged its first write was accepted by two
// primaries at once: split brain. (Not timeline numbers: two instances
// promoted one after the other can pick the same one.)
func judge(acks []ack, present map[int64]bool) verdict {
	v := verdict{acked: len(acks)}
	acks = slices.Clone(acks)
	slices.SortFunc(acks, func(a, b ack) int { return a.acked.Compare(b.acked) })
	firstAck := map[string]time.Time{}
	turn := map[string]int{}
	for i, a := range acks {
		if !present[a.id] {
			v.lost++
		}
		if _, ok := firstAck[a.server]; !ok {
			firstAck[a.server], turn[a.server] = a.acked, len(v.servers)
			v.servers = append(v.servers, a.server)
		}
		if i > 0 {
			if gap := a.acked.Sub(acks[i-1].acked); gap > v.longestGap {
				v.longestGap, v.gapEnd = gap, a.acked
			}
		}
	}
	for _, a := range acks {
		for _, later := range v.servers[turn[a.server]+1:] {
			if a.invoked.After(firstAck[later]) {
				v.splitBrain = append(v.splitBrain, fmt.Sprintf("row %d acknowledged by %s (begun %s), after %s acknowledged its first at %s",
					a.id, a.server, a.invoked.Format(time.RFC3339Nano), later, firstAck[later].Format(time.RFC3339Nano)))
				break
			}
		}
	}
	return v
}

func TestJudge(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	w := func(id int64, server string, invoked, acked float64) ack {
		return ack{id: id, server: server, invoked: at(invoked), acked: at(acked)}
	}
	all := func(ids ...int64) map[int64]bool {
		m := map[int64]bool{}
		for _, id := range ids {
			m[id] = true
		}
		return m
	}
	for name, tc := range map[string]struct {
		acks        []ack
		present     map[int64]bool
		lost, split int
		gap         time.Duration
	}{
		"a clean failover": {
			[]ack{w(1, "a/1", 0, 0.1), w(2, "a/1", 0.1, 0.2), w(3, "b/2", 0.3, 5.2), w(4, "b/2", 5.2, 5.3)},
			all(1, 2, 3, 4), 0, 0, 5 * time.Second},
		"a write of the old primary in flight across the failover, acknowledged late": {
			[]ack{w(1, "a/1", 0, 0.1), w(2, "b/2", 1, 1.1), w(3, "a/1", 0.5, 1.5)},
			all(1, 2, 3), 0, 0, time.Second},
		"the old primary accepts a write begun after the new one's first": {
			[]ack{w(1, "a/1", 0, 0.1), w(2, "b/2", 1, 1.1), w(3, "a/1", 1.2, 1.3)},
			all(1, 2, 3), 0, 1, time.Second},
		"same timeline number on two instances is still two primaries": {
			[]ack{w(1, "a/5", 0, 0.1), w(2, "b/5", 1, 1.1), w(3, "a/5", 1.2, 1.3)},
			all(1, 2, 3), 0, 1, time.Second},
		"an acknowledged write missing": {
			[]ack{w(1, "a/1", 0, 0.1), w(2, "b/2", 1, 1.1)},
			all(2), 1, 0, time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			v := judge(tc.acks, tc.present)
			if v.lost != tc.lost || len(v.splitBrain) != tc.split || v.longestGap != tc.gap {
				t.Errorf("lost %d, split brain %v, gap %s; want %d, %d, %s", v.lost, v.splitBrain, v.longestGap, tc.lost, tc.split, tc.gap)
			}
		})
	}
}

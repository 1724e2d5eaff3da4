package postgres

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFailoverTimes is the failover benchmark (`make bench-ha`), skipped
// unless HA_BENCH_ROUNDS is set: three instances under write load through
// the read-write front, the primary lost HA_BENCH_ROUNDS times (its
// container killed: the Lease must expire) and as many times stopped as a
// deleted pod is (SIGTERM: it gives the Lease up), and HA_BENCH_ROUNDS
// times switched over to a replica. Each time it measures the
// write unavailability (the longest time between two acknowledged writes)
// and the acknowledged writes lost. With HA_BENCH_SCALE, the database is
// first filled by pgbench at that scale and pgbench runs through the front
// all along, so that promotions replay a backlog and rejoins rewind under
// load. With HA_BENCH_DOC (file names, space-separated) it writes the
// figures into each between the markers of its kind: "failover figures",
// or "failover figures under load" with HA_BENCH_SCALE.
func TestFailoverTimes(t *testing.T) {
	rounds, scale := 0, 0
	if _, err := fmt.Sscan(os.Getenv("HA_BENCH_ROUNDS"), &rounds); err != nil || rounds < 1 {
		t.Skip("HA_BENCH_ROUNDS is not set: run make bench-ha")
	}
	if s := os.Getenv("HA_BENCH_SCALE"); s != "" {
		if _, err := fmt.Sscan(s, &scale); err != nil || scale < 0 {
			t.Fatalf("HA_BENCH_SCALE=%q: want a pgbench scale, 0 for none", s)
		}
	}
	ha := startHA(t, nil)
	c, pods, conninfo, lease := ha.c, ha.pods, ha.conninfo, ha.lease
	var bench *pgbenchLoad
	marker := "failover figures"
	if scale > 0 {
		bench, marker = ha.startPgbench(t, scale), "failover figures under load"
	}

	type figures struct {
		gaps []time.Duration
		lost int
	}
	measure := func(how string, move func(primary *pod, others []*pod)) figures {
		var f figures
		for i := range rounds {
			primary := c.waitPrimary(t, pods, 30*time.Second)
			others := without(pods, primary)
			w := startWriters(t, conninfo, ha.anyWritable, 4)
			w.waitAcks(t, 200, 30*time.Second)
			move(primary, others)
			c.waitPrimary(t, others, 4*lease)
			w.waitAcks(t, 200, 30*time.Second)
			v := w.check(t, conninfo)
			if len(v.splitBrain) > 0 {
				t.Errorf("%s, round %d: split brain: %v", how, i+1, v.splitBrain[0])
			}
			t.Logf("%s, round %d: primary %s, write gap %s, %d of %d acknowledged writes lost", how, i+1, primary.name,
				v.longestGap.Round(time.Millisecond), v.lost, v.acked)
			f.gaps, f.lost = append(f.gaps, v.longestGap), f.lost+v.lost
			if !primary.running() {
				primary.start(t)
			}
			c.healthy(t, pods)
		}
		return f
	}
	killed := measure("container killed", func(p *pod, _ []*pod) { p.killContainer(t) })
	stopped := measure("pod deleted (SIGTERM)", func(p *pod, _ []*pod) { p.stop(t) })
	switched := measure("switchover", func(_ *pod, others []*pod) { c.requestSwitchover(t, others[0]) })
	if switched.lost > 0 {
		t.Errorf("a switchover lost %d acknowledged writes", switched.lost)
	}

	load := "no other load"
	if bench != nil {
		load = bench.stop(t)
	}
	// The nearest-rank percentiles: with 20 rounds the p99 is the largest.
	row := func(how string, f figures) string {
		slices.Sort(f.gaps)
		at := func(p float64) string {
			return f.gaps[max(int(math.Ceil(p*float64(len(f.gaps)))), 1)-1].Round(10 * time.Millisecond).String()
		}
		return fmt.Sprintf("| %s | %d | %s | %s | %s | %s | %d |", how, len(f.gaps), at(0), at(0.5), at(0.99), at(1), f.lost)
	}
	table := fmt.Sprintf("Measured by `make bench-ha` on %s, PostgreSQL %d, default Lease of %s, asynchronous replicas, four writers, %s:\n\n"+
		"| primary moved by | rounds | write gap min | p50 | p99 | max | acknowledged writes lost |\n|---|---|---|---|---|---|---|\n%s\n%s\n%s\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), c.srv.major, lease, load, row("container killed (the Lease expires)", killed),
		row("pod deleted (SIGTERM: the Lease is given up)", stopped), row("switchover (the Lease is handed over)", switched))
	t.Log("\n" + table)
	for doc := range strings.FieldsSeq(os.Getenv("HA_BENCH_DOC")) {
		if err := splice(doc, "<!-- "+marker+" -->", "<!-- end of "+marker+" -->", table); err != nil {
			t.Fatal(err)
		}
	}
}

// splice replaces what stands between two markers of a file.
func splice(path, begin, end, content string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		return fmt.Errorf("%s lacks the markers %s and %s", path, begin, end)
	}
	return os.WriteFile(path, []byte(s[:i+len(begin)]+"\n"+content+s[j:]), 0o644)
}

// pgbenchLoad is pgbench running through the front, started again whenever
// it ends (a failover aborts its clients), until stopped.
type pgbenchLoad struct {
	ha      haCluster
	desc    string // the database it runs on
	start   time.Time
	history int64 // pgbench_history's rows when it started
	cancel  context.CancelFunc
	done    chan struct{}
}

// startPgbench fills the application's database with pgbench at scale
// (through the front, as its user), waits until every replica has
// replayed it, and starts the load: four clients on two threads, the
// TPC-B-like script.
func (ha haCluster) startPgbench(t *testing.T, scale int) *pgbenchLoad {
	t.Helper()
	c := ha.c
	began := time.Now()
	if out, err := c.run(context.Background(), c.baseEnv(), "pgbench", "-i", "-q", "-s", strconv.Itoa(scale), ha.conninfo); err != nil {
		t.Fatalf("pgbench -i -s %d: %v\n%s", scale, err, out)
	}
	primary := c.waitPrimary(t, ha.pods, 30*time.Second)
	su := primary.socket("postgres", "postgres")
	bytes, _ := strconv.ParseInt(c.query(t, ha.conninfo, "", "SELECT pg_database_size(current_database())"), 10, 64)
	end := c.query(t, su, "", "CHECKPOINT", "SELECT pg_current_wal_lsn()")
	eventually(t, 5*time.Minute, "every replica has replayed pgbench's tables", func() (bool, string) {
		out, err := c.psql(su, "", fmt.Sprintf("SELECT count(*) FROM pg_stat_replication WHERE application_name <> 'mydatabase_fence' AND replay_lsn >= '%s'", end))
		return err == nil && out == fmt.Sprint(len(ha.pods)-1), out
	})
	t.Logf("pgbench -i -s %d: a database of %s, replicas caught up, in %s", scale, mib(bytes), time.Since(began).Round(time.Second))

	ctx, cancel := context.WithCancel(context.Background())
	l := &pgbenchLoad{ha: ha, cancel: cancel, done: make(chan struct{}), start: time.Now(),
		desc: fmt.Sprintf("pgbench `-c 4 -j 2` at scale %d (a database of %s) through the front all along", scale, mib(bytes))}
	l.history, _ = strconv.ParseInt(c.query(t, ha.conninfo, "", "SELECT count(*) FROM pgbench_history"), 10, 64)
	go func() {
		defer close(l.done)
		for ctx.Err() == nil {
			// Its clients abort when the primary goes; a new run connects
			// to the next one through the front.
			_, _ = c.run(ctx, c.baseEnv(), "pgbench", "-n", "-c", "4", "-j", "2", "-T", "3600", ha.conninfo)
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-l.done })
	return l
}

// stop ends the load and says what it was: the database and the
// transactions per second the primaries committed on average (what
// pgbench_history holds now, so without what failovers lost).
func (l *pgbenchLoad) stop(t *testing.T) string {
	t.Helper()
	l.cancel()
	<-l.done
	elapsed := time.Since(l.start)
	rows, _ := strconv.ParseInt(l.ha.c.query(t, l.ha.conninfo, "", "SELECT count(*) FROM pgbench_history"), 10, 64)
	return fmt.Sprintf("%s, %.0f transactions/s on average", l.desc, float64(rows-l.history)/elapsed.Seconds())
}

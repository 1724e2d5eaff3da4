package postgres

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
)

// TestPoolerFigures measures the pooler (make bench-pooler): pgbench
// through PgBouncer against pgbench straight to the server, in the same
// run, alternating, both over TLS with verify-full; then a storm of 1,000
// clients through the pooler onto a server of max_connections 100, and the
// same storm straight to the server. With POOLER_BENCH_DOC (file names,
// space-separated) it writes the figures between the markers of each.
func TestPoolerFigures(t *testing.T) {
	seconds, err := strconv.Atoi(os.Getenv("POOLER_BENCH_SECONDS"))
	if err != nil || seconds < 1 {
		t.Skip("POOLER_BENCH_SECONDS is not set: run make bench-pooler")
	}
	pc := startPooled(t, 1, map[string]string{"max_connections": "100"}, databasev1alpha1.MyDatabasePoolerSpec{
		PoolMode:  databasev1alpha1.PoolModeTransaction,
		PgBouncer: databasev1alpha1.PgBouncerSettings{DefaultPoolSize: ptr.To(int32(20)), MaxClientConnections: ptr.To(int32(1100))},
	})
	c := pc.c
	env := append(c.baseEnv(), "PGPASSWORD="+pc.password)
	direct := fmt.Sprintf("host=localhost port=%d user=%s dbname=%s sslmode=verify-full sslrootcert=%s connect_timeout=10",
		pc.primary.port, pc.user, pc.dbname, filepath.Join(pc.pod.dir, "tls", contract.PoolerServerCAKey))
	through := strings.Replace(pc.login(pc.user, "-"), " password=-", "", 1)
	// The pooler reloads into transaction mode once its manager has read
	// the configuration: wait for PgBouncer to answer through it.
	eventually(t, 30*time.Second, "a query through the pooler", func() (bool, string) {
		out, err := c.psql(through, pc.password, "SELECT 1")
		return err == nil, out
	})
	pgbench := func(ctx context.Context, args ...string) (string, error) {
		return c.run(ctx, env, append([]string{"pgbench"}, args...)...)
	}
	const scale = 10
	if out, err := pgbench(context.Background(), "-i", "-q", "-s", strconv.Itoa(scale), direct); err != nil {
		t.Fatalf("pgbench -i: %v\n%s", err, out)
	}

	type result struct {
		tps            float64
		p50, p99, maxL time.Duration
		failed         int
	}
	const clients = 16
	logs := pgbenchLogs(t, c)
	run := func(name, conninfo string, round, clients int, extra ...string) result {
		t.Helper()
		prefix := filepath.Join(logs, fmt.Sprintf("%s-%d", name, round))
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(seconds+60)*time.Second)
		defer cancel()
		args := append([]string{"-c", strconv.Itoa(clients), "-j", "2", "-T", strconv.Itoa(seconds), "-M", "simple",
			"-l", "--log-prefix=" + prefix}, extra...)
		out, err := pgbench(ctx, append(args, conninfo)...)
		if err != nil {
			t.Fatalf("pgbench %s: %v\n%s", name, err, out)
		}
		var r result
		if m := regexp.MustCompile(`tps = ([0-9.]+) \(without initial`).FindStringSubmatch(out); m != nil {
			r.tps, _ = strconv.ParseFloat(m[1], 64)
		}
		if m := regexp.MustCompile(`number of failed transactions: (\d+)`).FindStringSubmatch(out); m != nil {
			r.failed, _ = strconv.Atoi(m[1])
		}
		lat := pgbenchLatencies(t, prefix)
		if len(lat) == 0 || r.tps == 0 {
			t.Fatalf("pgbench %s reported nothing:\n%s", name, out)
		}
		r.p50, r.p99, r.maxL = lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
		return r
	}
	// A B A B: each side twice, so neither gets only the warm or the cold
	// half of the run; as fast as they go, then at an equal fixed rate
	// (below what either reaches), where the latencies compare the hop
	// the pooler adds rather than the CPU it takes from the rest on two
	// cores, and at a light rate of few clients, where the CPU is mostly
	// idle and what is left is the hop itself.
	const rate, lightRate, lightClients = 800, 100, 4
	var directs, pooled, directsAt, pooledAt, directsLight, pooledLight []result
	for round := range 2 {
		directs = append(directs, run("direct", direct, round, clients))
		pooled = append(pooled, run("pooler", through, round, clients))
		directsAt = append(directsAt, run("direct-rate", direct, round, clients, "-R", strconv.Itoa(rate)))
		pooledAt = append(pooledAt, run("pooler-rate", through, round, clients, "-R", strconv.Itoa(rate)))
		directsLight = append(directsLight, run("direct-light", direct, round, lightClients, "-R", strconv.Itoa(lightRate)))
		pooledLight = append(pooledLight, run("pooler-light", through, round, lightClients, "-R", strconv.Itoa(lightRate)))
	}
	best := func(rs []result) result { // the round of the lower p99
		return slices.MinFunc(rs, func(a, b result) int { return int(a.p99 - b.p99) })
	}
	d, p, dr, pr, dl, pl := best(directs), best(pooled), best(directsAt), best(pooledAt), best(directsLight), best(pooledLight)

	// The storm: 1,000 clients through the pooler onto max_connections 100.
	storm := func(conninfo string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		return pgbench(ctx, "-c", "1000", "-j", "2", "-T", "15", "-S", "-M", "simple", conninfo)
	}
	stormOut, err := storm(through)
	if err != nil || !strings.Contains(stormOut, "number of clients: 1000") || !strings.Contains(stormOut, "number of failed transactions: 0") {
		t.Fatalf("1,000 clients through the pooler: %v\n%s", err, stormOut)
	}
	stormTPS := regexp.MustCompile(`tps = ([0-9.]+) \(without initial`).FindStringSubmatch(stormOut)
	directStorm, directErr := storm(direct)
	refused := "all served (the server was not the limit)"
	if directErr != nil {
		refused = "pgbench failed"
		if m := regexp.MustCompile(`FATAL: +(.*)`).FindStringSubmatch(directStorm); m != nil {
			refused += ": `" + strings.TrimSpace(m[1]) + "`"
		}
	}

	ratio := func(a, b time.Duration) float64 { return float64(a) / float64(b) }
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }
	table := fmt.Sprintf("Measured by `make bench-pooler` on %s: PostgreSQL %d and PgBouncer 1.18 (transaction mode, pool size 20) as processes on the same 2-core machine, "+
		"pgbench scale %d, `-c %d -j 2 -T %d -M simple`, every connection TLS with verify-full (through the pooler: client to PgBouncer and PgBouncer to the server); "+
		"two rounds of each, alternating, the round of the lower p99 shown:\n\n"+
		"| | TPS | latency p50 | p99 | max | failed |\n|---|---|---|---|---|---|\n"+
		"| straight to the server, as fast as it goes | %.0f | %s | %s | %s | %d |\n"+
		"| through the pooler, as fast as it goes | %.0f | %s | %s | %s | %d |\n"+
		"| pooler / direct | %.2f× | %.2f× | %.2f× | | |\n"+
		"| straight to the server, %d TPS (`-R %d`) | %.0f | %s | %s | %s | %d |\n"+
		"| through the pooler, %d TPS | %.0f | %s | %s | %s | %d |\n"+
		"| **pooler / direct at equal load** | | %.2f× | **%.2f×** (goal ≤ 1.15×) | | |\n"+
		"| straight to the server, %d TPS of %d clients | %.0f | %s | %s | %s | %d |\n"+
		"| through the pooler, %d TPS of %d clients | %.0f | %s | %s | %s | %d |\n"+
		"| pooler / direct at a light load | | %.2f× | %.2f× | | |\n\n"+
		"A storm of 1,000 clients (`pgbench -c 1000 -j 2 -T 15 -S`) onto `max_connections: 100`: through the pooler all 1,000 connected and served, "+
		"0 failed, %s TPS; straight to the server: %s.\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), c.srv.major, scale, clients, seconds,
		d.tps, ms(d.p50), ms(d.p99), ms(d.maxL), d.failed,
		p.tps, ms(p.p50), ms(p.p99), ms(p.maxL), p.failed,
		p.tps/d.tps, ratio(p.p50, d.p50), ratio(p.p99, d.p99),
		rate, rate, dr.tps, ms(dr.p50), ms(dr.p99), ms(dr.maxL), dr.failed,
		rate, pr.tps, ms(pr.p50), ms(pr.p99), ms(pr.maxL), pr.failed,
		ratio(pr.p50, dr.p50), ratio(pr.p99, dr.p99),
		lightRate, lightClients, dl.tps, ms(dl.p50), ms(dl.p99), ms(dl.maxL), dl.failed,
		lightRate, lightClients, pl.tps, ms(pl.p50), ms(pl.p99), ms(pl.maxL), pl.failed,
		ratio(pl.p50, dl.p50), ratio(pl.p99, dl.p99),
		func() string {
			if stormTPS == nil {
				return "?"
			}
			f, _ := strconv.ParseFloat(stormTPS[1], 64)
			return fmt.Sprintf("%.0f", f)
		}(), refused)
	t.Log("\n" + table)
	for doc := range strings.FieldsSeq(os.Getenv("POOLER_BENCH_DOC")) {
		if err := splice(doc, "<!-- pooler figures -->", "<!-- end of pooler figures -->", table); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPoolerSwitchoverFigures measures a switchover under pgbench (make
// bench-pooler): through a pooler in transaction mode, which pauses, and
// straight through the -rw Service (here the front), each at a fixed rate
// with a switchover in the middle: the clients that pgbench lost (it
// aborts a client on its first error) and the longest transaction. With
// POOLER_BENCH_DOC it writes them between the switchover markers.
func TestPoolerSwitchoverFigures(t *testing.T) {
	seconds, err := strconv.Atoi(os.Getenv("POOLER_BENCH_SECONDS"))
	if err != nil || seconds < 1 {
		t.Skip("POOLER_BENCH_SECONDS is not set: run make bench-pooler")
	}
	pc := startPooled(t, 2, nil, databasev1alpha1.MyDatabasePoolerSpec{PoolMode: databasev1alpha1.PoolModeTransaction})
	c := pc.c
	env := append(c.baseEnv(), "PGPASSWORD="+pc.password)
	rw := fmt.Sprintf("host=localhost port=%d user=%s dbname=%s sslmode=verify-full sslrootcert=%s connect_timeout=10",
		pc.pod.server, pc.user, pc.dbname, filepath.Join(pc.pod.dir, "tls", contract.PoolerServerCAKey))
	through := strings.Replace(pc.login(pc.user, "-"), " password=-", "", 1)
	pgbench := func(ctx context.Context, args ...string) (string, error) {
		return c.run(ctx, env, append([]string{"pgbench"}, args...)...)
	}
	if out, err := pgbench(context.Background(), "-i", "-q", "-s", "10", rw); err != nil {
		t.Fatalf("pgbench -i: %v\n%s", err, out)
	}
	logs := pgbenchLogs(t, c)
	const clients, rate = 8, 400
	duration := 3 * seconds / 2
	type result struct {
		transactions, aborted int
		p99, maxL             time.Duration
	}
	// across runs pgbench through conninfo while the primary switches
	// over to target, a third of the way in.
	across := func(name, conninfo string, target *pod) result {
		t.Helper()
		prefix := filepath.Join(logs, name)
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(duration+60)*time.Second)
		defer cancel()
		type done struct {
			out string
			err error
		}
		finished := make(chan done, 1)
		go func() {
			out, err := pgbench(ctx, "-c", strconv.Itoa(clients), "-j", "2", "-T", strconv.Itoa(duration), "-R", strconv.Itoa(rate),
				"-M", "simple", "-l", "--log-prefix="+prefix, conninfo)
			finished <- done{out, err}
		}()
		time.Sleep(time.Duration(duration) * time.Second / 3)
		c.requestSwitchover(t, target)
		d := <-finished
		var r result
		r.aborted = len(regexp.MustCompile(`client \d+ (script \d+ )?aborted`).FindAllString(d.out, -1))
		if d.err != nil && r.aborted == 0 {
			t.Fatalf("pgbench %s: %v\n%s", name, d.err, d.out)
		}
		lat := pgbenchLatencies(t, prefix)
		if len(lat) == 0 {
			t.Fatalf("pgbench %s logged no transaction:\n%s", name, d.out)
		}
		r.transactions, r.p99, r.maxL = len(lat), lat[len(lat)*99/100], lat[len(lat)-1]
		return r
	}
	pooled := across("pooler", through, pc.pods[1])
	direct := across("direct", rw, pc.pods[0])
	if pooled.aborted != 0 {
		t.Errorf("through the pooler, pgbench lost %d of %d clients across the switchover; want none", pooled.aborted, clients)
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
	table := fmt.Sprintf("Measured by `make bench-pooler` on %s: a switchover a third of the way into `pgbench -c %d -j 2 -T %d -R %d -M simple` "+
		"(TPC-B, scale 10; PostgreSQL %d, two servers, PgBouncer 1.18 in transaction mode; the same 2-core machine); pgbench ends a client at its first error:\n\n"+
		"| pgbench through | transactions | clients lost | latency p99 | longest transaction |\n|---|---|---|---|---|\n"+
		"| the pooler (it pauses through the switchover) | %d | **%d** of %d | %s | %s |\n"+
		"| the `-rw` Service, no pooler | %d | %d of %d | %s | %s |\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), clients, duration, rate, c.srv.major,
		pooled.transactions, pooled.aborted, clients, ms(pooled.p99), ms(pooled.maxL),
		direct.transactions, direct.aborted, clients, ms(direct.p99), ms(direct.maxL))
	t.Log("\n" + table)
	for doc := range strings.FieldsSeq(os.Getenv("POOLER_BENCH_DOC")) {
		if err := splice(doc, "<!-- pooler switchover figures -->", "<!-- end of pooler switchover figures -->", table); err != nil {
			t.Fatal(err)
		}
	}
}

// pgbenchLatencies reads the transaction logs of pgbench -l
// --log-prefix=prefix: each transaction's latency, sorted.
func pgbenchLatencies(t *testing.T, prefix string) []time.Duration {
	t.Helper()
	var lat []time.Duration
	files, _ := filepath.Glob(prefix + ".*")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(b)) {
			// client_id transaction_no time(us) script_no time_epoch time_us
			if fields := strings.Fields(line); len(fields) >= 3 {
				us, _ := strconv.Atoi(fields[2])
				lat = append(lat, time.Duration(us)*time.Microsecond)
			}
		}
	}
	slices.Sort(lat)
	return lat
}

// pgbenchLogs makes a directory for pgbench's transaction logs, where the
// postgres OS user, which runs pgbench, may write.
func pgbenchLogs(t *testing.T, c *cluster) string {
	t.Helper()
	logs := filepath.Join(c.base, "pgbench-logs")
	if err := os.Mkdir(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(logs, c.user.uid, c.user.gid); err != nil {
		t.Fatal(err)
	}
	return logs
}

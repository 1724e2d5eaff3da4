package postgres

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
)

// customQueries is the ConfigMap of spec.monitoring.customQueriesConfigMap
// the test gives the pods.
const customQueries = `
pg_settings_test:
  query: "SELECT name, setting::float8 AS value FROM pg_settings WHERE name = 'max_connections'"
  metrics:
    - name:
        usage: LABEL
        description: the setting
    - value:
        usage: GAUGE
        description: its value
test_primary_only:
  query: "SELECT 1 AS one"
  primary: true
  metrics:
    - one:
        usage: COUNTER
        description: runs on the primary only
`

// TestMetrics runs a primary and a replica with
// spec.monitoring.customQueriesConfigMap, on every installed major, and
// scrapes their instance managers' /metrics as Prometheus does:
//   - every metric of the README's Monitoring table is there, with a
//     plausible value, on the primary and on the replica (each in its
//     role), and no other; a CHECKPOINT increments
//     checkpoints_requested_total;
//   - with the replica's replay paused while the primary writes, the lag
//     grows in bytes on both sides and in seconds on the replica; after
//     the resume it returns to 0 (MYDB_METRICS_SVG=path draws it);
//   - the custom queries run, the primary-only one only there; a broken
//     queries.yaml sets custom_queries_ok 0 and nothing else changes;
//   - a server that does not answer (stopped with SIGSTOP) gives up 0
//     with HTTP 200, within the scrape timeout;
//   - a real Prometheus (hack/prometheus.sh) scrapes both, loads the
//     alerting rules, and evaluates every expression of the rules and of
//     the Grafana dashboard without an error.
func TestMetrics(t *testing.T) {
	for _, srv := range findServers(t) {
		t.Run(fmt.Sprintf("postgres-%d", srv.major), func(t *testing.T) { testMetrics(t, srv) })
	}
}

func testMetrics(t *testing.T, srv server) {
	db := newDatabase(srv.major, nil)
	db.Spec.Monitoring.CustomQueriesConfigMap = "shop-queries"
	password, err := specs.RandomPassword()
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, srv, db, specs.CredentialsSecret(db, password))
	c.configMaps["shop-queries"] = map[string]string{specs.CustomQueriesKey: customQueries}
	ports := freePorts(t, 2)
	primary, replica := c.newPod(0, ports[0]), c.newPod(1, ports[1])
	c.logsOnFailure(t)
	primary.start(t)
	primary.waitReady(t)
	replica.start(t)
	replica.waitReady(t)
	waitStreaming(t, c, primary, replica)
	c.query(t, primary.socket("postgres", db.Spec.DatabaseName), "",
		"CREATE TABLE lag (id serial PRIMARY KEY, pad text)", "INSERT INTO lag (pad) SELECT repeat('x', 100) FROM generate_series(1, 1000)")

	t.Run("every documented metric on the primary and the replica", func(t *testing.T) {
		documented := documentedMetrics(t)
		eventually(t, 30*time.Second, "the replica caught up", func() (bool, string) {
			p, r := scrape(t, primary), scrape(t, replica)
			lag := value(p, "mydatabase_pg_replication_lag_bytes", "replica", replica.name)
			return lag == 0 && value(r, "mydatabase_pg_replica_replay_lag_bytes") == 0, fmt.Sprintf("primary's view %v", lag)
		})
		names := map[string]bool{}
		for _, m := range documented {
			names[m.name] = true
		}
		for _, pod := range []*pod{primary, replica} {
			families := scrape(t, pod)
			isPrimary := pod == primary
			for name := range families {
				if strings.HasPrefix(name, "mydatabase_pg_") && !names[name] {
					t.Errorf("%s: %s is not in the README's Monitoring table", pod.name, name)
				}
			}
			for _, m := range documented {
				f, ok := families[m.name]
				switch {
				case m.absentWhy != "":
					if ok {
						t.Errorf("%s: %s is there, though the README says it is absent %s", pod.name, m.name, m.absentWhy)
					}
					continue
				case m.primaryOnly && !isPrimary, m.replicaOnly && isPrimary:
					if ok {
						t.Errorf("%s: %s is there, though the README says only on the other role", pod.name, m.name)
					}
					continue
				case !ok:
					t.Errorf("%s: no %s", pod.name, m.name)
					continue
				}
				if err := plausible(m.name, f, isPrimary, replica, srv.major); err != nil {
					t.Errorf("%s: %s: %v", pod.name, m.name, err)
				}
			}
		}
	})

	t.Run("a CHECKPOINT counts as requested, whichever view holds it", func(t *testing.T) {
		// pg_stat_bgwriter before 17, pg_stat_checkpointer from 17; the
		// counters are updated at the end of the checkpoint.
		before := value(scrape(t, primary), "mydatabase_pg_checkpoints_requested_total")
		c.query(t, primary.socket("postgres", "postgres"), "", "CHECKPOINT")
		eventually(t, 10*time.Second, "checkpoints_requested_total to grow", func() (bool, string) {
			after := value(scrape(t, primary), "mydatabase_pg_checkpoints_requested_total")
			return after >= before+1, fmt.Sprintf("%v -> %v", before, after)
		})
	})

	var samples []lagSample
	t.Run("replication lag grows while replay is paused and returns to 0", func(t *testing.T) {
		start := time.Now()
		sample := func() lagSample {
			p, r := scrape(t, primary), scrape(t, replica)
			s := lagSample{at: time.Since(start).Seconds(),
				primaryBytes: value(p, "mydatabase_pg_replication_lag_bytes", "replica", replica.name),
				replicaBytes: value(r, "mydatabase_pg_replica_replay_lag_bytes"),
				replicaSecs:  value(r, "mydatabase_pg_replica_replay_lag_seconds"),
				paused:       value(r, "mydatabase_pg_replica_replay_paused")}
			samples = append(samples, s)
			return s
		}
		for range 4 {
			sample()
			time.Sleep(250 * time.Millisecond)
		}
		c.query(t, replica.socket("postgres", "postgres"), "", "SELECT pg_wal_replay_pause()")
		var first lagSample
		for i := range 8 {
			c.query(t, primary.socket("postgres", db.Spec.DatabaseName), "",
				"INSERT INTO lag (pad) SELECT repeat('y', 100) FROM generate_series(1, 2000)")
			time.Sleep(500 * time.Millisecond)
			if s := sample(); i == 0 {
				first = s
			}
		}
		paused := samples[len(samples)-1]
		if paused.paused != 1 {
			t.Errorf("replica_replay_paused %v while paused, want 1", paused.paused)
		}
		if !(first.primaryBytes > 0 && paused.primaryBytes > first.primaryBytes) {
			t.Errorf("the primary's replication_lag_bytes went %v -> %v while the replica's replay is paused: want > 0 and growing",
				first.primaryBytes, paused.primaryBytes)
		}
		if !(first.replicaBytes > 0 && paused.replicaBytes > first.replicaBytes) {
			t.Errorf("the replica's replay_lag_bytes went %v -> %v while paused: want > 0 and growing", first.replicaBytes, paused.replicaBytes)
		}
		if !(paused.replicaSecs > first.replicaSecs && paused.replicaSecs > 0) {
			t.Errorf("the replica's replay_lag_seconds went %v -> %v while paused: want > 0 and growing", first.replicaSecs, paused.replicaSecs)
		}
		c.query(t, replica.socket("postgres", "postgres"), "", "SELECT pg_wal_replay_resume()")
		eventually(t, 30*time.Second, "the lag back to 0", func() (bool, string) {
			s := sample()
			time.Sleep(250 * time.Millisecond)
			return s.primaryBytes == 0 && s.replicaBytes == 0 && s.replicaSecs == 0 && s.paused == 0, fmt.Sprintf("%+v", s)
		})
		for range 4 {
			sample()
			time.Sleep(250 * time.Millisecond)
		}
		if path := os.Getenv("MYDB_METRICS_SVG"); path != "" {
			if err := os.WriteFile(path, lagChart(samples, srv.major), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("wrote %s from %d scrapes", path, len(samples))
		}
	})

	t.Run("custom queries", func(t *testing.T) {
		p, r := scrape(t, primary), scrape(t, replica)
		for _, f := range []map[string]*dto.MetricFamily{p, r} {
			if v := value(f, "pg_settings_test_value", "name", "max_connections"); v != value(f, "mydatabase_pg_max_connections") {
				t.Errorf("pg_settings_test_value{name=max_connections} = %v, want max_connections", v)
			}
			if v := value(f, "mydatabase_pg_custom_queries_ok"); v != 1 {
				t.Errorf("custom_queries_ok = %v, want 1", v)
			}
		}
		if v := value(p, "test_primary_only_one"); v != 1 {
			t.Errorf("the primary's test_primary_only_one = %v, want 1", v)
		}
		if _, ok := r["test_primary_only_one"]; ok {
			t.Errorf("test_primary_only_one on the replica: it is a primary-only query")
		}
		dir := replica.hostPath(t, specs.CustomQueriesDir)
		replica.writeConfig(t, map[string]string{specs.CustomQueriesKey: "broken:\n  query: SELECT 1\n  cache_seconds: 30\n"}, dir, 0o444)
		r = scrape(t, replica)
		if v := value(r, "mydatabase_pg_custom_queries_ok"); v != 0 {
			t.Errorf("custom_queries_ok = %v with an unknown key in queries.yaml, want 0", v)
		}
		if v := value(r, "mydatabase_pg_up"); v != 1 {
			t.Errorf("up = %v with broken custom queries, want 1: the server is fine", v)
		}
		replica.writeConfig(t, map[string]string{specs.CustomQueriesKey: customQueries}, dir, 0o444)
	})

	t.Run("a real Prometheus evaluates every expression", func(t *testing.T) {
		prometheusEvaluates(t, c, primary, replica)
	})

	t.Run("a server that does not answer is up 0", func(t *testing.T) {
		pid := postmasterPID(replica.pgdata())
		if pid <= 0 {
			t.Fatal("no postmaster")
		}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = syscall.Kill(pid, syscall.SIGCONT) }()
		begin := time.Now()
		r := scrape(t, replica)
		if v := value(r, "mydatabase_pg_up"); v != 0 || len(r) != 1 {
			t.Errorf("up = %v and %d families with the server stopped, want up 0 alone", v, len(r))
		}
		t.Logf("the scrape of a stopped server took %s", time.Since(begin).Round(time.Millisecond))
		_ = syscall.Kill(pid, syscall.SIGCONT)
		eventually(t, 30*time.Second, "up 1 again", func() (bool, string) {
			v := value(scrape(t, replica), "mydatabase_pg_up")
			return v == 1, fmt.Sprint(v)
		})
	})
	replica.stop(t)
	primary.stop(t)
}

// scrape GETs a pod's /metrics and parses it as Prometheus text; any
// status but 200 fails the test.
func scrape(t *testing.T, p *pod) map[string]*dto.MetricFamily {
	t.Helper()
	client := http.Client{Timeout: 15 * time.Second}
	resp, err := client.Get("http://" + p.metrics + specs.MetricsPath)
	if err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: HTTP %d: %s", p.name, resp.StatusCode, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("%s: the metrics are not Prometheus text: %v", p.name, err)
	}
	return families
}

// value is the sample of the family's metric with the given label pairs,
// NaN when there is none.
func value(families map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	f, ok := families[name]
	if !ok {
		return math.NaN()
	}
next:
	for _, m := range f.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.Label {
				found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Untyped != nil:
			return m.Untyped.GetValue()
		}
	}
	return math.NaN()
}

// documented is a row of the README's metrics table.
type documented struct {
	name                     string
	primaryOnly, replicaOnly bool
	absentWhy                string // why it is absent here, if the README says so
}

// documentedMetrics reads the metrics table of the README's Monitoring
// section: "| `name{labels}` | both, primary or replica | meaning |".
func documentedMetrics(t *testing.T) []documented {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `(mydatabase_pg_[a-z_]+)(?:\\{[^}]*\\})?` \\| (both|primary|replica) \\|")
	rows := row.FindAllStringSubmatch(string(raw), -1)
	out := make([]documented, 0, len(rows))
	for _, m := range rows {
		d := documented{name: m[1], primaryOnly: strings.HasPrefix(m[2], "primary"), replicaOnly: strings.HasPrefix(m[2], "replica")}
		if d.name == "mydatabase_pg_archiver_last_archive_age_seconds" {
			d.absentWhy = "while nothing was archived (archive_mode is off)"
		}
		out = append(out, d)
	}
	if len(out) < 33 {
		t.Fatalf("the README's Monitoring table lists %d mydatabase_pg_ metrics, want every one of them (33)", len(out))
	}
	return out
}

// plausible checks a metric's value against what the test knows of the
// server.
func plausible(name string, f *dto.MetricFamily, isPrimary bool, replica *pod, major int) error {
	fam := map[string]*dto.MetricFamily{name: f}
	v := value(fam, name)
	switch name {
	case "mydatabase_pg_up", "mydatabase_pg_timeline", "mydatabase_pg_custom_queries_ok":
		return want(v == 1, v, "1")
	case "mydatabase_pg_is_primary":
		return want(v == boolFloat(isPrimary), v, fmt.Sprint(boolFloat(isPrimary)))
	case "mydatabase_pg_server_version_num":
		return want(int(v)/10000 == major, v, fmt.Sprintf("%dxxxx", major))
	case "mydatabase_pg_max_connections":
		return want(v >= 100, v, ">= 100 (the default)")
	case "mydatabase_pg_connections":
		if len(f.Metric) != 6 {
			return fmt.Errorf("%d states, want the 6 of pg_stat_activity", len(f.Metric))
		}
		return nil
	case "mydatabase_pg_xact_commit_total":
		// The instance manager's own queries commit in postgres.
		v = value(fam, name, "datname", "postgres")
		return want(v > 0, v, "> 0 for postgres")
	case "mydatabase_pg_database_size_bytes":
		v = value(fam, name, "datname", "shopdb")
		return want(v > 1<<20, v, "over 1 MiB for shopdb")
	case "mydatabase_pg_replication_lag_bytes":
		v = value(fam, name, "replica", replica.name)
		return want(v == 0, v, "0 for the caught-up "+replica.name)
	case "mydatabase_pg_replication_lag_seconds":
		// replay_lag keeps the last write's delay for a while.
		v = value(fam, name, "replica", replica.name)
		return want(v >= 0 && v < 5, v, "under 5 s for the caught-up "+replica.name)
	case "mydatabase_pg_replication_streaming":
		v = value(fam, name, "replica", replica.name)
		return want(v == 1, v, "1 for "+replica.name)
	case "mydatabase_pg_replication_slot_active":
		v = value(fam, name, "slot", memberSlot(replica))
		return want(v == 1, v, "1 for "+memberSlot(replica))
	case "mydatabase_pg_archiving_enabled", "mydatabase_pg_archiver_archived_total", "mydatabase_pg_archiver_last_archive_timestamp_seconds",
		"mydatabase_pg_replica_replay_paused", "mydatabase_pg_replica_replay_lag_bytes", "mydatabase_pg_replica_replay_lag_seconds":
		return want(v == 0, v, "0")
	case "mydatabase_pg_wal_bytes":
		return want(v >= 16<<20, v, "at least one 16 MiB segment")
	case "mydatabase_pg_buffers_alloc_total":
		// A replica's count reaches pg_stat_bgwriter only once its
		// background writer reports: it read 0 once, just started (CI at
		// 6dd9ad4).
		if !isPrimary {
			return want(v >= 0, v, ">= 0")
		}
		return want(v > 0, v, "> 0")
	}
	return want(v >= 0, v, ">= 0")
}

func want(ok bool, got float64, what string) error {
	if ok {
		return nil
	}
	return fmt.Errorf("%v, want %s", got, what)
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

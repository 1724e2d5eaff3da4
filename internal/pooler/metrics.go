package pooler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// The metrics: PgBouncer's SHOW POOLS and SHOW STATS, read on every
// scrape from its admin console (Config.console).

const prefix = "pgbouncer_"

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prefix+name, help, labels, nil)
}

var (
	upDesc = desc("up", "1 when this scrape read PgBouncer's pools and statistics; 0 otherwise, with no other metric.")
	// SHOW POOLS, by database and user.
	poolGauges = []struct {
		column string
		desc   *prometheus.Desc
	}{
		{"cl_active", desc("pool_client_active_connections", "Clients linked to a server connection, or idle with no query waiting (SHOW POOLS cl_active).", "database", "user")},
		{"cl_waiting", desc("pool_client_waiting_connections", "Clients that sent a query and wait for a server connection (SHOW POOLS cl_waiting).", "database", "user")},
		{"sv_active", desc("pool_server_active_connections", "Server connections linked to a client (SHOW POOLS sv_active).", "database", "user")},
		{"sv_idle", desc("pool_server_idle_connections", "Server connections unused and ready (SHOW POOLS sv_idle).", "database", "user")},
		{"sv_used", desc("pool_server_used_connections", "Server connections idle long enough to need a check before use (SHOW POOLS sv_used).", "database", "user")},
		{"sv_login", desc("pool_server_login_connections", "Server connections logging in (SHOW POOLS sv_login).", "database", "user")},
	}
	// The pooler manager's pauses (pause.go).
	pausedDesc           = desc("paused", "1 while the pooler manager holds PgBouncer paused, by hand (reason=\"hand\") or for a switchover (reason=\"switchover\").", "reason")
	switchoverPausesDesc = desc("switchover_pauses_total", "Pauses for a switchover of the primary, ended.")
	switchoverPausedDesc = desc("switchover_paused_seconds_total", "Time PgBouncer was paused for switchovers, those ended.")
	maxWaitDesc          = desc("pool_client_maxwait_seconds", "How long the oldest waiting client has waited (SHOW POOLS maxwait and maxwait_us).", "database", "user")
	// SHOW STATS, by database, counters since PgBouncer started.
	statCounters = []struct {
		column string
		scale  float64
		desc   *prometheus.Desc
	}{
		{"total_xact_count", 1, desc("transactions_total", "Transactions pooled (SHOW STATS total_xact_count).", "database")},
		{"total_query_count", 1, desc("queries_total", "Queries pooled (SHOW STATS total_query_count).", "database")},
		{"total_received", 1, desc("received_bytes_total", "Bytes received from clients (SHOW STATS total_received).", "database")},
		{"total_sent", 1, desc("sent_bytes_total", "Bytes sent to clients (SHOW STATS total_sent).", "database")},
		{"total_xact_time", 1e-6, desc("transaction_seconds_total", "Time spent in transactions, idle in transaction included (SHOW STATS total_xact_time).", "database")},
		{"total_query_time", 1e-6, desc("query_seconds_total", "Time spent in queries (SHOW STATS total_query_time).", "database")},
		{"total_wait_time", 1e-6, desc("client_wait_seconds_total", "Time clients spent waiting for a server connection (SHOW STATS total_wait_time).", "database")},
	}
)

// newConsolePassword is the console user's password for this run.
func newConsolePassword() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b) // crypto/rand never fails on Linux
	return hex.EncodeToString(b)
}

// collector reads PgBouncer's console on every scrape.
type collector struct{ c Config }

func (*collector) Describe(chan<- *prometheus.Desc) {}

func (m *collector) Collect(ch chan<- prometheus.Metric) {
	if ps := m.c.pauses; ps != nil {
		ps.mu.Lock()
		ch <- prometheus.MustNewConstMetric(pausedDesc, prometheus.GaugeValue, boolValue(ps.byHand), "hand")
		ch <- prometheus.MustNewConstMetric(pausedDesc, prometheus.GaugeValue, boolValue(ps.switchover), "switchover")
		ch <- prometheus.MustNewConstMetric(switchoverPausesDesc, prometheus.CounterValue, float64(ps.count))
		ch <- prometheus.MustNewConstMetric(switchoverPausedDesc, prometheus.CounterValue, ps.total.Seconds())
		ps.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	metrics, err := m.scrape(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, 1)
	for _, metric := range metrics {
		ch <- metric
	}
}

// scrape reads SHOW POOLS and SHOW STATS. The console speaks only the
// simple query protocol.
func (m *collector) scrape(ctx context.Context) ([]prometheus.Metric, error) {
	conn, err := m.c.console(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var out []prometheus.Metric
	pools, err := show(ctx, conn, "POOLS")
	if err != nil {
		return nil, err
	}
	for _, row := range pools {
		labels := []string{row["database"], row["user"]}
		for _, g := range poolGauges {
			out = append(out, prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, number(row[g.column]), labels...))
		}
		wait := number(row["maxwait"]) + number(row["maxwait_us"])/1e6
		out = append(out, prometheus.MustNewConstMetric(maxWaitDesc, prometheus.GaugeValue, wait, labels...))
	}
	stats, err := show(ctx, conn, "STATS")
	if err != nil {
		return nil, err
	}
	for _, row := range stats {
		for _, s := range statCounters {
			out = append(out, prometheus.MustNewConstMetric(s.desc, prometheus.CounterValue, number(row[s.column])*s.scale, row["database"]))
		}
	}
	return out, nil
}

// show runs SHOW what and returns its rows by column name: PgBouncer adds
// columns between versions, and the names are what stays.
func show(ctx context.Context, conn *pgx.Conn, what string) ([]map[string]string, error) {
	rows, err := conn.Query(ctx, "SHOW "+what)
	if err != nil {
		return nil, fmt.Errorf("SHOW %s: %w", what, err)
	}
	defer rows.Close()
	var out []map[string]string
	for rows.Next() {
		values := rows.RawValues()
		row := make(map[string]string, len(values))
		for i, f := range rows.FieldDescriptions() {
			row[f.Name] = string(values[i])
		}
		out = append(out, row)
	}
	return out, rows.Err()
}

func number(s string) float64 {
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

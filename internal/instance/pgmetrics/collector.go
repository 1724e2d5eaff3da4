// Package pgmetrics is the PostgreSQL exporter of the instance manager: a
// prometheus.Collector that asks the local server at every scrape, through
// a short-lived connection over its Unix socket, and serves the answers at
// /metrics.
//
// A scrape that cannot reach the server, or whose built-in queries fail,
// reports mydatabase_pg_up 0 and nothing else: never an HTTP error, so
// that Prometheus tells "the server is down" from "the target is gone".
// Every metric is named mydatabase_pg_<what>; the README's Monitoring
// section lists them.
package pgmetrics

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// Prefix starts the name of every metric of this package.
const Prefix = "mydatabase_pg_"

// Connect opens a connection to the local server as a superuser.
type Connect func(ctx context.Context) (*pgx.Conn, error)

// Collector queries the server at every scrape. Scrapes run one at a time:
// a second Prometheus scraping at the same moment waits rather than opening
// a second connection.
type Collector struct {
	connect Connect
	// queriesFile is the custom queries' file (queries.go), "" for none.
	queriesFile string
	log         func(format string, args ...any)

	mu        sync.Mutex
	lastError string // logged once, not at every scrape
}

// Timeouts of a scrape: the whole of it, and each statement. Prometheus's
// default scrape timeout is 10 s; a scrape that takes longer than
// scrapeTimeout reports up 0 well before that.
const (
	scrapeTimeout    = 5 * time.Second
	statementTimeout = "2s"
)

// NewCollector returns a Collector of the server that connect reaches.
func NewCollector(connect Connect, queriesFile string, log func(format string, args ...any)) *Collector {
	return &Collector{connect: connect, queriesFile: queriesFile, log: log}
}

// Describe sends nothing: the collector is unchecked, as the custom
// queries' metrics are known only once they ran.
func (c *Collector) Describe(chan<- *prometheus.Desc) {}

// Collect runs one scrape.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	s := &sink{}
	err := c.scrape(ctx, s)
	c.logChange(err)
	if err != nil {
		ch <- gauge(upDesc, 0)
		return
	}
	ch <- gauge(upDesc, 1)
	for _, m := range s.metrics {
		ch <- m
	}
}

// logChange logs a scrape's error when it differs from the last one, and
// the recovery.
func (c *Collector) logChange(err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg == c.lastError {
		return
	}
	if msg == "" {
		c.log("metrics: the scrape succeeds again")
	} else {
		c.log("metrics: %s", msg)
	}
	c.lastError = msg
}

func (c *Collector) scrape(ctx context.Context, s *sink) error {
	conn, err := c.connect(ctx)
	if err != nil {
		return fmt.Errorf("connecting to the server: %w", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, "SET statement_timeout = '"+statementTimeout+"'"); err != nil {
		return err
	}
	srv, err := readServer(ctx, conn, s)
	if err != nil {
		return fmt.Errorf("reading the server's state: %w", err)
	}
	for _, step := range builtins(srv) {
		if err := step.collect(ctx, conn, s); err != nil {
			return fmt.Errorf("%s: %w", step.name, err)
		}
	}
	qerr := runCustomQueries(ctx, conn, c.queriesFile, srv.primary, s)
	s.gauge(customQueriesOKDesc, boolValue(qerr == nil))
	if qerr != nil {
		// Reported through custom_queries_ok, not up: the server is fine.
		c.log("metrics: custom queries: %v", qerr)
	}
	return nil
}

// sink gathers one scrape's metrics, sent only when it succeeds.
type sink struct{ metrics []prometheus.Metric }

func (s *sink) gauge(d *prometheus.Desc, v float64, labels ...string) {
	s.metrics = append(s.metrics, prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...))
}

func (s *sink) counter(d *prometheus.Desc, v float64, labels ...string) {
	s.metrics = append(s.metrics, prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...))
}

func gauge(d *prometheus.Desc, v float64) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

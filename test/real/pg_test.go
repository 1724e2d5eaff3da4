//go:build real

package real

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// clusterDNS is the node's CoreDNS Service (hack/real-node.sh).
const clusterDNS = "10.96.0.10:53"

// resolver asks the cluster's DNS, so that the host uses the Secret's URI
// unchanged, Service name and all, as a pod would.
var resolver = &net.Resolver{
	PreferGo: true,
	Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, clusterDNS)
	},
}

// dial connects to uri from this machine, resolving its host in the
// cluster's DNS.
func dial(ctx context.Context, uri string) (*pgx.Conn, error) {
	return dialWith(ctx, uri, clusterLookup)
}

// dialWith connects to uri, resolving its host with lookup.
func dialWith(ctx context.Context, uri string, lookup pgconn.LookupFunc) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(uri)
	if err != nil {
		return nil, err
	}
	cfg.ConnectTimeout = 5 * time.Second
	cfg.LookupFunc = lookup
	return pgx.ConnectConfig(ctx, cfg)
}

// clusterLookup resolves host in the cluster's DNS.
func clusterLookup(ctx context.Context, host string) ([]string, error) {
	// In a pod the search path completes <svc>.<ns>.svc; here, do it.
	if strings.HasSuffix(host, ".svc") {
		host += ".cluster.local"
	}
	return resolver.LookupHost(ctx, host)
}

// serviceLookup is clusterLookup that asks the DNS once per host: a
// writer's, whose host is a Service whose cluster IP stays the same for
// as long as the Service does, while which server stands behind it
// changes (kube-proxy). So a write measures the way to the database, and
// not also the cluster DNS, an addon the operator neither runs nor
// changes, on every connection: one DNS answer lost costs a write its
// whole timeout.
func serviceLookup() pgconn.LookupFunc {
	var mu sync.Mutex
	known := map[string][]string{}
	return func(ctx context.Context, host string) ([]string, error) {
		mu.Lock()
		defer mu.Unlock()
		if addrs, ok := known[host]; ok {
			return addrs, nil
		}
		addrs, err := clusterLookup(ctx, host)
		if err == nil {
			known[host] = addrs
		}
		return addrs, err
	}
}

// connect dials uri and closes the connection at the end of the test.
func connect(t *testing.T, uri string) *pgx.Conn {
	t.Helper()
	conn, err := dial(t.Context(), uri)
	// A Service's new endpoint reaches kube-proxy's rules a moment after
	// its pod is ready: until then the Service refuses, as clients see.
	for deadline := time.Now().Add(15 * time.Second); errors.Is(err, syscall.ECONNREFUSED) && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		conn, err = dial(t.Context(), uri)
	}
	if err != nil {
		t.Fatalf("connecting to %s: %v", redact(uri), err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// show returns a setting of the server behind uri, on a new connection.
func show(t *testing.T, uri, setting string) string {
	t.Helper()
	var v string
	if err := connect(t, uri).QueryRow(t.Context(), "SHOW "+pgx.Identifier{setting}.Sanitize()).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// count returns the number of rows in items, on a new connection.
func count(t *testing.T, uri string) int {
	t.Helper()
	var n int
	if err := connect(t, uri).QueryRow(t.Context(), "SELECT count(*) FROM items").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// redact hides the password of a URI for messages.
func redact(uri string) string {
	cfg, err := pgx.ParseConfig(uri)
	if err != nil {
		return "(an unparsable URI)"
	}
	return cfg.User + "@" + cfg.Host + "/" + cfg.Database
}

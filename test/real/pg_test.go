//go:build real

package real

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	cfg, err := pgx.ParseConfig(uri)
	if err != nil {
		return nil, err
	}
	cfg.ConnectTimeout = 5 * time.Second
	cfg.LookupFunc = func(ctx context.Context, host string) ([]string, error) {
		// In a pod the search path completes <svc>.<ns>.svc; here, do it.
		if strings.HasSuffix(host, ".svc") {
			host += ".cluster.local"
		}
		return resolver.LookupHost(ctx, host)
	}
	return pgx.ConnectConfig(ctx, cfg)
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

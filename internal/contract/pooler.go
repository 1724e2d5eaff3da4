package contract

import (
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// What the operator says to a pooler manager (internal/pooler), which runs
// PgBouncer in a MyDatabasePooler's pods: its configuration, as JSON in the
// pooler's ConfigMap, mounted where PoolerConfigEnv says; its certificates,
// in the pooler's Secret, mounted where PoolerTLSEnv says. Both reach a
// running pod without a restart: the pooler manager reloads PgBouncer when
// either changes.

// PoolerRole is the role PgBouncer looks up clients' passwords as (its
// auth_user). It has no password: it logs in with a client certificate
// the MyDatabase's CA issued to the pooler (pg_hba.conf: cert), and may
// only run PoolerLookup.
const PoolerRole = "mydatabase_pooler"

// PoolerSchema and PoolerLookup: the function PoolerRole runs for
// PgBouncer's auth_query, which the primary's instance manager keeps in
// every database while Declared.Pooler is set (PgBouncer runs the query
// in the database the client asks for). It returns a login role's
// password verifier, never a superuser's.
const (
	PoolerSchema = "mydatabase"
	PoolerLookup = PoolerSchema + ".pooler_lookup"
)

// PoolerConfigKey is the key of the ConfigMap's Pooler JSON.
const PoolerConfigKey = "pooler.json"

// Keys of the pooler's Secret (besides tls.crt and tls.key, the
// certificate PgBouncer presents to clients, and ca.crt, the CA clients
// verify it with).
const (
	// PoolerClientCertKey and PoolerClientKeyKey: the certificate PgBouncer
	// logs in to the servers with, as PoolerRole.
	PoolerClientCertKey = "client.crt"
	PoolerClientKeyKey  = "client.key"
	// PoolerServerCAKey: the CA PgBouncer verifies the servers with.
	PoolerServerCAKey = "server-ca.crt"
)

// The pooler container's environment.
const (
	// PoolerConfigEnv is the path of the Pooler JSON.
	PoolerConfigEnv = "POOLER_CONFIG"
	// PoolerTLSEnv is the directory of the pooler's Secret.
	PoolerTLSEnv = "POOLER_TLS_DIR"
	// PoolerRunEnv is a writable directory for PgBouncer's configuration
	// and socket.
	PoolerRunEnv = "POOLER_RUN_DIR"
	// PoolerPortEnv is the port PgBouncer listens on (PoolerPort).
	PoolerPortEnv = "POOLER_PORT"
	// PoolerMetricsEnv is the address the pooler manager serves /metrics
	// on (":" + PoolerMetricsPort).
	PoolerMetricsEnv = "POOLER_METRICS_ADDRESS"
)

// PoolerPort is the port PgBouncer listens on in the pod, and
// PoolerMetricsPort the one its pooler manager serves /metrics on.
const (
	PoolerPort        = 5432
	PoolerMetricsPort = 9127
)

// Pooler is the value of PoolerConfigKey.
type Pooler struct {
	// Host and Port are where the servers are: the MyDatabase's -rw or
	// -ro Service. PgBouncer verifies the server certificate against Host.
	Host string `json:"host"`
	Port int32  `json:"port"`
	// ClientTLS is PgBouncer's client_tls_sslmode: "prefer", or "require"
	// when the MyDatabase requires TLS of its clients.
	ClientTLS string `json:"clientTLS"`
	// Settings are PgBouncer settings by PgBouncer's names (pool_mode,
	// default_pool_size, …), from the spec; the pooler manager sets
	// the rest.
	Settings map[string]string `json:"settings,omitempty"`
	// PauseOnSwitchover: the pooler manager pauses PgBouncer through
	// every switchover (PoolerSwitchoverChannel). Set for read-write
	// poolers in transaction mode: in session mode a pause would wait for
	// every client to leave.
	PauseOnSwitchover bool `json:"pauseOnSwitchover,omitempty"`
	// Paused: PgBouncer is held paused (the spec's pgbouncer.paused) until
	// it is false again.
	Paused bool `json:"paused,omitempty"`
	// ID names the pooler to the primary in its control connection's
	// application_name (PoolerApp): PoolerID of its UID.
	ID string `json:"id,omitempty"`
}

// A switchover that a pooler's clients do not see. The primary and the
// pooler managers speak through the primary's server alone, with no API
// server between them:
//
//  1. A pooler manager with PauseOnSwitchover keeps a control connection
//     to the primary as PoolerRole (its certificate), in the postgres
//     database, named PoolerApp(its ID, false), LISTENing on
//     PoolerSwitchoverChannel.
//  2. A primary asked to hand over (AnnotationSwitchoverTo), once the
//     target has caught up, NOTIFYs the channel with the target's name,
//     again on every turn while it waits; a primary that stops (its pod
//     is deleted) NOTIFYs it with "", once, an election to follow.
//  3. Each pooler manager PAUSEs PgBouncer: running transactions finish,
//     then every server connection is closed and new transactions queue.
//     It then renames its control connection PoolerApp(its ID, true).
//  4. The primary stops once every control connection it serves is named
//     paused, or after a bounded wait (a pooler that cannot pause in time
//     must not hold a switchover back). Handing the Lease over, it writes
//     how many pods of each pooler paused (AnnotationPoolersPaused).
//  5. Each pooler manager waits for a writable server other than the one
//     it paused on, through Host, and RESUMEs PgBouncer: queued
//     transactions run on the new primary. A pause is bounded too: past
//     it, or when the primary stops notifying (the switchover was called
//     off), PgBouncer resumes onto whatever Host leads to.
const (
	PoolerSwitchoverChannel = "mydatabase_switchover"
	PoolerControlApp        = "mydatabase-pooler"
	PoolerPausedApp         = "mydatabase-pooler paused"
	// PoolerProbeApp names the pooler manager's short connections that
	// look for the new primary: never a control connection.
	PoolerProbeApp = "mydatabase-pooler probe"
)

// PoolerID is the ID of the pooler whose UID is uid: its first 8
// characters, which fit any application_name (63 bytes) and tell a
// database's poolers apart.
func PoolerID(uid string) string { return uid[:min(8, len(uid))] }

// PoolerApp is the application_name of the control connection of the
// pooler id, paused or not: PoolerControlApp or PoolerPausedApp, then
// " " and id (pooler managers before IDs sent the bare names).
func PoolerApp(id string, paused bool) string {
	app := PoolerControlApp
	if paused {
		app = PoolerPausedApp
	}
	if id == "" {
		return app
	}
	return app + " " + id
}

// ParsePoolerApp reads PoolerApp: ok is false for any other name.
func ParsePoolerApp(app string) (id string, paused, ok bool) {
	for _, paused := range []bool{true, false} {
		bare := PoolerApp("", paused)
		if app == bare {
			return "", paused, true
		}
		if id, found := strings.CutPrefix(app, bare+" "); found && validPoolerID(id) {
			return id, paused, true
		}
	}
	return "", false, false
}

func validPoolerID(id string) bool {
	return id != "" && len(id) <= 8 && strings.Trim(id, "0123456789abcdef") == ""
}

// FormatPoolersPaused is the value of AnnotationPoolersPaused: how many
// pods of each pooler (by ID) paused, as id=n pairs separated by commas,
// in ID order; pods of pooler managers before IDs count as a bare n.
func FormatPoolersPaused(paused map[string]int) string {
	ids := slices.Sorted(maps.Keys(paused))
	pairs := make([]string, 0, len(ids))
	for _, id := range ids {
		if id == "" {
			pairs = append(pairs, strconv.Itoa(paused[id]))
		} else {
			pairs = append(pairs, id+"="+strconv.Itoa(paused[id]))
		}
	}
	return strings.Join(pairs, ",")
}

// ParsePoolersPaused reads FormatPoolersPaused, and the bare count
// primaries before IDs wrote; it skips what it cannot read.
func ParsePoolersPaused(value string) map[string]int {
	paused := map[string]int{}
	for pair := range strings.SplitSeq(value, ",") {
		id, count, found := strings.Cut(pair, "=")
		if !found {
			id, count = "", pair
		}
		if n, err := strconv.Atoi(count); err == nil && n > 0 && (id == "" || validPoolerID(id)) {
			paused[id] = min(paused[id], math.MaxInt-n) + n // no overflow into a negative count
		}
	}
	return paused
}

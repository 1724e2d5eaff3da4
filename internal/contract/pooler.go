package contract

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
}

// A switchover that a pooler's clients do not see. The primary and the
// pooler managers speak through the primary's server alone, with no API
// server between them:
//
//  1. A pooler manager with PauseOnSwitchover keeps a control connection
//     to the primary as PoolerRole (its certificate), in the postgres
//     database, named PoolerControlApp, LISTENing on
//     PoolerSwitchoverChannel.
//  2. A primary asked to hand over (AnnotationSwitchoverTo), once the
//     target has caught up, NOTIFYs the channel with the target's name,
//     again on every turn while it waits; a primary that stops (its pod
//     is deleted) NOTIFYs it with "", once, an election to follow.
//  3. Each pooler manager PAUSEs PgBouncer: running transactions finish,
//     then every server connection is closed and new transactions queue.
//     It then renames its control connection PoolerPausedApp.
//  4. The primary stops once every control connection it serves is named
//     PoolerPausedApp, or after a bounded wait (a pooler that cannot pause
//     in time must not hold a switchover back).
//  5. Each pooler manager waits for a writable server other than the one
//     it paused on, through Host, and RESUMEs PgBouncer: queued
//     transactions run on the new primary. A pause is bounded too: past
//     it, or when the primary stops notifying (the switchover was called
//     off), PgBouncer resumes onto whatever Host leads to.
const (
	PoolerSwitchoverChannel = "mydatabase_switchover"
	PoolerControlApp        = "mydatabase-pooler"
	PoolerPausedApp         = "mydatabase-pooler paused"
)

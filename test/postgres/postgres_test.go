package postgres

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/pki"
	"example.com/myoperator/internal/specs"
)

// parameters of the MyDatabase under test. Every value is written the way
// PostgreSQL shows it back, so SHOW must return it unchanged. log_line_prefix
// and the custom setting carry a quote and a backslash through the
// rendering's quoting.
var parameters = map[string]string{
	"max_connections":            "40",
	"shared_buffers":             "32MB",
	"work_mem":                   "8MB",
	"log_min_duration_statement": "250ms",
	"log_line_prefix":            `%m [%p] %q%u@%d it's `,
	"mydb.note":                  `it's C:\temp`,
}

// changedParameters is the spec after an edit: values changed (including
// settings that need a restart), one removed, one added.
func changedParameters() map[string]string {
	p := maps.Clone(parameters)
	p["max_connections"] = "60"
	p["shared_buffers"] = "48MB"
	p["work_mem"] = "16MB"
	delete(p, "log_min_duration_statement")
	p["statement_timeout"] = "30s"
	return p
}

func newDatabase(major int, params map[string]string) *databasev1alpha1.MyDatabase {
	replicas := int32(2)
	return &databasev1alpha1.MyDatabase{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "prod", UID: "6f1d0c2e-6a51-4d59-9d0e-3f1b2a7c9e10"},
		Spec: databasev1alpha1.MyDatabaseSpec{
			Version:      strconv.Itoa(major),
			Replicas:     &replicas,
			User:         "shopper",
			DatabaseName: "shopdb",
			Parameters:   params,
		},
	}
}

// TestGeneratedPostgres runs a MyDatabase of two servers, exactly as the
// builders generate it, on every installed PostgreSQL major.
func TestGeneratedPostgres(t *testing.T) {
	t.Parallel() // doc.go: which tests run side by side
	for _, srv := range findServers(t) {
		t.Run(fmt.Sprintf("postgres-%d", srv.major), func(t *testing.T) { testCluster(t, srv) })
	}
}

func testCluster(t *testing.T, srv server) {
	db := newDatabase(srv.major, parameters)
	if n := specs.Replicas(db); n != 2 {
		t.Fatalf("replicas = %d, want 2", n)
	}
	appPassword, err := specs.RandomPassword()
	if err != nil {
		t.Fatal(err)
	}
	creds := specs.CredentialsSecret(db, appPassword)
	user := string(creds.Data[specs.SecretUsernameKey])
	dbname := string(creds.Data[specs.SecretDatabaseKey])

	c := newCluster(t, srv, db, creds)
	ports := freePorts(t, 2)
	primary := c.newPod(0, ports[0])
	replica := c.newPod(1, ports[1])
	// Dump the container logs of a failed run.
	c.logsOnFailure(t)

	app := func(p *pod) string { return tcp(p.port, user, dbname) }
	superuser := func(p *pod) string { return p.socket("postgres", "postgres") }
	replication := func(p *pod, role string) string {
		return fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=replication replication=true sslmode=disable", p.port, role)
	}
	// withCert is conninfo over TLS with the client certificate in dir
	// (the copies an instance manager keeps, the postgres OS user's).
	withCert := func(conninfo, dir string) string {
		return strings.Replace(conninfo, "sslmode=disable", fmt.Sprintf("sslmode=verify-ca sslrootcert=%s/server-ca.crt sslcert=%s/replication.crt sslkey=%s/replication.key",
			dir, dir, dir), 1)
	}
	systemID := func(t *testing.T, p *pod) string {
		return c.query(t, superuser(p), "", "SELECT system_identifier FROM pg_control_system()")
	}
	step := func(name string, f func(t *testing.T)) {
		t.Helper()
		if !t.Run(name, f) {
			t.FailNow()
		}
	}

	var primaryID string

	step("primary initialises with the generated user, database and password", func(t *testing.T) {
		off := primary.start(t)
		primary.waitReady(t)
		logContains(t, primary.log(off), "initialising a new primary", "primary initialised", "postgres started as primary")
		checkContainerIsPostmaster(t, primary)
		primaryID = systemID(t, primary)

		if got := c.query(t, app(primary), appPassword, "SELECT current_user || ' ' || current_database()"); got != user+" "+dbname {
			t.Errorf("connected as %q, want %q", got, user+" "+dbname)
		}
		c.refused(t, app(primary), "wrong"+appPassword, fmt.Sprintf(`password authentication failed for user "%s"`, user), "SELECT 1")
		c.refused(t, app(primary), "", "no password supplied", "SELECT 1")
		// The socket asks for the password too.
		c.query(t, primary.socket(user, dbname), appPassword, "SELECT 1")
		c.refused(t, primary.socket(user, dbname), "", "no password supplied", "SELECT 1")

		if got := c.query(t, superuser(primary), "",
			fmt.Sprintf("SELECT rolpassword LIKE 'SCRAM-SHA-256$%%' FROM pg_authid WHERE rolname = '%s'", user)); got != "t" {
			t.Errorf("the password of %s is not stored as SCRAM-SHA-256 (%q)", user, got)
		}
		// The user owns its database and nothing more.
		roleAttributes(t, c, primary, user, "super=f createrole=f createdb=f replication=f bypassrls=f login=t")
		if got := c.query(t, app(primary), appPassword,
			"SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()"); got != user {
			t.Errorf("%s is owned by %q, want %q", dbname, got, user)
		}
		// It can create tables in its database's public schema (PostgreSQL 15
		// gives CREATE there only to the database owner).
		c.query(t, app(primary), appPassword,
			"CREATE TABLE items (id int PRIMARY KEY, note text)",
			"INSERT INTO items VALUES (1, 'written on the primary')")
	})

	step("replication role and pg_hba.conf are as generated and no more open", func(t *testing.T) {
		if got, want := c.query(t, superuser(primary), "",
			"SELECT string_agg(rolname, ',' ORDER BY rolname) FROM pg_roles WHERE rolcanlogin"),
			strings.Join(slices.Sorted(slices.Values([]string{"postgres", "replicator", user})), ","); got != want {
			t.Errorf("roles that can log in: %q, want %q", got, want)
		}
		roleAttributes(t, c, primary, "replicator", "super=f createrole=f createdb=f replication=t bypassrls=f login=t")
		if got := c.query(t, superuser(primary), "",
			fmt.Sprintf("SELECT has_database_privilege('replicator', '%s', 'CONNECT')", dbname)); got != "f" {
			t.Errorf("PUBLIC (so replicator) may connect to %s: CONNECT was not revoked", dbname)
		}

		// The server loaded the generated pg_hba.conf, rule for rule, with no error.
		hbaFile := filepath.Join(primary.hostPath(t, specs.ConfigDir), contract.HBAConfFile)
		if got := c.query(t, superuser(primary), "", "SHOW hba_file"); got != hbaFile {
			t.Errorf("hba_file = %q, want %q", got, hbaFile)
		}
		got := c.query(t, superuser(primary), "", `SELECT concat_ws(' ', type, array_to_string(database, ','),
			array_to_string(user_name, ','), address, auth_method, error) FROM pg_hba_file_rules ORDER BY line_number`)
		if want := strings.Join(hbaRules(t, specs.ConfigData(db)[contract.HBAConfFile]), "\n"); got != want {
			t.Errorf("pg_hba_file_rules:\n%s\nwant the generated rules:\n%s", got, want)
		}

		// Behaviour. The superuser logs in over the socket by peer (the server
		// runs as the postgres OS user) and never over TCP.
		if got := c.query(t, superuser(primary), "", "SELECT current_user"); got != "postgres" {
			t.Errorf("peer login as postgres: %q", got)
		}
		c.refused(t, tcp(primary.port, "postgres", "postgres"), "any",
			`pg_hba.conf rejects connection for host "127.0.0.1", user "postgres", database "postgres"`, "SELECT 1")
		c.refused(t, tcp(primary.port, "postgres", dbname), "any",
			`pg_hba.conf rejects connection for host "127.0.0.1", user "postgres", database "`+dbname+`"`, "SELECT 1")
		c.refused(t, replication(primary, "postgres"), "any",
			`pg_hba.conf rejects replication connection for host "127.0.0.1", user "postgres"`, "IDENTIFY_SYSTEM")
		// The replicator has no password: it replicates over TLS with the
		// client certificate of the MyDatabase's CA, and does nothing else.
		certs := filepath.Join(primary.socketDir(), "tls")
		if got := c.query(t, superuser(primary), "", "SELECT rolpassword IS NULL FROM pg_authid WHERE rolname = 'replicator'"); got != "t" {
			t.Errorf("the replicator has a password")
		}
		if got := c.query(t, withCert(replication(primary, "replicator"), certs), "", "IDENTIFY_SYSTEM"); !strings.HasPrefix(got, primaryID+"|") {
			t.Errorf("IDENTIFY_SYSTEM as replicator: %q, want the primary's system identifier %s", got, primaryID)
		}
		c.refused(t, strings.Replace(replication(primary, "replicator"), "sslmode=disable", "sslmode=require", 1), "any",
			"connection requires a valid client certificate", "IDENTIFY_SYSTEM")
		c.refused(t, replication(primary, "replicator"), "any",
			`pg_hba.conf rejects replication connection for host "127.0.0.1", user "replicator", no encryption`, "IDENTIFY_SYSTEM")
		// A certificate for the role from another CA is refused.
		other := filepath.Join(c.base, "forged")
		if err := os.Mkdir(other, 0o755); err != nil {
			t.Fatal(err)
		}
		otherCA, err := pki.NewCA("another CA", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		forged, err := pki.NewClient(otherCA, contract.ReplicationRole, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		for name, data := range map[string][]byte{"replication.crt": forged.Cert, "replication.key": forged.Key,
			"server-ca.crt": c.secrets[specs.CASecretName(db)].Data[specs.CACertKey]} {
			writeOwned(t, c, filepath.Join(other, name), data)
		}
		c.refused(t, withCert(replication(primary, "replicator"), other), "", "unknown ca", "IDENTIFY_SYSTEM")
		for _, d := range []string{dbname, "template1"} {
			c.refused(t, withCert(tcp(primary.port, "replicator", d), certs), "",
				`pg_hba.conf rejects connection for host "127.0.0.1", user "replicator", database "`+d+`"`, "SELECT 1")
		}
		// In the postgres database it may read what pg_rewind compares,
		// and nothing of the data.
		c.query(t, withCert(tcp(primary.port, "replicator", "postgres"), certs), "", "SELECT count(*) FROM pg_ls_dir('global', false, false)")
		c.refused(t, withCert(tcp(primary.port, "replicator", "postgres"), certs), "",
			"permission denied for table pg_authid", "SELECT rolpassword FROM pg_authid")
		c.refused(t, primary.socket("replicator", "postgres"), "any",
			`pg_hba.conf rejects connection for host "[local]", user "replicator", database "postgres"`, "SELECT 1")
		// The application user cannot replicate.
		c.refused(t, replication(primary, user), appPassword,
			`pg_hba.conf rejects replication connection for host "127.0.0.1", user "`+user+`"`, "IDENTIFY_SYSTEM")
		// The password is not on the server's command line or in its environment.
		checkNoSecrets(t, primary, appPassword)
	})

	step("the spec's parameters are in effect on the primary", func(t *testing.T) {
		checkParameters(t, c, primary, db)
	})

	step("readiness and liveness report a healthy primary", func(t *testing.T) {
		checkProbes(t, primary, true)
	})

	step("a replica clones the primary and streams as a hot standby", func(t *testing.T) {
		off := replica.start(t)
		replica.waitReady(t)
		logContains(t, replica.log(off), "cloning the primary at "+primary.peers.Addr(),
			"replica cloned", "postgres started as replica")
		logLacks(t, replica.log(off), "initialising")
		checkContainerIsPostmaster(t, replica)
		if _, err := os.Stat(filepath.Join(replica.pgdata(), "standby.signal")); err != nil {
			t.Errorf("no standby.signal: %v", err)
		}
		if id := systemID(t, replica); id != primaryID {
			t.Errorf("replica system identifier %s, want the primary's %s", id, primaryID)
		}
		if got := c.query(t, app(replica), appPassword, "SELECT pg_is_in_recovery()"); got != "t" {
			t.Errorf("replica: pg_is_in_recovery() = %q, want t", got)
		}
		if got := c.query(t, app(primary), appPassword, "SELECT pg_is_in_recovery()"); got != "f" {
			t.Errorf("primary: pg_is_in_recovery() = %q, want f", got)
		}
		waitStreaming(t, c, primary, replica)
		waitRow(t, c, app(replica), appPassword, 1, "written on the primary")
		c.refused(t, app(replica), appPassword, "cannot execute INSERT in a read-only transaction",
			"INSERT INTO items VALUES (2, 'written on the replica')")
		checkProbes(t, replica, true)
		checkParameters(t, c, replica, db)
		checkNoSecrets(t, replica, appPassword)
		// It streams with the client certificate, over TLS, and no password.
		if got := c.query(t, superuser(primary), "", `SELECT s.ssl, s.client_dn FROM pg_stat_replication r
			JOIN pg_stat_ssl s USING (pid) WHERE r.application_name = '`+replica.name+"'"); got != "t|/CN=replicator" {
			t.Errorf("the replica's connection: ssl|client_dn %q, want t|/CN=replicator", got)
		}
		if _, err := os.Stat(filepath.Join(replica.socketDir(), ".pgpass-replication")); !os.IsNotExist(err) {
			t.Errorf("a replication password file exists (%v)", err)
		}
	})

	// A settings change: the ConfigMap changes under every pod, then the
	// StatefulSet rolls the pods, highest ordinal first.
	changed := newDatabase(srv.major, changedParameters())
	if specs.ConfigHash(changed) == specs.ConfigHash(db) {
		t.Fatal("changing spec.parameters does not change the config hash: the pods would not roll")
	}
	primary.updateConfig(t, specs.ConfigData(changed))
	replica.updateConfig(t, specs.ConfigData(changed))

	step("the replica restarts over its data with the changed parameters", func(t *testing.T) {
		replica.stop(t)
		logContains(t, replica.log(0), "received fast shutdown request")
		checkProbes(t, replica, false)
		off := replica.start(t)
		replica.waitReady(t)
		logContains(t, replica.log(off), "postgres started as replica")
		logLacks(t, replica.log(off), "cloning", "initialising")
		if id := systemID(t, replica); id != primaryID {
			t.Errorf("replica system identifier %s, want %s", id, primaryID)
		}
		if got := c.query(t, app(replica), appPassword, "SELECT pg_is_in_recovery()"); got != "t" {
			t.Errorf("replica: pg_is_in_recovery() = %q after a restart", got)
		}
		checkParameters(t, c, replica, changed)
		waitRow(t, c, app(replica), appPassword, 1, "written on the primary")
		waitStreaming(t, c, primary, replica)
	})

	step("the primary stops: the replica takes over, and the old primary rejoins as its replica", func(t *testing.T) {
		primary.stop(t)
		logContains(t, primary.log(0), "received fast shutdown request", "gave up the Lease")
		checkProbes(t, primary, false)
		// The Lease given up, the replica stands alone: elected once it
		// has waited two ticks for the stopped pod to stand too.
		eventually(t, 15*time.Second, replica.name+" promoted", func() (bool, string) {
			out, err := c.psql(superuser(replica), "", "SELECT pg_is_in_recovery()")
			return err == nil && out == "f", out
		})
		logContains(t, replica.log(0), "elected in term", "promoting")
		waitRow(t, c, app(replica), appPassword, 1, "written on the primary")
		c.query(t, app(replica), appPassword, "INSERT INTO items VALUES (2, 'written after the failover')")

		off := primary.start(t)
		primary.waitReady(t)
		logContains(t, primary.log(off), "follow", "postgres started as replica")
		logLacks(t, primary.log(off), "initialising", "cloning")
		if id := systemID(t, primary); id != primaryID {
			t.Errorf("former primary's system identifier %s after rejoining, want %s: it was initialised again", id, primaryID)
		}
		if got := c.query(t, app(primary), appPassword, "SELECT pg_is_in_recovery()"); got != "t" {
			t.Errorf("former primary: pg_is_in_recovery() = %q, want t", got)
		}
		checkParameters(t, c, primary, changed)
		waitStreaming(t, c, replica, primary)
		waitRow(t, c, app(primary), appPassword, 2, "written after the failover")
		c.refused(t, app(replica), "wrong"+appPassword, "password authentication failed", "SELECT 1")
	})
	primary, replica = replica, primary

	step("SIGTERM shuts down fast, with clients connected", func(t *testing.T) {
		for _, p := range []*pod{replica, primary} {
			// A smart shutdown (the SIGTERM Kubernetes sends) would wait for this
			// session; a fast one ends it.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			done := make(chan string, 1)
			go func() {
				out, _ := c.run(ctx, append(c.baseEnv(), "PGPASSWORD="+appPassword), filepath.Join(srv.bin, "psql"),
					"--no-psqlrc", "--no-password", "--dbname="+app(p), "--command=SELECT pg_sleep(600)")
				done <- out
			}()
			eventually(t, 30*time.Second, "the client session to start", func() (bool, string) {
				out, _ := c.psql(superuser(p), "", "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%'")
				return out == "1", out
			})
			start := time.Now()
			p.stop(t)
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("%s: stopping took %s", p.name, d)
			}
			if out := <-done; !strings.Contains(out, "terminating connection due to administrator command") {
				t.Errorf("%s: the client was not disconnected by a fast shutdown: %s", p.name, out)
			}
			checkProbes(t, p, false)
		}
	})

	// Lowering max_connections, in the StatefulSet's order: the replica
	// restarts first, under a primary that still runs with the higher value.
	primary.updateConfig(t, specs.ConfigData(db))
	replica.updateConfig(t, specs.ConfigData(db))

	step("lowering max_connections: a standby keeps the value the primary last ran with", func(t *testing.T) {
		off := replica.start(t)
		replica.waitReady(t)
		logContains(t, replica.log(off), "max_connections: keeping the primary's 60 until it runs with the configured 40")
		if got := c.query(t, superuser(replica), "", "SHOW max_connections"); got != "60" {
			t.Errorf("max_connections = %s, want the primary's 60", got)
		}
		replica.stop(t)
	})
}

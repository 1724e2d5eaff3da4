package postgres

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/pki"
	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
)

// TestTLS: servers with spec.tls.clients Required, their certificate the
// operator's (issued by the harness as the operator does).
//   - psql with sslmode=verify-full and only the CA of the credentials
//     Secret reaches the server under every name in the certificate, and
//     no other name;
//   - a connection without TLS is refused;
//   - the replica streams over TLS, authenticated by its client
//     certificate (the replication role has no password);
//   - a renewed certificate reaches the server without a restart: a
//     connection open across the renewal stays open, new ones see the new
//     certificate;
//   - a renewed client certificate is what the replica presents when it
//     connects again.
func TestTLS(t *testing.T) {
	t.Parallel() // doc.go: which tests run side by side
	servers := findServers(t)
	srv := servers[len(servers)-1]
	db := newDatabase(srv.major, nil)
	db.Spec.TLS.Clients = databasev1alpha1.TLSClientsRequired
	password, err := specs.RandomPassword()
	if err != nil {
		t.Fatal(err)
	}
	creds := specs.CredentialsSecret(db, password)
	user, dbname := db.Spec.User, db.Spec.DatabaseName
	c := newCluster(t, srv, db, creds)
	ports := freePorts(t, 2)
	primary, replica := c.newPod(0, ports[0]), c.newPod(1, ports[1])
	c.logsOnFailure(t)
	primary.start(t)
	primary.waitReady(t)
	replica.start(t)
	replica.waitReady(t)

	caSecret := c.secrets[specs.CASecretName(db)]
	rootCert := filepath.Join(c.base, "ca.crt")
	if err := os.WriteFile(rootCert, caSecret.Data[specs.CACertKey], 0o644); err != nil {
		t.Fatal(err)
	}
	verified := func(name string, port int) string {
		return fmt.Sprintf("host=%s hostaddr=127.0.0.1 port=%d user=%s dbname=%s sslmode=verify-full sslrootcert=%s",
			name, port, user, dbname, rootCert)
	}

	t.Run("verify-full under every name of the certificate", func(t *testing.T) {
		for _, name := range specs.ServerDNSNames(db) {
			if got := c.query(t, verified(name, primary.port), password, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"); got != "t" {
				t.Errorf("%s: TLS %q", name, got)
			}
		}
		c.refused(t, verified("shop-rw.elsewhere", primary.port), password, "does not match host name", "SELECT 1")
	})
	t.Run("a connection without TLS is refused", func(t *testing.T) {
		c.refused(t, tcp(primary.port, user, dbname), password, "pg_hba.conf rejects connection", "SELECT 1")
	})
	t.Run("the replica streams over TLS with its client certificate", func(t *testing.T) {
		if got := replicationClients(t, c, primary); got != replica.name+" t /CN=replicator" {
			t.Errorf("replication connections (application_name, ssl, client_dn): %q", got)
		}
	})

	t.Run("renewal under an open connection", func(t *testing.T) {
		ctx := context.Background()
		open, openSerial := connectTLS(t, primary.port, user, dbname, password, caSecret.Data[specs.CACertKey])
		defer func() { _ = open.Close(ctx) }()
		var pid int
		if err := open.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}

		// The operator's renewal: a new certificate from the same CA into
		// the same Secret, which the kubelet then swaps into the volume.
		ca := pki.KeyPair{Cert: caSecret.Data[specs.CACertKey], Key: caSecret.Data[specs.CAKeyKey]}
		renewed, err := pki.NewServer(ca, specs.ServerCommonName(db), specs.ServerDNSNames(db), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		cert, err := pki.ParseCert(renewed.Cert)
		if err != nil {
			t.Fatal(err)
		}
		off := int64(len(primary.log(0)))
		primary.updateSecret(t, specs.ServerCertSecret(db, renewed, ca.Cert))
		waitLogged(t, primary, off, "a certificate changed: reloading")

		// New connections see the new certificate (the reload is the
		// postmaster's, a moment after the signal).
		deadline := time.Now().Add(10 * time.Second)
		for {
			conn, serial := connectTLS(t, primary.port, user, dbname, password, ca.Cert)
			_ = conn.Close(ctx)
			if serial.Cmp(cert.SerialNumber) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("new connections still see serial %s, want the renewed %s", serial, cert.SerialNumber)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if openSerial.Cmp(cert.SerialNumber) == 0 {
			t.Fatal("the connection opened before the renewal saw the renewed certificate")
		}
		// The connection opened before is the same session, still on TLS.
		var samePid int
		var ssl bool
		if err := open.QueryRow(ctx, "SELECT pg_backend_pid(), ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&samePid, &ssl); err != nil {
			t.Fatalf("the connection open across the renewal: %v", err)
		}
		if samePid != pid || !ssl {
			t.Errorf("after the renewal: backend %d (was %d), TLS %t", samePid, pid, ssl)
		}
	})

	t.Run("the replica reconnects with a renewed client certificate", func(t *testing.T) {
		ca := pki.KeyPair{Cert: caSecret.Data[specs.CACertKey], Key: caSecret.Data[specs.CAKeyKey]}
		renewed, err := pki.NewClient(ca, contract.ReplicationRole, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		cert, err := pki.ParseCert(renewed.Cert)
		if err != nil {
			t.Fatal(err)
		}
		off := int64(len(replica.log(0)))
		for _, p := range []*pod{primary, replica} {
			p.updateSecret(t, specs.ReplicationCertSecret(db, renewed, ca.Cert))
		}
		waitLogged(t, replica, off, "a certificate changed")
		// The open connection goes on with the old one; cut it, and the
		// walreceiver connects again with the new one.
		c.query(t, primary.socket("postgres", "postgres"), "",
			"SELECT pg_terminate_backend(pid) FROM pg_stat_replication WHERE client_addr IS NOT NULL")
		eventually(t, 30*time.Second, "the replica streaming with the renewed certificate", func() (bool, string) {
			out, err := c.psql(primary.socket("postgres", "postgres"), "",
				"SELECT client_serial FROM pg_stat_replication JOIN pg_stat_ssl USING (pid) WHERE application_name = '"+replica.name+"'")
			return err == nil && out == cert.SerialNumber.String(), out
		})
	})
	replica.stop(t)
	primary.stop(t)
}

// replicationClients lists the network replication connections of the
// primary p: application name, TLS, client certificate's subject.
func replicationClients(t *testing.T, c *cluster, p *pod) string {
	t.Helper()
	return c.query(t, p.socket("postgres", "postgres"), "", `SELECT string_agg(concat_ws(' ', application_name, ssl, client_dn), ',')
		FROM pg_stat_replication JOIN pg_stat_ssl USING (pid) WHERE client_addr IS NOT NULL`)
}

// TestLegacyReplicationPassword: the upgrade of a MyDatabase made before
// replicas authenticated by certificate. Its primary, still of the old
// template (simulated: the old pg_hba.conf, which wants the replicator's
// password, and that password on the role), refuses the certificate; a
// replica of the new template that has the password (the legacy Secret
// the operator keeps until every pod runs the new template) falls back to
// it. Once the primary is gone and the replica promoted, the role's
// password is removed, and the old primary rejoins with its certificate.
func TestLegacyReplicationPassword(t *testing.T) {
	t.Parallel() // doc.go: which tests run side by side
	servers := findServers(t)
	srv := servers[len(servers)-1]
	db := newDatabase(srv.major, nil)
	password, err := specs.RandomPassword()
	if err != nil {
		t.Fatal(err)
	}
	const legacyPassword = "legacy-replication-password"
	legacy := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: specs.LegacyReplicationSecretName(db)},
		Data: map[string][]byte{specs.SecretPasswordKey: []byte(legacyPassword)}}
	c := newCluster(t, srv, db, specs.CredentialsSecret(db, password), legacy)
	ports := freePorts(t, 2)
	primary, replica := c.newPod(0, ports[0]), c.newPod(1, ports[1])
	c.logsOnFailure(t)
	superuser := func(p *pod) string { return p.socket("postgres", "postgres") }
	primary.start(t)
	primary.waitReady(t)

	// The old template's primary.
	config := specs.ConfigData(db)
	oldHBA := strings.NewReplacer(
		"hostssl replication  replicator  all      cert", "host    replication  replicator  all      scram-sha-256",
		"hostssl postgres     replicator  all      cert", "host    postgres     replicator  all      scram-sha-256").Replace(config[contract.HBAConfFile])
	if oldHBA == config[contract.HBAConfFile] {
		t.Fatal("the generated pg_hba.conf has no cert rules to undo")
	}
	primary.updateConfig(t, map[string]string{contract.PostgresConfFile: config[contract.PostgresConfFile], contract.HBAConfFile: oldHBA})
	c.query(t, superuser(primary), "", "ALTER ROLE replicator PASSWORD '"+legacyPassword+"'", "SELECT pg_reload_conf()")

	off := replica.start(t)
	replica.waitReady(t)
	waitStreaming(t, c, primary, replica)
	logContains(t, replica.log(off), "does not accept the replication certificate yet")
	if got := replicationClients(t, c, primary); got != replica.name+" t" {
		t.Errorf("replication connections (application_name, ssl, client_dn): %q, want the password's (no certificate)", got)
	}

	// The primary restarts with the new template: the replica takes over.
	primary.updateConfig(t, config)
	primary.stop(t)
	eventually(t, 15*time.Second, replica.name+" promoted", func() (bool, string) {
		out, err := c.psql(superuser(replica), "", "SELECT pg_is_in_recovery()")
		return err == nil && out == "f", out
	})
	testenv.Eventually(t, 10*time.Second, "the replicator's password removed", func() error {
		if got := c.query(t, superuser(replica), "", "SELECT rolpassword IS NULL FROM pg_authid WHERE rolname = 'replicator'"); got != "t" {
			return errors.New("it still has one")
		}
		return nil
	})
	logContains(t, replica.log(0), "removed the password of role replicator")
	primary.start(t)
	primary.waitReady(t)
	waitStreaming(t, c, replica, primary)
	if got := replicationClients(t, c, replica); got != primary.name+" t /CN=replicator" {
		t.Errorf("replication connections (application_name, ssl, client_dn): %q, want the certificate's", got)
	}
	replica.stop(t)
	primary.stop(t)
}

// connectTLS connects with TLS verified against caPEM under the
// read-write Service's name, and returns the serial of the certificate the
// server presented.
func connectTLS(t *testing.T, port int, user, dbname, password string, caPEM []byte) (*pgx.Conn, *big.Int) {
	t.Helper()
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=require", port, user, dbname))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Password = password
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	var serial *big.Int
	cfg.TLSConfig = &tls.Config{RootCAs: roots, ServerName: "shop-rw", MinVersion: tls.VersionTLS12,
		VerifyConnection: func(cs tls.ConnectionState) error {
			serial = cs.PeerCertificates[0].SerialNumber
			return nil
		}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return conn, serial
}

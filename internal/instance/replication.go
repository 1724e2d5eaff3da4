package instance

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"example.com/myoperator/internal/contract"
)

// A replica connects to the primary (streaming, pg_basebackup, pg_rewind,
// the timeline check) as the replication role, over TLS, with the client
// certificate the MyDatabase's CA issued for that role: the role has no
// password (pg_hba.conf: cert). It checks the primary's certificate
// against the CA of the server certificate Secret (verify-ca: the
// primary is whoever holds a certificate of this database's CA; the
// address it is reached by is the pod's, which a user-supplied
// certificate need not name).
//
// The exception is the upgrade of a MyDatabase made before: until its
// primary restarts with the new pod template, that primary checks no
// client certificate and wants the replication password. A replica that
// still has the password (REPLICATION_PASSWORD, from the Secret the
// operator deletes once every pod runs the new template) falls back to it
// when the primary refuses the certificate. A primary of the new template
// removes the role's password (afterPromotion), and its pg_hba.conf
// accepts only the certificate.

// replicationConninfo are the libpq keywords of a connection to the
// primary at address, and how it authenticates: the certificate, or the
// legacy password when the primary refuses the certificate and this
// instance has one.
func (pg *pgServer) replicationConninfo(ctx context.Context, address string) (string, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return "", err
	}
	// A new replica clones before its server ever started: the copies
	// of the certificates must exist first.
	if _, err := pg.c.copyTLS(); err != nil {
		return "", err
	}
	base := fmt.Sprintf("host=%s port=%s user=%s connect_timeout=5", host, port, contract.ReplicationRole)
	byCert := base + fmt.Sprintf(" sslmode=verify-ca sslrootcert=%s sslcert=%s sslkey=%s",
		pg.c.tlsCopy(serverCA), pg.c.tlsCopy(clientCert), pg.c.tlsCopy(clientKey))
	if pg.c.ReplicationPassword == "" {
		return byCert, nil
	}
	conn, certErr := pg.dialReplication(ctx, byCert)
	if certErr == nil {
		_ = conn.Close(context.Background())
		return byCert, nil
	}
	if err := pg.c.writePassfile(); err != nil {
		return "", err
	}
	byPassword := base + " passfile=" + pg.c.passfile()
	conn, err = pg.dialReplication(ctx, byPassword)
	if err != nil {
		return "", fmt.Errorf("the primary at %s refused the client certificate (%v) and the legacy replication password (%w)", address, certErr, err)
	}
	_ = conn.Close(context.Background())
	pg.logOnce(fmt.Errorf("the primary at %s does not accept the replication certificate yet: replicating with the legacy password until it restarts with the current pod template", address))
	return byPassword, nil
}

// dialReplication opens a replication connection with conninfo.
func (pg *pgServer) dialReplication(ctx context.Context, conninfo string) (*pgconn.PgConn, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return pgconn.Connect(ctx, conninfo+" dbname=replication replication=true")
}

// writePassfile writes the legacy replication password where libpq reads
// it (mode 0600), escaped as the password file format wants.
func (c Config) writePassfile() error {
	p := strings.NewReplacer(`\`, `\\`, `:`, `\:`).Replace(c.ReplicationPassword)
	tmp := c.passfile() + ".tmp"
	if err := os.WriteFile(tmp, []byte("*:*:*:"+contract.ReplicationRole+":"+p+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, c.passfile())
}

// passfile is the libpq password file of the legacy replication password,
// in the socket directory (an emptyDir of the pod, never on the data
// volume).
func (c Config) passfile() string { return c.SocketDir + "/.pgpass-replication" }

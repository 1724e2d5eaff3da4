package instance

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"

	"example.com/myoperator/internal/contract"
)

// The certificates reach the pod as Secret volumes (TLS_DIR, the server's;
// REPLICATION_TLS_DIR, the replicas' client certificate), whose files are
// the kubelet's: group-readable through fsGroup and replaced by a symlink
// swap when the Secret changes. PostgreSQL refuses a key that others than
// its owner may read unless root owns it, and so does libpq, so the
// instance manager keeps copies of its own, mode 0600, in the socket
// directory (an emptyDir, never the data volume), points the server and
// the replication connections at them, and when a Secret's files change
// it replaces the copies and reloads the server: SIGHUP makes PostgreSQL
// load the new certificate and CA for new connections, and the open ones
// keep their session. A replica's connection to the primary reads its
// files at each connection.

// tlsFile is a file of a Secret volume and the name of its copy.
type tlsFile struct{ dir, name, copy string }

// The copies.
const (
	serverCert = "tls.crt"
	serverKey  = "tls.key"
	// serverCA verifies the primary's certificate, for a replica.
	serverCA = "server-ca.crt"
	// clientCA verifies the replicas' client certificates (ssl_ca_file).
	clientCA   = "client-ca.crt"
	clientCert = "replication.crt"
	clientKey  = "replication.key"
	// A replica MyDatabase's client certificate of its source, and the
	// source's CA (replica.go).
	sourceCert = "source.crt"
	sourceKey  = "source.key"
	sourceCA   = "source-ca.crt"
)

// tlsFiles are the files the instance copies: none of the server's when
// the pod has no TLS_DIR.
func (c Config) tlsFiles() []tlsFile {
	files := []tlsFile{{c.ReplicationTLSDir, "tls.crt", clientCert}, {c.ReplicationTLSDir, "tls.key", clientKey},
		{c.ReplicationTLSDir, "ca.crt", clientCA}}
	if c.TLSDir != "" {
		files = append(files, tlsFile{c.TLSDir, "tls.crt", serverCert}, tlsFile{c.TLSDir, "tls.key", serverKey},
			tlsFile{c.TLSDir, "ca.crt", serverCA})
	}
	if s := c.ReplicaStream; s != nil {
		files = append(files, tlsFile{s.TLSDir, "tls.crt", sourceCert}, tlsFile{s.TLSDir, "tls.key", sourceKey},
			tlsFile{s.TLSDir, "ca.crt", sourceCA})
	}
	return files
}

// tlsCopyDir is where the copies live.
func (c Config) tlsCopyDir() string { return filepath.Join(c.SocketDir, "tls") }

// tlsCopy is the path of a copy.
func (c Config) tlsCopy(name string) string { return filepath.Join(c.tlsCopyDir(), name) }

// tlsArgs turn TLS on with the copies (none when the pod has no TLS_DIR),
// and have the server check client certificates, the replicas', against
// the MyDatabase's CA.
func (c Config) tlsArgs() []string {
	args := make([]string, 0, 8)
	args = append(args, "-c", "ssl_ca_file="+c.tlsCopy(clientCA))
	if c.TLSDir == "" {
		return args
	}
	return append(args, "-c", "ssl=on", "-c", "ssl_cert_file="+c.tlsCopy(serverCert), "-c", "ssl_key_file="+c.tlsCopy(serverKey))
}

// copyTLS brings the copies in line with the Secret volumes. It reports
// whether they changed; a half-written pair is never left behind (each
// file is written aside and renamed, the key after its certificate, and
// PostgreSQL reads them only at a reload, which follows).
func (c Config) copyTLS() (bool, error) {
	if err := os.MkdirAll(c.tlsCopyDir(), 0o700); err != nil {
		return false, err
	}
	changed := false
	for _, f := range c.tlsFiles() {
		want, err := os.ReadFile(filepath.Join(f.dir, f.name))
		if err != nil {
			return false, fmt.Errorf("a certificate Secret: %w", err)
		}
		have, err := os.ReadFile(c.tlsCopy(f.copy))
		if err == nil && bytes.Equal(have, want) {
			continue
		}
		tmp := c.tlsCopy("." + f.copy)
		if err := os.WriteFile(tmp, want, 0o600); err != nil {
			return false, err
		}
		if err := os.Rename(tmp, c.tlsCopy(f.copy)); err != nil {
			return false, err
		}
		changed = true
	}
	return changed, nil
}

// certificatesDigest is what the report says of the copies
// (contract.CertificatesDigest): a copy that cannot be read counts as
// empty.
func (c Config) certificatesDigest() string {
	read := func(name string) []byte {
		b, _ := os.ReadFile(c.tlsCopy(name))
		return b
	}
	return contract.CertificatesDigest(read(serverCert), read(serverCA), read(clientCert), read(clientCA))
}

// keepCertificate follows the Secret: a running server reloads when its
// certificate changed, and when pg_hba.conf did (the ConfigMap's volume
// brings a change some time after the operator writes it; a change of
// pg_hba.conf alone does not roll the pods, specs.ConfigHash).
func (pg *pgServer) keepCertificate() {
	changed, err := pg.c.copyTLS()
	if err != nil {
		pg.logOnce(err)
		return
	}
	what := "a certificate"
	if hba, err := os.ReadFile(filepath.Join(pg.c.ConfigDir, contract.HBAConfFile)); err == nil {
		if pg.hba != nil && !bytes.Equal(hba, pg.hba) {
			changed, what = true, contract.HBAConfFile
		}
		pg.hba = hba
	}
	if changed && pg.server != nil && !pg.server.exitedNow() {
		pg.log("%s changed: reloading", what)
		_ = pg.server.cmd.Process.Signal(syscall.SIGHUP)
	}
	// Reported after the reload was asked for: the server reads the
	// copies then (or at its start, when none runs), and a CA rotation
	// waits for this before it takes the next step.
	pg.certificates.Store(pg.c.certificatesDigest())
}

// atomicString is a string the loop writes and the report reads.
type atomicString struct{ v atomic.Value }

func (a *atomicString) Store(s string) { a.v.Store(s) }

// Load is the string last stored, "" before any.
func (a *atomicString) Load() string {
	s, _ := a.v.Load().(string)
	return s
}

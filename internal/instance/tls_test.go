package instance

import (
	"os"
	"path/filepath"
	"testing"

	"example.com/myoperator/internal/contract"
)

// TestCertificatesDigest: what the report says of the copies is what the
// operator computes from the Secrets' files (contract.CertificatesDigest),
// before and after a Secret changes: the operator's CA rotation waits for
// exactly this.
func TestCertificatesDigest(t *testing.T) {
	dir := t.TempDir()
	c := Config{TLSDir: filepath.Join(dir, "server"), ReplicationTLSDir: filepath.Join(dir, "replication"), SocketDir: filepath.Join(dir, "run")}
	write := func(d, name, content string) {
		t.Helper()
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{c.TLSDir, c.ReplicationTLSDir} {
		write(d, "tls.crt", d+" cert")
		write(d, "tls.key", d+" key")
		write(d, "ca.crt", "old CA")
	}
	want := func(ca string) string {
		return contract.CertificatesDigest([]byte(c.TLSDir+" cert"), []byte(ca), []byte(c.ReplicationTLSDir+" cert"), []byte(ca))
	}
	if _, err := c.copyTLS(); err != nil {
		t.Fatal(err)
	}
	if got := c.certificatesDigest(); got != want("old CA") {
		t.Errorf("digest of the copies %s, want %s", got, want("old CA"))
	}
	for _, d := range []string{c.TLSDir, c.ReplicationTLSDir} {
		write(d, "ca.crt", "old CA, new CA")
	}
	if got := c.certificatesDigest(); got != want("old CA") {
		t.Error("the digest changed before the copies did")
	}
	if changed, err := c.copyTLS(); err != nil || !changed {
		t.Fatalf("copy after the change: %t, %v", changed, err)
	}
	if got := c.certificatesDigest(); got != want("old CA, new CA") {
		t.Errorf("digest after the change %s, want %s", got, want("old CA, new CA"))
	}
	// The key is no part of it.
	write(c.TLSDir, "tls.key", "another key")
	if _, err := c.copyTLS(); err != nil {
		t.Fatal(err)
	}
	if got := c.certificatesDigest(); got != want("old CA, new CA") {
		t.Error("the digest depends on a key")
	}
}

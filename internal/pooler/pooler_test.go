package pooler

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"example.com/myoperator/internal/contract"
)

// setup writes a configuration and the Secret's files, as the volumes
// hold them.
func setup(t *testing.T, p contract.Pooler) Config {
	t.Helper()
	dir := t.TempDir()
	c := Config{ConfigPath: filepath.Join(dir, "pooler.json"), TLSDir: filepath.Join(dir, "tls"), RunDir: filepath.Join(dir, "run"), Port: 5432}
	raw, _ := json.Marshal(p)
	if err := os.WriteFile(c.ConfigPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(c.TLSDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range tlsFiles {
		if err := os.WriteFile(filepath.Join(c.TLSDir, name), []byte(name+" v1"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func TestRender(t *testing.T) {
	c := setup(t, contract.Pooler{Host: "orders-rw.shop.svc", Port: 5432, ClientTLS: "require", Settings: map[string]string{
		"pool_mode": "transaction", "default_pool_size": "7",
		// Never the operator's to give: the pooler manager owns these.
		"auth_type": "trust", "listen_addr": "0.0.0.0",
		"bad": "x\nauth_type = trust",
	}})
	fs, err := c.Render()
	if err != nil {
		t.Fatal(err)
	}
	ini := string(fs["pgbouncer.ini"])
	for _, want := range []string{
		"* = host=orders-rw.shop.svc port=5432 auth_user=mydatabase_pooler\n",
		"pool_mode = transaction\n", "default_pool_size = 7\n",
		"auth_type = scram-sha-256\n", "listen_addr = *\n", "listen_port = 5432\n",
		"auth_query = SELECT username, password FROM mydatabase.pooler_lookup($1)\n",
		"client_tls_sslmode = require\n", "server_tls_sslmode = verify-full\n",
		"tcp_keepidle = 10\n", "tcp_user_timeout = 25000\n",
		// Without it PgBouncer loads the system's CA, and a minimal image
		// has none: it does not start.
		"client_tls_ca_file = " + filepath.Join(c.RunDir, "tls", "ca.crt") + "\n",
		"server_tls_cert_file = " + filepath.Join(c.RunDir, "tls", "client.crt") + "\n",
	} {
		if !strings.Contains(ini, want) {
			t.Errorf("pgbouncer.ini lacks %q:\n%s", want, ini)
		}
	}
	for _, refused := range []string{"auth_type = trust", "listen_addr = 0.0.0.0", "bad ="} {
		if strings.Contains(ini, refused) {
			t.Errorf("pgbouncer.ini has %q:\n%s", refused, ini)
		}
	}
	if string(fs["tls/client.key"]) != "client.key v1" {
		t.Errorf("the certificates are not copied: %q", fs["tls/client.key"])
	}
}

// TestWrite: a file is replaced only when its content changed, which is
// what makes the manager reload PgBouncer.
func TestWrite(t *testing.T) {
	c := setup(t, contract.Pooler{Host: "h", Port: 5432})
	fs, err := c.Render()
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := c.write(fs); err != nil || !changed {
		t.Fatalf("first write: changed %v, %v", changed, err)
	}
	if changed, err := c.write(fs); err != nil || changed {
		t.Fatalf("the same files again: changed %v, %v", changed, err)
	}
	if err := os.WriteFile(filepath.Join(c.TLSDir, "tls.crt"), []byte("renewed"), 0o600); err != nil {
		t.Fatal(err)
	}
	if fs, err = c.Render(); err != nil {
		t.Fatal(err)
	}
	if changed, err := c.write(fs); err != nil || !changed {
		t.Fatalf("a renewed certificate: changed %v, %v", changed, err)
	}
	if b, _ := os.ReadFile(filepath.Join(c.RunDir, "tls", "tls.crt")); string(b) != "renewed" {
		t.Errorf("tls.crt %q", b)
	}
}

func TestRenderRefusesIncomplete(t *testing.T) {
	c := setup(t, contract.Pooler{})
	if _, err := c.Render(); err == nil || !strings.Contains(err.Error(), "no server host") {
		t.Errorf("a configuration with no server: %v", err)
	}
	c = setup(t, contract.Pooler{Host: "h", Port: 1})
	_ = os.Remove(filepath.Join(c.TLSDir, "client.key"))
	if _, err := c.Render(); err == nil {
		t.Error("a Secret without the client key renders")
	}
}

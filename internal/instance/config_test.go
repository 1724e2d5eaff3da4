package instance

import (
	"os"
	"path/filepath"
	"testing"
)

func TestConfigFromEnvNamesWhatIsMissing(t *testing.T) {
	for _, v := range []string{"POD_NAME", "PGDATA", "PGHOST", "PGPORT", "CONFIG_DIR", "POSTGRES_USER", "POSTGRES_DB",
		"POSTGRES_PASSWORD", "REPLICATION_TLS_DIR", "BOOTSTRAP_POD", "NAMESPACE", "LEASE_NAME", "POD_SELECTOR",
		"ADVERTISE_ADDRESS", "LEASE_DURATION_SECONDS"} {
		t.Setenv(v, "x")
	}
	t.Setenv("PGDATA", "")
	t.Setenv("REPLICATION_TLS_DIR", "")
	t.Setenv("REPLICATION_PASSWORD", "") // optional: a MyDatabase made before replication by certificate
	_, err := ConfigFromEnv()
	if err == nil || err.Error() != "the container environment lacks PGDATA, REPLICATION_TLS_DIR" {
		t.Fatalf("error %v", err)
	}
}

// TestPassfileEscapes checks the libpq password file format: a backslash
// and a colon in the password are escaped, the file is the owner's only.
func TestPassfileEscapes(t *testing.T) {
	c := Config{SocketDir: t.TempDir(), ReplicationPassword: `a:b\c`}
	if err := c.writePassfile(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(c.SocketDir, ".pgpass-replication"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `*:*:*:replicator:a\:b\\c`+"\n"; got != want {
		t.Errorf("passfile %q, want %q", got, want)
	}
	fi, _ := os.Stat(c.passfile())
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("passfile mode %v, want 0600", fi.Mode().Perm())
	}
}

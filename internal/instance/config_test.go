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

// TestStoreEncryptionFromEnv: an encrypted store's identities are a file
// the store reads when opened (the path and the Secret's name come from
// the environment, never the key); the replica's store takes none.
func TestStoreEncryptionFromEnv(t *testing.T) {
	for _, prefix := range []string{"BACKUP_", "RESTORE_", "REPLICA_"} {
		t.Setenv(prefix+"ENDPOINT", "http://127.0.0.1:9000")
	}
	t.Setenv("BACKUP_IDENTITIES_FILE", "/etc/mydatabase-backup-encryption/identities")
	t.Setenv("BACKUP_ENCRYPTION_SECRET", "orders-backup-key")
	if e := storeFromEnv("BACKUP_").Encryption; e == nil || e.IdentitiesFile != "/etc/mydatabase-backup-encryption/identities" || e.Secret != "orders-backup-key" {
		t.Errorf("spec.backup's encryption: %+v", e)
	}
	if e := storeFromEnv("RESTORE_").Encryption; e != nil {
		t.Errorf("a store without IDENTITIES_FILE is encrypted: %+v", e)
	}
}

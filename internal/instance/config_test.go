package instance

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"example.com/myoperator/internal/backup"
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

// TestSummarizeWAL: WAL summaries, which incremental backups read, are on
// for data of 17 or later with incremental backups asked for, and never
// for 15, whose server would refuse the setting and not start.
func TestSummarizeWAL(t *testing.T) {
	for _, tc := range []struct {
		major     string
		fullEvery int
		want      bool
	}{{"17", 4, true}, {"18", 2, true}, {"17", 0, false}, {"15", 4, false}, {"16", 4, false}, {"", 4, false}} {
		dir := t.TempDir()
		if tc.major != "" {
			if err := os.WriteFile(filepath.Join(dir, "PG_VERSION"), []byte(tc.major+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		c := Config{PGData: dir, Backup: &backup.Config{}, FullEvery: tc.fullEvery}
		if got := slices.Contains(c.archiveArgs(), "summarize_wal=on"); got != tc.want {
			t.Errorf("data of %q, fullEvery %d: summarize_wal=on %v, want %v", tc.major, tc.fullEvery, got, tc.want)
		}
	}
}

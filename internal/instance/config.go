// Package instance is the instance manager: the first process of every
// MyDatabase database container. It prepares the data directory (a new
// primary's initdb, a replica's clone), runs PostgreSQL as its child,
// turns the kubelet's SIGTERM into a fast shutdown, and reaps orphans as
// PID 1 must. The same code runs in the pod and in test/postgres.
//
// Invariants it keeps (they were those of run.sh, the shell entrypoint it
// replaced):
//   - a new data directory is made in a scratch directory and renamed into
//     place only when complete, so a crash half way is retried from scratch
//     and never leaves a half-made PGDATA;
//   - the passwords never enter the server's environment, nor any command
//     line: the bootstrap password reaches psql through its environment
//     only (and a legacy replication password, replication.go, libpq
//     through a password file);
//   - a standby never starts with a lower max_connections & co. than the
//     primary whose WAL it replays (see keepPrimaryMinimums).
package instance

import (
	"fmt"

	"os"
	"strconv"
	"strings"
	"time"

	"example.com/myoperator/internal/backup"
	"example.com/myoperator/internal/contract"
)

// Config is the instance's part of the pod: its environment, as
// internal/specs.Env sets it.
type Config struct {
	PodName string // POD_NAME
	PGData  string // PGDATA
	// WALDir is where pg_wal lives on a volume of its own (waldir.go).
	// Optional: without it pg_wal is on the data volume.
	WALDir    string // WAL_DIR
	SocketDir string // PGHOST
	Port      string // PGPORT
	ConfigDir string // CONFIG_DIR: postgresql.conf and pg_hba.conf
	// TLSDir holds the server certificate Secret's files (tls.go).
	// Optional: without it the server offers no TLS.
	TLSDir string // TLS_DIR
	// ReplicationTLSDir holds the replicas' client certificate Secret's
	// files, and the CA the server checks client certificates with.
	ReplicationTLSDir string // REPLICATION_TLS_DIR

	User     string // POSTGRES_USER
	Database string // POSTGRES_DB
	Password string // POSTGRES_PASSWORD
	// ReplicationPassword is set only in the pods of a MyDatabase made
	// before replicas authenticated by certificate (replication.go).
	ReplicationPassword string // REPLICATION_PASSWORD, optional

	// BootstrapPod is the pod that makes the data when the MyDatabase is
	// new (ordinal 0); afterwards the primary is whoever holds the Lease.
	BootstrapPod string // BOOTSTRAP_POD
	Namespace    string // NAMESPACE
	LeaseName    string // LEASE_NAME: the MyDatabase's primary Lease
	// PodSelector selects the pods of this MyDatabase (its instances).
	PodSelector string // POD_SELECTOR
	// AdvertiseAddress is host:port where the other instances reach this
	// server: the pod's name on the headless Service.
	AdvertiseAddress string // ADVERTISE_ADDRESS
	// LeaseDuration sets every delay of the HA loop (see timing).
	LeaseDuration time.Duration // LEASE_DURATION_SECONDS

	// Kubeconfig, when set, is used instead of the pod's service account
	// (test harnesses run the instance manager outside a pod).
	Kubeconfig string // KUBECONFIG, optional

	// PasswordSecrets names, as role=Secret pairs, the Secrets whose
	// passwords the primary sets on the roles (rotate.go). Optional:
	// empty disables rotation.
	PasswordSecrets string // PASSWORD_SECRETS

	// MetricsAddress is where the metrics are served (pgmetrics); empty
	// serves none. CustomQueries is the custom queries' file, optional.
	MetricsAddress string // METRICS_ADDRESS
	CustomQueries  string // CUSTOM_QUERIES
	// FailsafeAddress is where the other instances reach this one's
	// failsafe endpoint (failsafe.go); by default the host of
	// AdvertiseAddress and the port of MetricsAddress. Optional: test
	// harnesses route it through a proxy they can cut.
	FailsafeAddress string // FAILSAFE_ADDRESS, optional

	// Backup is the object store the primary archives its WAL to
	// (BACKUP_*, archive.go); nil without spec.backup.
	Backup *backup.Config
	// Retention is which base backups the primary keeps in it
	// (BACKUP_RETENTION_WINDOW, BACKUP_RETENTION_KEEP); zero keeps all.
	Retention backup.Retention
	// FullEvery makes base backups incremental on PostgreSQL 17 or later,
	// with a full one every FullEvery backups (BACKUP_INCREMENTAL_FULL_EVERY,
	// backup.NextParent); 0: every backup full.
	FullEvery int
	// Restore is what a new primary is restored from instead of initdb
	// (RESTORE_*, restore.go); nil without spec.bootstrap.recovery.
	Restore *Restore
	// Replica is the source's object store of a replica MyDatabase
	// (REPLICA_*, replica.go): its base backup makes the data, and the
	// designated primary replays its archive; nil without spec.replica.
	Replica *backup.Config
	// ReplicaStream is the source's primary a replica MyDatabase streams
	// from (REPLICA_STREAM_*, replica.go); nil without
	// spec.replica.source.streaming.
	ReplicaStream *ReplicaStream

	// Self is this program's path, which the server's archive and restore
	// commands run.
	Self string
	// environ is the environment this process started with, passwords
	// included, which a re-execution passes on (reexec.go).
	environ []string
}

// secretVars are the environment variables that hold passwords: read once,
// then removed from this process's environment, so that no child inherits
// them unless it is given them.
var secretVars = []string{contract.EnvPassword, contract.EnvReplicationPassword,
	contract.BackupStore + contract.StoreSecretAccessKey, contract.RestoreStore + contract.StoreSecretAccessKey,
	contract.ReplicaStore + contract.StoreSecretAccessKey}

// ConfigFromEnv reads the Config, every variable required, and removes the
// passwords from the environment.
func ConfigFromEnv() (Config, error) {
	c := Config{environ: os.Environ()}
	var missing []string
	var leaseSeconds string
	for _, v := range []struct {
		name  string
		field *string
	}{
		{contract.EnvPodName, &c.PodName}, {contract.EnvPGData, &c.PGData}, {contract.EnvSocketDir, &c.SocketDir}, {contract.EnvPort, &c.Port},
		{contract.EnvConfigDir, &c.ConfigDir}, {contract.EnvUser, &c.User}, {contract.EnvDatabase, &c.Database},
		{contract.EnvPassword, &c.Password}, {contract.EnvReplicationTLSDir, &c.ReplicationTLSDir},
		{contract.EnvBootstrapPod, &c.BootstrapPod}, {contract.EnvNamespace, &c.Namespace}, {contract.EnvLeaseName, &c.LeaseName},
		{contract.EnvPodSelector, &c.PodSelector}, {contract.EnvAdvertiseAddress, &c.AdvertiseAddress}, {contract.EnvLeaseDurationSeconds, &leaseSeconds},
	} {
		if *v.field = os.Getenv(v.name); *v.field == "" {
			missing = append(missing, v.name)
		}
	}
	c.Kubeconfig, c.TLSDir, c.ReplicationPassword = os.Getenv(contract.EnvKubeconfig), os.Getenv(contract.EnvTLSDir), os.Getenv(contract.EnvReplicationPassword)
	c.WALDir = os.Getenv(contract.EnvWALDir)
	c.Backup = storeFromEnv(contract.BackupStore)
	restore, restoreErr := restoreFromEnv()
	c.Restore = restore
	c.Replica = storeFromEnv(contract.ReplicaStore)
	if host := os.Getenv(contract.EnvReplicaStreamHost); host != "" {
		c.ReplicaStream = &ReplicaStream{Host: host, Port: os.Getenv(contract.EnvReplicaStreamPort), TLSDir: os.Getenv(contract.EnvReplicaStreamTLSDir)}
	}
	for _, v := range secretVars {
		if err := os.Unsetenv(v); err != nil {
			return c, err
		}
	}
	if len(missing) > 0 {
		return c, fmt.Errorf("the container environment lacks %s", strings.Join(missing, ", "))
	}
	if restoreErr != nil {
		return c, restoreErr
	}
	n, err := strconv.Atoi(leaseSeconds)
	if err != nil || n < 2 {
		return c, fmt.Errorf("LEASE_DURATION_SECONDS is %q, want a whole number of seconds, at least 2", leaseSeconds)
	}
	c.LeaseDuration = time.Duration(n) * time.Second
	c.PasswordSecrets = os.Getenv(contract.EnvPasswordSecrets)
	c.MetricsAddress, c.CustomQueries = os.Getenv(contract.EnvMetricsAddress), os.Getenv(contract.EnvCustomQueries)
	c.FailsafeAddress = os.Getenv(contract.EnvFailsafeAddress)
	if w := os.Getenv(contract.EnvBackupRetentionWindow); w != "" {
		if c.Retention.Window, err = backup.ParseWindow(w); err != nil {
			return c, fmt.Errorf("BACKUP_RETENTION_WINDOW: %w", err)
		}
	}
	if k := os.Getenv(contract.EnvBackupRetentionKeep); k != "" {
		if c.Retention.Keep, err = strconv.Atoi(k); err != nil || c.Retention.Keep < 1 {
			return c, fmt.Errorf("BACKUP_RETENTION_KEEP is %q, want a whole number, at least 1", k)
		}
	}
	if n := os.Getenv(contract.EnvBackupFullEvery); n != "" {
		if c.FullEvery, err = strconv.Atoi(n); err != nil || c.FullEvery < 2 {
			return c, fmt.Errorf("%s is %q, want a whole number, at least 2", contract.EnvBackupFullEvery, n)
		}
	}
	return c, nil
}

// storeFromEnv reads an object store's variables (prefix ENDPOINT,
// BUCKET, PATH, REGION, ACCESS_KEY_ID, SECRET_ACCESS_KEY, and the
// optional IDENTITIES_FILE and ENCRYPTION_SECRET); nil when there is no
// endpoint. The identities stay in their file: the store reads them when
// it is opened.
func storeFromEnv(prefix string) *backup.Config {
	if os.Getenv(prefix+contract.StoreEndpoint) == "" {
		return nil
	}
	c := &backup.Config{Endpoint: os.Getenv(prefix + contract.StoreEndpoint), Bucket: os.Getenv(prefix + contract.StoreBucket),
		Path: os.Getenv(prefix + contract.StorePath), Region: os.Getenv(prefix + contract.StoreRegion),
		AccessKeyID: os.Getenv(prefix + contract.StoreAccessKeyID), SecretAccessKey: os.Getenv(prefix + contract.StoreSecretAccessKey)}
	if file := os.Getenv(prefix + contract.StoreIdentitiesFile); file != "" {
		c.Encryption = &backup.Encryption{IdentitiesFile: file, Secret: os.Getenv(prefix + contract.StoreEncryptionSecret)}
	}
	return c
}

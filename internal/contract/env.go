package contract

// The environment of the database container: the operator sets it
// (internal/specs.Env), the instance manager reads it
// (internal/instance.ConfigFromEnv). Every variable is required unless its
// comment says optional.
const (
	EnvPodName   = "POD_NAME"
	EnvNamespace = "NAMESPACE"
	EnvPGData    = "PGDATA"
	// EnvWALDir is a directory on a volume of its own for pg_wal (with
	// spec.walStorage): before every start of the server the instance
	// manager makes PGDATA/pg_wal a symbolic link to it, moving the WAL
	// there when pg_wal is still a directory. Optional.
	EnvWALDir = "WAL_DIR"
	// EnvSocketDir and EnvPort are libpq's own names, so that psql in the
	// container reaches the server without arguments.
	EnvSocketDir = "PGHOST"
	EnvPort      = "PGPORT"
	// EnvConfigDir holds PostgresConfFile and HBAConfFile.
	EnvConfigDir = "CONFIG_DIR"
	// EnvTLSDir holds the server certificate Secret's files. Optional:
	// without it the server offers no TLS.
	EnvTLSDir = "TLS_DIR"
	// EnvReplicationTLSDir holds the replicas' client certificate and the
	// CA the server checks client certificates with.
	EnvReplicationTLSDir = "REPLICATION_TLS_DIR"

	EnvUser     = "POSTGRES_USER"
	EnvDatabase = "POSTGRES_DB"
	EnvPassword = "POSTGRES_PASSWORD"
	// EnvReplicationPassword is set only in the pods of a MyDatabase made
	// before replicas authenticated by certificate. Optional.
	EnvReplicationPassword = "REPLICATION_PASSWORD"

	// EnvBootstrapPod makes the data when the MyDatabase is new.
	EnvBootstrapPod = "BOOTSTRAP_POD"
	// EnvLeaseName is the MyDatabase's primary Lease.
	EnvLeaseName = "LEASE_NAME"
	// EnvPodSelector selects the pods of this MyDatabase (its instances).
	EnvPodSelector = "POD_SELECTOR"
	// EnvAdvertiseAddress is host:port where the other instances reach
	// this server.
	EnvAdvertiseAddress = "ADVERTISE_ADDRESS"
	// EnvLeaseDurationSeconds sets every delay of the HA loop.
	EnvLeaseDurationSeconds = "LEASE_DURATION_SECONDS"
	// EnvPasswordSecrets names, as role=Secret pairs, the Secrets whose
	// passwords the primary sets on the roles. Optional.
	EnvPasswordSecrets = "PASSWORD_SECRETS"

	// EnvMetricsAddress is where the metrics (and the failsafe endpoint)
	// are served. Optional.
	EnvMetricsAddress = "METRICS_ADDRESS"
	// EnvCustomQueries is the custom queries' file. Optional.
	EnvCustomQueries = "CUSTOM_QUERIES"
	// EnvFailsafeAddress is where the other instances reach this one's
	// failsafe endpoint. Optional: by default the host of
	// EnvAdvertiseAddress and the port of EnvMetricsAddress.
	EnvFailsafeAddress = "FAILSAFE_ADDRESS"
	// EnvKubeconfig is used instead of the pod's service account when set
	// (test harnesses run the instance manager outside a pod). Optional.
	EnvKubeconfig = "KUBECONFIG"

	// EnvBackupRetentionWindow and EnvBackupRetentionKeep are which base
	// backups the primary keeps in its object store. Optional.
	EnvBackupRetentionWindow = "BACKUP_RETENTION_WINDOW"
	EnvBackupRetentionKeep   = "BACKUP_RETENTION_KEEP"
	// EnvBackupFullEvery makes base backups incremental on PostgreSQL 17
	// or later, with a full one every this many backups
	// (spec.backup.incremental.fullEvery). Optional: every backup full.
	EnvBackupFullEvery = "BACKUP_INCREMENTAL_FULL_EVERY"

	// EnvRestoreBackupID and the EnvRestoreTarget variables are what a new
	// primary is restored to (spec.bootstrap.recovery). Optional.
	EnvRestoreBackupID        = "RESTORE_BACKUP_ID"
	EnvRestoreTargetTime      = "RESTORE_TARGET_TIME"
	EnvRestoreTargetLSN       = "RESTORE_TARGET_LSN"
	EnvRestoreTargetName      = "RESTORE_TARGET_NAME"
	EnvRestoreTargetImmediate = "RESTORE_TARGET_IMMEDIATE"

	// EnvReplicaStreamHost and EnvReplicaStreamPort are the source's
	// primary a replica MyDatabase streams from (spec.replica.source.
	// streaming); EnvReplicaStreamTLSDir holds the client certificate and
	// the source's CA. Optional.
	EnvReplicaStreamHost   = "REPLICA_STREAM_HOST"
	EnvReplicaStreamPort   = "REPLICA_STREAM_PORT"
	EnvReplicaStreamTLSDir = "REPLICA_STREAM_TLS_DIR"
)

// An object store takes six variables (eight when encrypted), each of its prefix and one of the
// Store suffixes: the store the primary archives to (BackupStore), the
// one a new primary is restored from (RestoreStore), and the source's of a
// replica MyDatabase (ReplicaStore), whose base backup makes its data and
// whose archive its designated primary replays. Optional: a store without
// an endpoint is none.
const (
	BackupStore  = "BACKUP_"
	RestoreStore = "RESTORE_"
	ReplicaStore = "REPLICA_"

	StoreEndpoint        = "ENDPOINT"
	StoreBucket          = "BUCKET"
	StorePath            = "PATH"
	StoreRegion          = "REGION"
	StoreAccessKeyID     = "ACCESS_KEY_ID"
	StoreSecretAccessKey = "SECRET_ACCESS_KEY"

	// StoreIdentitiesFile is the file of the age identities that encrypt
	// and decrypt the store's objects (the encryption Secret, mounted
	// read-only: the key itself is never a variable), and
	// StoreEncryptionSecret the Secret's name, for the errors. Optional,
	// for BackupStore and RestoreStore: without them the store is not
	// encrypted.
	StoreIdentitiesFile   = "IDENTITIES_FILE"
	StoreEncryptionSecret = "ENCRYPTION_SECRET"
)

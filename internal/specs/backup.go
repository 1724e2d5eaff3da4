package specs

import (
	"strconv"
	"time"

	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
)

// Keys of an object store's credentials Secret.
const (
	ObjectStoreAccessKeyIDKey     = "ACCESS_KEY_ID"
	ObjectStoreSecretAccessKeyKey = "SECRET_ACCESS_KEY"
)

// BackupPath is the prefix of the database's objects in spec.backup's
// bucket: the path given, or <namespace>/<name>.
func BackupPath(db *databasev1alpha1.MyDatabase) string {
	if db.Spec.Backup == nil {
		return ""
	}
	if p := db.Spec.Backup.ObjectStore.Path; p != "" {
		return p
	}
	return db.Namespace + "/" + db.Name
}

// Recovery is spec.bootstrap.recovery, nil without one.
func Recovery(db *databasev1alpha1.MyDatabase) *databasev1alpha1.RecoverySpec {
	if db.Spec.Bootstrap == nil {
		return nil
	}
	return db.Spec.Bootstrap.Recovery
}

// storeEnv is the environment of one object store, under prefix, at
// path: its credentials come from their Secret.
func storeEnv(prefix string, s databasev1alpha1.ObjectStore, path string) []*corev1ac.EnvVarApplyConfiguration {
	secret := func(key string) *corev1ac.EnvVarSourceApplyConfiguration {
		return corev1ac.EnvVarSource().WithSecretKeyRef(corev1ac.SecretKeySelector().WithName(s.CredentialsSecret).WithKey(key))
	}
	return []*corev1ac.EnvVarApplyConfiguration{
		corev1ac.EnvVar().WithName(prefix + contract.StoreEndpoint).WithValue(s.Endpoint),
		corev1ac.EnvVar().WithName(prefix + contract.StoreBucket).WithValue(s.Bucket),
		corev1ac.EnvVar().WithName(prefix + contract.StorePath).WithValue(path),
		corev1ac.EnvVar().WithName(prefix + contract.StoreRegion).WithValue(s.Region),
		corev1ac.EnvVar().WithName(prefix + contract.StoreAccessKeyID).WithValueFrom(secret(ObjectStoreAccessKeyIDKey)),
		corev1ac.EnvVar().WithName(prefix + contract.StoreSecretAccessKey).WithValueFrom(secret(ObjectStoreSecretAccessKeyKey)),
	}
}

// backupEnv is the environment of the instance manager for spec.backup
// (BACKUP_*: the store its primary archives to), spec.bootstrap.recovery
// (RESTORE_*: the store and target a new primary is restored from) and
// spec.replica (REPLICA_*: the source's store, for as long as spec.replica
// is there, so that promoting, which the Lease says, restarts no pod). The secret keys come from the credentials Secrets;
// the instance manager keeps them out of the server's environment.
func backupEnv(db *databasev1alpha1.MyDatabase) []*corev1ac.EnvVarApplyConfiguration {
	var env []*corev1ac.EnvVarApplyConfiguration
	store := func(prefix string, s databasev1alpha1.ObjectStore, path string) {
		env = append(env, storeEnv(prefix, s, path)...)
	}
	if b := db.Spec.Backup; b != nil {
		store(contract.BackupStore, b.ObjectStore, BackupPath(db))
		if r := b.Retention; r != nil {
			if r.RecoveryWindow != "" {
				env = append(env, corev1ac.EnvVar().WithName(contract.EnvBackupRetentionWindow).WithValue(r.RecoveryWindow))
			}
			if r.Keep != nil {
				env = append(env, corev1ac.EnvVar().WithName(contract.EnvBackupRetentionKeep).WithValue(strconv.Itoa(int(*r.Keep))))
			}
		}
		if inc := b.Incremental; inc != nil {
			env = append(env, corev1ac.EnvVar().WithName(contract.EnvBackupFullEvery).WithValue(strconv.Itoa(int(inc.FullEvery))))
		}
	}
	if rep := Replica(db); rep != nil && rep.Source.ObjectStore != nil {
		store(contract.ReplicaStore, *rep.Source.ObjectStore, rep.Source.ObjectStore.Path)
	}
	r := Recovery(db)
	if r == nil {
		return env
	}
	store(contract.RestoreStore, r.ObjectStore, r.ObjectStore.Path)
	value := func(name, v string) {
		if v != "" {
			env = append(env, corev1ac.EnvVar().WithName(name).WithValue(v))
		}
	}
	value(contract.EnvRestoreBackupID, r.BackupID)
	if t := r.Target; t != nil {
		if t.Time != nil {
			value(contract.EnvRestoreTargetTime, t.Time.UTC().Format(time.RFC3339))
		}
		value(contract.EnvRestoreTargetLSN, t.LSN)
		value(contract.EnvRestoreTargetName, t.Name)
		if t.Immediate {
			value(contract.EnvRestoreTargetImmediate, "true")
		}
	}
	return env
}

package specs

import (
	"path/filepath"

	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/backup/agekey"
	"example.com/myoperator/internal/contract"
)

// Where the encryption Secrets of spec.backup and spec.bootstrap.recovery
// are mounted in the database container: read-only, the key identities
// alone, as a file readable by the postgres group (fsGroup) and no one
// else. The instance manager reads it at every wal-push, wal-fetch and
// backup, so a rotation reaches it when the kubelet updates the volume,
// without a restart.
const (
	BackupEncryptionDir  = "/etc/mydatabase-backup-encryption"
	RestoreEncryptionDir = "/etc/mydatabase-restore-encryption"
	ReplicaEncryptionDir = "/etc/mydatabase-replica-encryption"

	backupEncryptionVolume  = "backup-encryption"
	restoreEncryptionVolume = "restore-encryption"
	replicaEncryptionVolume = "replica-encryption"
)

// EncryptionIdentitiesKey is the key of an encryption Secret.
const EncryptionIdentitiesKey = agekey.SecretKey

// encryptedStore is one store's encryption, as the pod takes it.
type encryptedStore struct {
	prefix, volume, dir string
	spec                *databasev1alpha1.BackupEncryption
}

// encryptedStores are db's stores with an encryption.
func encryptedStores(db *databasev1alpha1.MyDatabase) []encryptedStore {
	var out []encryptedStore
	if b := db.Spec.Backup; b != nil && b.Encryption != nil {
		out = append(out, encryptedStore{contract.BackupStore, backupEncryptionVolume, BackupEncryptionDir, b.Encryption})
	}
	if r := Recovery(db); r != nil && r.Encryption != nil {
		out = append(out, encryptedStore{contract.RestoreStore, restoreEncryptionVolume, RestoreEncryptionDir, r.Encryption})
	}
	if rep := Replica(db); rep != nil && rep.Source.ObjectStore != nil && rep.Source.Encryption != nil {
		out = append(out, encryptedStore{contract.ReplicaStore, replicaEncryptionVolume, ReplicaEncryptionDir, rep.Source.Encryption})
	}
	return out
}

// encryptionEnv names each encrypted store's identities file and Secret.
func encryptionEnv(db *databasev1alpha1.MyDatabase) []*corev1ac.EnvVarApplyConfiguration {
	stores := encryptedStores(db)
	env := make([]*corev1ac.EnvVarApplyConfiguration, 0, 2*len(stores))
	for _, s := range stores {
		env = append(env, s.env()...)
	}
	return env
}

// encryptionVolumes are the encryption Secrets, their key identities
// alone, mode 0440 (root and the fsGroup, postgres).
func encryptionVolumes(db *databasev1alpha1.MyDatabase) []*corev1ac.VolumeApplyConfiguration {
	stores := encryptedStores(db)
	vs := make([]*corev1ac.VolumeApplyConfiguration, 0, len(stores))
	for _, s := range stores {
		vs = append(vs, s.volumeSource())
	}
	return vs
}

// encryptionMounts mount encryptionVolumes read-only in the database
// container.
func encryptionMounts(db *databasev1alpha1.MyDatabase) []*corev1ac.VolumeMountApplyConfiguration {
	stores := encryptedStores(db)
	ms := make([]*corev1ac.VolumeMountApplyConfiguration, 0, len(stores))
	for _, s := range stores {
		ms = append(ms, s.mount())
	}
	return ms
}

// env names the store's identities file and Secret.
func (s encryptedStore) env() []*corev1ac.EnvVarApplyConfiguration {
	return []*corev1ac.EnvVarApplyConfiguration{
		corev1ac.EnvVar().WithName(s.prefix + contract.StoreIdentitiesFile).WithValue(filepath.Join(s.dir, EncryptionIdentitiesKey)),
		corev1ac.EnvVar().WithName(s.prefix + contract.StoreEncryptionSecret).WithValue(s.spec.Secret),
	}
}

// volumeSource is the Secret's key identities alone, mode 0440 (root and
// the fsGroup, postgres).
func (s encryptedStore) volumeSource() *corev1ac.VolumeApplyConfiguration {
	return corev1ac.Volume().WithName(s.volume).WithSecret(corev1ac.SecretVolumeSource().
		WithSecretName(s.spec.Secret).WithDefaultMode(0o440).
		WithItems(corev1ac.KeyToPath().WithKey(EncryptionIdentitiesKey).WithPath(EncryptionIdentitiesKey)))
}

// mount mounts the volume read-only.
func (s encryptedStore) mount() *corev1ac.VolumeMountApplyConfiguration {
	return corev1ac.VolumeMount().WithName(s.volume).WithMountPath(s.dir).WithReadOnly(true)
}

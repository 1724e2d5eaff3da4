package specs

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// TestEncryptionKeyAsFile: the encryption Secrets of spec.backup and
// spec.bootstrap.recovery reach the database container as read-only
// files of their key identities alone, mode 0440 (the postgres group
// through fsGroup); the environment names the files and the Secrets,
// never takes a value from them.
func TestEncryptionKeyAsFile(t *testing.T) {
	store := databasev1alpha1.ObjectStore{Endpoint: "https://s3.example.com", Bucket: "backups", Path: "shop/old", CredentialsSecret: "s3"}
	sts := typed[appsv1.StatefulSet](t, StatefulSet(db(func(d *databasev1alpha1.MyDatabase) {
		d.Spec.Backup = &databasev1alpha1.BackupSpec{ObjectStore: store, Encryption: &databasev1alpha1.BackupEncryption{Secret: "orders-backup-key"}}
		d.Spec.Bootstrap = &databasev1alpha1.BootstrapSpec{Recovery: &databasev1alpha1.RecoverySpec{ObjectStore: store,
			Encryption: &databasev1alpha1.BackupEncryption{Secret: "old-backup-key"}}}
	}), Platform{}))
	pod := sts.Spec.Template.Spec
	volume := func(name, secret string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret,
			Items: []corev1.KeyToPath{{Key: "identities", Path: "identities"}}, DefaultMode: new(int32(0o440))}}}
	}
	want := []corev1.Volume{volume("backup-encryption", "orders-backup-key"), volume("restore-encryption", "old-backup-key")}
	var got []corev1.Volume
	for _, v := range pod.Volumes {
		if strings.HasSuffix(v.Name, "-encryption") {
			got = append(got, v)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("encryption volumes (-want +got):\n%s", diff)
	}
	wantMounts := []corev1.VolumeMount{{Name: "backup-encryption", MountPath: BackupEncryptionDir, ReadOnly: true},
		{Name: "restore-encryption", MountPath: RestoreEncryptionDir, ReadOnly: true}}
	var mounts []corev1.VolumeMount
	for _, m := range pod.Containers[0].VolumeMounts {
		if strings.HasSuffix(m.Name, "-encryption") {
			mounts = append(mounts, m)
		}
	}
	if diff := cmp.Diff(wantMounts, mounts); diff != "" {
		t.Errorf("encryption mounts (-want +got):\n%s", diff)
	}
	env := map[string]string{}
	for _, e := range pod.Containers[0].Env {
		env[e.Name] = e.Value
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && strings.HasSuffix(e.ValueFrom.SecretKeyRef.Name, "-key") {
			t.Errorf("%s takes a value of the encryption Secret %s", e.Name, e.ValueFrom.SecretKeyRef.Name)
		}
	}
	wantEnv := map[string]string{
		"BACKUP_IDENTITIES_FILE": BackupEncryptionDir + "/identities", "BACKUP_ENCRYPTION_SECRET": "orders-backup-key",
		"RESTORE_IDENTITIES_FILE": RestoreEncryptionDir + "/identities", "RESTORE_ENCRYPTION_SECRET": "old-backup-key",
	}
	for k, v := range wantEnv {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	plain := typed[appsv1.StatefulSet](t, StatefulSet(db(func(d *databasev1alpha1.MyDatabase) {
		d.Spec.Backup = &databasev1alpha1.BackupSpec{ObjectStore: store}
	}), Platform{}))
	for _, v := range plain.Spec.Template.Spec.Volumes {
		if strings.HasSuffix(v.Name, "-encryption") {
			t.Errorf("without encryption, volume %s", v.Name)
		}
	}
}

// TestReplicaSourceKeyAsFile: a replica MyDatabase of an encrypted
// archive gets spec.replica.source.encryption's Secret the same way.
func TestReplicaSourceKeyAsFile(t *testing.T) {
	store := databasev1alpha1.ObjectStore{Endpoint: "https://s3.example.com", Bucket: "backups", Path: "shop/orders", CredentialsSecret: "s3"}
	sts := typed[appsv1.StatefulSet](t, StatefulSet(db(func(d *databasev1alpha1.MyDatabase) {
		d.Spec.Replica = &databasev1alpha1.ReplicaSpec{Enabled: true, Source: databasev1alpha1.ReplicaSource{ObjectStore: &store,
			Encryption: &databasev1alpha1.BackupEncryption{Secret: "orders-backup-key"}}}
	}), Platform{}))
	pod := sts.Spec.Template.Spec
	found := false
	for _, v := range pod.Volumes {
		if v.Name == "replica-encryption" {
			found = v.Secret != nil && v.Secret.SecretName == "orders-backup-key" && *v.Secret.DefaultMode == 0o440
		}
	}
	if !found {
		t.Errorf("no volume replica-encryption of Secret orders-backup-key, mode 0440: %+v", pod.Volumes)
	}
	if !slices.ContainsFunc(pod.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "replica-encryption" && m.MountPath == ReplicaEncryptionDir && m.ReadOnly
	}) {
		t.Errorf("replica-encryption is not mounted read-only at %s", ReplicaEncryptionDir)
	}
	if !slices.ContainsFunc(pod.Containers[0].Env, func(e corev1.EnvVar) bool {
		return e.Name == "REPLICA_IDENTITIES_FILE" && e.Value == ReplicaEncryptionDir+"/identities"
	}) {
		t.Error("REPLICA_IDENTITIES_FILE does not name the mounted identities")
	}
}

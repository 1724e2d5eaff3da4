package specs

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
)

// ComponentVerify labels the pod of a backup's verification. It is not
// ComponentDatabase: no Service, PodDisruptionBudget, NetworkPolicy or
// StatefulSet selects it, and the operator never takes it for a server.
const ComponentVerify = "verify"

// Paths of the verification pod.
const (
	verifyVolume    = "restore"
	verifyMountPath = "/var/lib/postgresql/verify"
	// VerifyContainerName is the container that restores and checks.
	VerifyContainerName = "verify"
	// verifyDeadline bounds a verification: a restore that has not ended
	// in a day is stopped, and reported as an error.
	verifyDeadline = 24 * time.Hour
)

// VerifyPodName is the pod that verifies backup b.
func VerifyPodName(b *databasev1alpha1.MyDatabaseBackup) string { return b.Name + "-verify" }

// VerifyPod restores base backup b of db, with the archive after it, and
// checks what it restored (instance verify; docs/backup.md, "Verified
// backups"). It is the servers' pod cut down to what a restore needs:
//   - the database's image and resources, and where the servers may run;
//   - an ephemeral volume as large as the servers' volumes, of their
//     storage class, which Kubernetes deletes with the pod;
//   - the object store as a restore reads it (RESTORE_*), its key
//     mounted as the servers' is, and no Kubernetes token: it talks to
//     no one but the store;
//   - its result in the termination message, which the operator reads.
//
// It is owned by b, so deleting the backup deletes it.
func VerifyPod(db *databasev1alpha1.MyDatabase, b *databasev1alpha1.MyDatabaseBackup, p Platform) *corev1.Pod {
	env := []*corev1ac.EnvVarApplyConfiguration{
		corev1ac.EnvVar().WithName(contract.EnvPodName).WithValueFrom(corev1ac.EnvVarSource().
			WithFieldRef(corev1ac.ObjectFieldSelector().WithFieldPath("metadata.name"))),
		corev1ac.EnvVar().WithName(contract.EnvPGData).WithValue(verifyMountPath + "/pgdata"),
		corev1ac.EnvVar().WithName(contract.EnvSocketDir).WithValue(SocketDir),
		corev1ac.EnvVar().WithName(contract.EnvRestoreBackupID).WithValue(b.Status.BackupID),
		corev1ac.EnvVar().WithName(contract.EnvVerifyResultFile).WithValue(corev1.TerminationMessagePathDefault),
	}
	env = append(env, storeEnv(contract.RestoreStore, db.Spec.Backup.ObjectStore, BackupPath(db))...)
	mounts := []*corev1ac.VolumeMountApplyConfiguration{
		corev1ac.VolumeMount().WithName(verifyVolume).WithMountPath(verifyMountPath),
		corev1ac.VolumeMount().WithName(instanceManagerVolume).WithMountPath(InstanceManagerDir).WithReadOnly(true),
		corev1ac.VolumeMount().WithName("run").WithMountPath(SocketDir),
		corev1ac.VolumeMount().WithName("tmp").WithMountPath("/tmp"),
	}
	volumes := []*corev1ac.VolumeApplyConfiguration{
		corev1ac.Volume().WithName(verifyVolume).WithEphemeral(corev1ac.EphemeralVolumeSource().
			WithVolumeClaimTemplate(corev1ac.PersistentVolumeClaimTemplate().
				WithLabels(verifyLabels(db)).
				WithSpec(verifyClaim(db, b)))),
		corev1ac.Volume().WithName(instanceManagerVolume).WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
		corev1ac.Volume().WithName("run").WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
		corev1ac.Volume().WithName("tmp").WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
	}
	if e := db.Spec.Backup.Encryption; e != nil {
		key := encryptedStore{contract.RestoreStore, restoreEncryptionVolume, RestoreEncryptionDir, e}
		env, mounts, volumes = append(env, key.env()...), append(mounts, key.mount()), append(volumes, key.volumeSource())
	}
	verify := corev1ac.Container().
		WithName(VerifyContainerName).
		WithImage(Image(db)).
		WithCommand(InstanceManagerPath, contract.VerifyCommand).
		WithEnv(env...).
		WithVolumeMounts(mounts...).
		WithTerminationMessagePath(corev1.TerminationMessagePathDefault).
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError).
		WithSecurityContext(restrictedContainer())
	if r := resources(db); r != nil {
		verify.WithResources(r)
	}
	spec := corev1ac.PodSpec().
		WithRestartPolicy(corev1.RestartPolicyNever).
		WithActiveDeadlineSeconds(int64(verifyDeadline / time.Second)).
		WithAutomountServiceAccountToken(false).
		WithEnableServiceLinks(false).
		WithSecurityContext(postgresPodSecurity()).
		WithInitContainers(instanceManagerInstaller(p)).
		WithContainers(verify).
		WithVolumes(volumes...)
	place(spec, db.Spec.NodeSelector, db.Spec.Tolerations, db.Spec.PriorityClassName, nil)
	pod := corev1ac.Pod(VerifyPodName(b), b.Namespace).
		WithLabels(verifyLabels(db)).
		WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(databasev1alpha1.GroupVersion.String()).WithKind("MyDatabaseBackup").
			WithName(b.Name).WithUID(b.UID).WithController(true).WithBlockOwnerDeletion(true)).
		WithSpec(spec)
	return convert[corev1.Pod](pod)
}

// verifyLabels are a child's labels without LabelOwnerUID: the pod and
// its volume are the backup's, not the MyDatabase's, and the MyDatabase's
// deletion must not take (or, under Retain, release) them as its own.
func verifyLabels(db *databasev1alpha1.MyDatabase) map[string]string {
	l := Labels(db, ComponentVerify)
	delete(l, databasev1alpha1.LabelOwnerUID)
	return l
}

// verifyClaim is the verification's volume: room for the data and the
// WAL of a server, of the data volume's storage class; for an
// incremental backup b, room for the data once more, where its chain is
// unpacked before pg_combinebackup writes the data from it.
func verifyClaim(db *databasev1alpha1.MyDatabase, b *databasev1alpha1.MyDatabaseBackup) *corev1ac.PersistentVolumeClaimSpecApplyConfiguration {
	size := resource.Quantity{}
	for _, v := range Volumes(db) {
		size.Add(v.Size())
	}
	if b.Status.ParentBackupID != "" {
		size.Add(db.Spec.Storage.Size)
	}
	spec := corev1ac.PersistentVolumeClaimSpec().
		WithAccessModes(corev1.ReadWriteOnce).
		WithResources(corev1ac.VolumeResourceRequirements().
			WithRequests(corev1.ResourceList{corev1.ResourceStorage: size}))
	if class := db.Spec.Storage.StorageClassName; class != nil {
		spec.WithStorageClassName(*class)
	}
	return spec
}

package specs

import (
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	batchv1ac "k8s.io/client-go/applyconfigurations/batch/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
)

// Major is the major of a version such as "17" or "17.6"; 0 when it has
// none.
func Major(version string) int {
	major, _, _ := strings.Cut(version, ".")
	n, err := strconv.Atoi(major)
	if err != nil {
		return 0
	}
	return n
}

// UpgradeJobName is the Job of a major version upgrade.
func UpgradeJobName(db *databasev1alpha1.MyDatabase) string { return db.Name + "-upgrade" }

// Containers and paths of the upgrade Job.
const (
	UpgradeContainerName = "upgrade"
	stagedOldDir         = "/old"
	stageVolume          = "old"
	// upgradeBackoffLimit: the Job's pod is retried after a failure that
	// says nothing of the data (evicted, OOM-killed, its node lost); the
	// exit codes of a failure the upgrade explains end the Job at once.
	upgradeBackoffLimit = 2
)

// UpgradeJob runs pg_upgrade on the primary's data volume while every
// server is stopped (internal/controller/mydatabase, upgrade.go):
//   - the operator's image's init container installs the instance manager;
//   - the OLD image's init container stages its PostgreSQL binaries, with
//     the libraries they need, into an emptyDir (instance stage);
//   - the NEW image's container upgrades the data (instance upgrade),
//     leaving the reason of a failure in its termination message and
//     whether the old data is untouched in its exit code; with
//     spec.backup it reads the archive's timelines, which the upgraded
//     cluster's start above.
func UpgradeJob(db *databasev1alpha1.MyDatabase, up *databasev1alpha1.MajorUpgradeStatus, p Platform) *batchv1ac.JobApplyConfiguration {
	from, to := strconv.Itoa(Major(up.From)), strconv.Itoa(Major(up.To))
	labels := Labels(db, databasev1alpha1.ComponentUpgrade)
	mounts := func(extra ...*corev1ac.VolumeMountApplyConfiguration) []*corev1ac.VolumeMountApplyConfiguration {
		return append([]*corev1ac.VolumeMountApplyConfiguration{
			corev1ac.VolumeMount().WithName(instanceManagerVolume).WithMountPath(InstanceManagerDir).WithReadOnly(true),
			corev1ac.VolumeMount().WithName(stageVolume).WithMountPath(stagedOldDir),
			corev1ac.VolumeMount().WithName("tmp").WithMountPath("/tmp"),
		}, extra...)
	}
	upgrade := corev1ac.Container().
		WithName(UpgradeContainerName).
		WithImage(up.ToImage).
		WithCommand(InstanceManagerPath, "upgrade", "--old-major", from, "--new-major", to, "--staged", stagedOldDir).
		WithEnv(corev1ac.EnvVar().WithName(contract.EnvPGData).WithValue(PGDATA),
			corev1ac.EnvVar().WithName(contract.EnvPodName).WithValueFrom(corev1ac.EnvVarSource().
				WithFieldRef(corev1ac.ObjectFieldSelector().WithFieldPath("metadata.name")))).
		WithVolumeMounts(mounts(volumeMounts(db)...)...).
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError).
		WithSecurityContext(restrictedContainer())
	if b := db.Spec.Backup; b != nil {
		// The archive's timelines, which the upgraded cluster's follow
		// (internal/instance, newTimeline); its names alone, no key.
		upgrade.WithEnv(storeEnv(contract.BackupStore, b.ObjectStore, BackupPath(db))...)
	}
	if r := resources(db); r != nil {
		upgrade.WithResources(r)
	}
	// The primary's volumes, mounted where its pod mounts them: pg_wal
	// links to the WAL volume's directory, which the old server pg_upgrade
	// starts reads.
	volumes := Volumes(db)
	claimVolumes := make([]*corev1ac.VolumeApplyConfiguration, 0, len(volumes))
	for _, v := range volumes {
		claimVolumes = append(claimVolumes, corev1ac.Volume().WithName(v.Name).WithPersistentVolumeClaim(
			corev1ac.PersistentVolumeClaimVolumeSource().WithClaimName(v.Name+"-"+up.Primary)))
	}
	stage := corev1ac.Container().
		WithName("stage-old-binaries").
		WithImage(up.FromImage).
		WithCommand(InstanceManagerPath, "stage", "--major", from, stagedOldDir).
		WithVolumeMounts(mounts()...).
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError).
		WithSecurityContext(restrictedContainer())
	spec := corev1ac.PodSpec().
		WithRestartPolicy(corev1.RestartPolicyNever).
		WithAutomountServiceAccountToken(false).
		WithEnableServiceLinks(false).
		WithSecurityContext(postgresPodSecurity()).
		WithInitContainers(instanceManagerInstaller(p), stage).
		WithContainers(upgrade).
		WithVolumes(claimVolumes...).
		WithVolumes(
			corev1ac.Volume().WithName(instanceManagerVolume).WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
			corev1ac.Volume().WithName(stageVolume).WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
			corev1ac.Volume().WithName("tmp").WithEmptyDir(corev1ac.EmptyDirVolumeSource()))
	place(spec, db.Spec.NodeSelector, db.Spec.Tolerations, db.Spec.PriorityClassName, nil)
	return batchv1ac.Job(UpgradeJobName(db), db.Namespace).
		WithLabels(labels).
		WithAnnotations(map[string]string{databasev1alpha1.AnnotationUpgradeAttempt: strconv.FormatInt(up.Generation, 10)}).
		WithOwnerReferences(ownerReferenceApply(db)).
		WithSpec(batchv1ac.JobSpec().
			WithBackoffLimit(upgradeBackoffLimit).
			WithPodFailurePolicy(batchv1ac.PodFailurePolicy().WithRules(
				batchv1ac.PodFailurePolicyRule().
					WithAction(batchv1.PodFailurePolicyActionFailJob).
					WithOnExitCodes(batchv1ac.PodFailurePolicyOnExitCodesRequirement().
						WithContainerName(UpgradeContainerName).
						WithOperator(batchv1.PodFailurePolicyOnExitCodesOpIn).
						WithValues(contract.UpgradeExitOldDataUntouched, contract.UpgradeExitPastPointOfNoReturn)))).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(labels).
				WithSpec(spec)))
}

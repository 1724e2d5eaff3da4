package specs

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
)

func TestMajor(t *testing.T) {
	for v, want := range map[string]int{"15": 15, "17.6": 17, "18.0.1": 18, "": 0, "latest": 0} {
		if got := Major(v); got != want {
			t.Errorf("Major(%q) = %d, want %d", v, got, want)
		}
	}
}

// TestUpgradeJob: the old image stages, the new one upgrades the claim of
// the recorded primary; restricted like the servers, no token; the Job ends
// at once on the upgrade's own exit codes and retries anything else.
func TestUpgradeJob(t *testing.T) {
	d := db()
	up := &databasev1alpha1.MajorUpgradeStatus{From: "15.8", To: "17", FromImage: "mirror/postgres:15.8", ToImage: "postgres:17",
		Primary: d.Name + "-0", Generation: 4}
	job := typed[batchv1.Job](t, UpgradeJob(d, up, Platform{InstanceManagerImage: "op:1"}))
	assertChildMeta(t, d, &job.ObjectMeta)
	if got := job.Annotations[databasev1alpha1.AnnotationUpgradeAttempt]; got != "4" {
		t.Errorf("attempt annotation %q, want the generation 4", got)
	}
	pod := job.Spec.Template.Spec
	images := func(cs []corev1.Container) []string {
		out := make([]string, 0, len(cs))
		for _, c := range cs {
			out = append(out, c.Image)
		}
		return out
	}
	if diff := cmp.Diff([]string{"op:1", "mirror/postgres:15.8"}, images(pod.InitContainers)); diff != "" {
		t.Errorf("init containers (-want +got):\n%s", diff)
	}
	upgrade := pod.Containers[0]
	if upgrade.Image != "postgres:17" || !slices.Equal(upgrade.Command,
		[]string{InstanceManagerPath, "upgrade", "--old-major", "15", "--new-major", "17", "--staged", "/old"}) {
		t.Errorf("upgrade container %s %v", upgrade.Image, upgrade.Command)
	}
	if c := pod.InitContainers[1].Command; !slices.Equal(c, []string{InstanceManagerPath, "stage", "--major", "15", "/old"}) {
		t.Errorf("staging command %v", c)
	}
	for _, e := range upgrade.Env {
		if strings.HasPrefix(e.Name, contract.BackupStore) {
			t.Errorf("without spec.backup the upgrade reads an archive: %s", e.Name)
		}
	}
	d.Spec.Backup = &databasev1alpha1.BackupSpec{ObjectStore: databasev1alpha1.ObjectStore{Endpoint: "https://s3", Bucket: "b", CredentialsSecret: "s3"}}
	archived := typed[batchv1.Job](t, UpgradeJob(d, up, Platform{InstanceManagerImage: "op:1"})).Spec.Template.Spec.Containers[0].Env
	found := map[string]bool{}
	for _, e := range archived {
		found[e.Name] = e.Value != "" || (e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == "s3")
	}
	for _, name := range []string{contract.StoreEndpoint, contract.StoreBucket, contract.StorePath, contract.StoreSecretAccessKey} {
		if !found[contract.BackupStore+name] {
			t.Errorf("with spec.backup the upgrade lacks %s%s (the archive's timelines): %v", contract.BackupStore, name, archived)
		}
	}
	var claim string
	for _, v := range pod.Volumes {
		if v.PersistentVolumeClaim != nil {
			claim = v.PersistentVolumeClaim.ClaimName
		}
		if v.HostPath != nil {
			t.Errorf("volume %s is a hostPath", v.Name)
		}
	}
	if claim != DataVolumeClaimName(d, 0) {
		t.Errorf("the Job mounts claim %q, want %q", claim, DataVolumeClaimName(d, 0))
	}

	// With a WAL volume, the Job mounts the primary's where its pod does:
	// the old server pg_upgrade starts follows pg_wal's link there.
	d.Spec.WALStorage = &databasev1alpha1.StorageSpec{}
	walled := typed[batchv1.Job](t, UpgradeJob(d, up, Platform{InstanceManagerImage: "op:1"})).Spec.Template.Spec
	mounts := map[string]string{}
	for _, m := range walled.Containers[0].VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	claims := map[string]string{}
	for _, v := range walled.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims[v.Name] = v.PersistentVolumeClaim.ClaimName
		}
	}
	if diff := cmp.Diff(map[string]string{DataVolumeName: DataVolumeClaimName(d, 0), WALVolumeName: "wal-" + d.Name + "-0"}, claims); diff != "" {
		t.Errorf("the Job's claims with a WAL volume (-want +got):\n%s", diff)
	}
	if mounts[DataVolumeName] != DataMountPath || mounts[WALVolumeName] != WALMountPath {
		t.Errorf("the upgrade container mounts %v, want the data volume at %s and the WAL volume at %s", mounts, DataMountPath, WALMountPath)
	}
	if pod.RestartPolicy != corev1.RestartPolicyNever || ptr.Deref(pod.AutomountServiceAccountToken, true) {
		t.Errorf("restartPolicy %s, token %v: want Never and no token", pod.RestartPolicy, pod.AutomountServiceAccountToken)
	}
	if psc := pod.SecurityContext; !ptr.Deref(psc.RunAsNonRoot, false) || ptr.Deref(psc.RunAsUser, 0) != PostgresUID ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v", psc)
	}
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		sc := c.SecurityContext
		if sc == nil || ptr.Deref(sc.AllowPrivilegeEscalation, true) || !ptr.Deref(sc.ReadOnlyRootFilesystem, false) ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("container %s security context %+v", c.Name, sc)
		}
	}
	rules := job.Spec.PodFailurePolicy.Rules
	if len(rules) != 1 || rules[0].Action != batchv1.PodFailurePolicyActionFailJob ||
		!slices.Equal(rules[0].OnExitCodes.Values, []int32{contract.UpgradeExitOldDataUntouched, contract.UpgradeExitPastPointOfNoReturn}) ||
		ptr.Deref(rules[0].OnExitCodes.ContainerName, "") != UpgradeContainerName {
		t.Errorf("pod failure policy %+v", job.Spec.PodFailurePolicy)
	}
	if !strings.HasSuffix(job.Name, "-upgrade") || ptr.Deref(job.Spec.BackoffLimit, 0) < 1 {
		t.Errorf("Job %s, backoffLimit %v", job.Name, job.Spec.BackoffLimit)
	}
}

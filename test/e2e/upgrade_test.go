//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// 13. A major version upgrade as far as Kubernetes objects go (no
// container runs here: KWOK completes the Job's pod): spec.version 15 →
// 17 on two servers under deletionPolicy Delete scales the StatefulSet to
// zero on the old image with the claims kept, runs the upgrade Job (the
// old image stages, the new one upgrades ordinal 0's claim), then the
// replica's claim is made again, the servers run postgres:17 and the
// MyDatabase is Ready with status.currentVersion 17, the primary's claim
// the same one, the Job gone. A lower major is then refused at admission.
func TestMajorUpgradeObjects(t *testing.T) {
	ns := newNamespace(t, "upgrade", nil)
	manifest := strings.Replace(dbManifest(dbName, 2, databasev1alpha1.DeletionPolicyDelete), `version: "17"`, `version: "15"`, 1)
	kubectl(t, manifest, "apply", "-n", ns, "-f", "-")
	db := waitReady(t, ns, 2, 120*time.Second)
	if db.Status.CurrentVersion != "15" {
		t.Fatalf("currentVersion %q, want 15", db.Status.CurrentVersion)
	}
	claims := map[string]types.UID{}
	for _, name := range []string{pvc0, pvc1} {
		pvc := &corev1.PersistentVolumeClaim{}
		if !exists(t, ns, name, pvc) {
			t.Fatalf("claim %s missing", name)
		}
		claims[name] = pvc.UID
	}

	kubectl(t, "", "patch", "mydatabase", dbName, "-n", ns, "--type=merge", "-p", `{"spec":{"version":"17"}}`)
	var stoppedWith string
	eventually(t, 60*time.Second, "the StatefulSet at zero on postgres:15 with the claims retained", func() (bool, string) {
		sts := &appsv1.StatefulSet{}
		if !exists(t, ns, dbName, sts) {
			return false, "no StatefulSet"
		}
		image := sts.Spec.Template.Spec.Containers[0].Image
		retain := sts.Spec.PersistentVolumeClaimRetentionPolicy
		stoppedWith = fmt.Sprintf("%d servers of %s, retention %+v", *sts.Spec.Replicas, image, retain)
		return *sts.Spec.Replicas == 0 && image == "postgres:15" && retain != nil &&
			retain.WhenScaled == appsv1.RetainPersistentVolumeClaimRetentionPolicyType, stoppedWith
	})
	job := &batchv1.Job{}
	eventually(t, 60*time.Second, "the upgrade Job", func() (bool, string) {
		return exists(t, ns, dbName+"-upgrade", job), "no Job yet"
	})
	spec := job.Spec.Template.Spec
	if spec.InitContainers[1].Image != "postgres:15" || spec.Containers[0].Image != "postgres:17" ||
		spec.Volumes[0].PersistentVolumeClaim == nil || spec.Volumes[0].PersistentVolumeClaim.ClaimName != pvc0 {
		t.Fatalf("upgrade Job: stage %s, upgrade %s, volume %+v", spec.InitContainers[1].Image, spec.Containers[0].Image, spec.Volumes[0])
	}
	for _, p := range podsOf(t, ns, dbName) {
		if p.Labels[databasev1alpha1.LabelComponent] == "database" {
			t.Fatalf("the upgrade Job runs while server %s is up", p.Name)
		}
	}

	db = waitReady(t, ns, 2, 3*time.Minute)
	if up := db.Status.MajorUpgrade; db.Status.CurrentVersion != "17" || up == nil || up.Phase != databasev1alpha1.MajorUpgradeSucceeded {
		t.Fatalf("currentVersion %q, majorUpgrade %+v", db.Status.CurrentVersion, up)
	}
	for _, p := range podsOf(t, ns, dbName) {
		if img := p.Spec.Containers[0].Image; img != "postgres:17" {
			t.Errorf("pod %s runs %s", p.Name, img)
		}
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if !exists(t, ns, pvc0, pvc) || pvc.UID != claims[pvc0] {
		t.Fatalf("the primary's claim %s is not the same one", pvc0)
	}
	if !exists(t, ns, pvc1, pvc) || pvc.UID == claims[pvc1] {
		t.Fatalf("the replica's claim %s was not made again", pvc1)
	}
	eventually(t, 30*time.Second, "the upgrade Job gone", func() (bool, string) {
		err := env.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: dbName + "-upgrade"}, &batchv1.Job{})
		return err != nil, "the Job is still there"
	})

	out, err := kubectlRun("", "patch", "mydatabase", dbName, "-n", ns, "--type=merge", "-p", `{"spec":{"version":"15"}}`)
	if err == nil || !strings.Contains(out, "PostgreSQL data cannot be downgraded") {
		t.Fatalf("a downgrade: %v %s, want it refused", err, out)
	}
}

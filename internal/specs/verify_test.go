package specs

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
)

// TestVerifyPod: the verification pod is restricted, carries no token and
// no label a server's selector matches, restores the backup it names from
// the database's store (its key mounted, never in the environment), and
// has a volume of its own as large as a server's.
func TestVerifyPod(t *testing.T) {
	d := db(func(d *databasev1alpha1.MyDatabase) {
		d.Spec.Storage.Size = resource.MustParse("10Gi")
		d.Spec.WALStorage = &databasev1alpha1.StorageSpec{Size: resource.MustParse("2Gi")}
		d.Spec.Backup = &databasev1alpha1.BackupSpec{
			ObjectStore: databasev1alpha1.ObjectStore{Endpoint: "https://s3", Bucket: "b", CredentialsSecret: "s3"},
			Encryption:  &databasev1alpha1.BackupEncryption{Secret: "backup-key"}}
	})
	b := &databasev1alpha1.MyDatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: "db-1", UID: "b-uid"},
		Status: databasev1alpha1.MyDatabaseBackupStatus{BackupID: "20261207T050000Z"}}
	pod := VerifyPod(d, b, Platform{InstanceManagerImage: "operator:1"})

	restrictedContainers(t, pod.Spec)
	if !metav1.IsControlledBy(pod, b) || ptr.Deref(pod.Spec.AutomountServiceAccountToken, true) || pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("owners %v, token %v, restart %s: want the backup's, no token, Never", pod.OwnerReferences,
			pod.Spec.AutomountServiceAccountToken, pod.Spec.RestartPolicy)
	}
	claim := pod.Spec.Volumes[0].Ephemeral.VolumeClaimTemplate
	for _, l := range []map[string]string{pod.Labels, claim.Labels} {
		if labels.SelectorFromSet(SelectorLabels(d)).Matches(labels.Set(l)) || l[databasev1alpha1.LabelOwnerUID] != "" {
			t.Errorf("labels %v: a server's selector matches them, or they name the MyDatabase as owner", l)
		}
	}
	c := pod.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
		if strings.Contains(e.Value, "AGE-SECRET-KEY") {
			t.Errorf("%s holds a key", e.Name)
		}
	}
	for name, want := range map[string]string{
		contract.EnvRestoreBackupID:                          "20261207T050000Z",
		contract.RestoreStore + contract.StoreBucket:         "b",
		contract.RestoreStore + contract.StorePath:           BackupPath(d),
		contract.RestoreStore + contract.StoreIdentitiesFile: RestoreEncryptionDir + "/" + EncryptionIdentitiesKey,
		contract.EnvVerifyResultFile:                         c.TerminationMessagePath,
	} {
		if env[name] != want {
			t.Errorf("%s=%q, want %q", name, env[name], want)
		}
	}
	var size resource.Quantity
	for _, v := range pod.Spec.Volumes {
		if v.Ephemeral != nil {
			size = v.Ephemeral.VolumeClaimTemplate.Spec.Resources.Requests[corev1.ResourceStorage]
		}
	}
	if size.Cmp(resource.MustParse("12Gi")) != 0 {
		t.Errorf("the volume asks for %s, want 12Gi: the data and the WAL of a server", size.String())
	}
	// An incremental backup's chain is unpacked beside the data it makes.
	b.Status.Type, b.Status.ParentBackupID = databasev1alpha1.BackupIncremental, "20261206T050000Z"
	claim = VerifyPod(d, b, Platform{InstanceManagerImage: "operator:1"}).Spec.Volumes[0].Ephemeral.VolumeClaimTemplate
	if size := claim.Spec.Resources.Requests[corev1.ResourceStorage]; size.Cmp(resource.MustParse("22Gi")) != 0 {
		t.Errorf("the volume of an incremental backup's verification asks for %s, want 22Gi: the data twice and the WAL", size.String())
	}
}

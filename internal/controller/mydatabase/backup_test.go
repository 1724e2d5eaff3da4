package mydatabase

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// TestObjectStoreCredentials: spec.backup naming a credentials Secret that
// does not exist, or lacks a key, stalls the MyDatabase before any pod is
// made; once the Secret is whole, the servers get the store in their
// environment, the secret key only by reference.
func TestObjectStoreCredentials(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "arch", func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Backup = &databasev1alpha1.BackupSpec{ObjectStore: databasev1alpha1.ObjectStore{
			Endpoint: "https://s3.example.com", Bucket: "backups", CredentialsSecret: "s3-key"}}
	}))
	waitFor(t, db, "Stalled: no Secret", stalledWith(databasev1alpha1.ReasonObjectStoreCredentials, `"s3-key"`))
	if err := get(ns, "arch", &appsv1.StatefulSet{}); err == nil {
		t.Error("a StatefulSet exists although its object store's Secret does not")
	}
	key := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s3-key"},
		Data: map[string][]byte{specs.ObjectStoreAccessKeyIDKey: []byte("AKID")}}
	if err := k8s.Create(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	waitFor(t, db, "Stalled: a key missing", stalledWith(databasev1alpha1.ReasonObjectStoreCredentials, specs.ObjectStoreSecretAccessKeyKey))
	key.Data[specs.ObjectStoreSecretAccessKeyKey] = []byte("the secret key")
	if err := k8s.Update(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	sts := &appsv1.StatefulSet{}
	eventually(t, "the StatefulSet", exists(ns, "arch", sts))
	env := map[string]corev1.EnvVar{}
	for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e
	}
	if env["BACKUP_ENDPOINT"].Value != "https://s3.example.com" || env["BACKUP_BUCKET"].Value != "backups" || env["BACKUP_PATH"].Value != ns+"/arch" {
		t.Errorf("the store in the environment: %+v %+v %+v", env["BACKUP_ENDPOINT"], env["BACKUP_BUCKET"], env["BACKUP_PATH"])
	}
	if ref := env["BACKUP_SECRET_ACCESS_KEY"].ValueFrom; ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != "s3-key" ||
		env["BACKUP_SECRET_ACCESS_KEY"].Value != "" {
		t.Errorf("the secret key is not a reference to the Secret: %+v", env["BACKUP_SECRET_ACCESS_KEY"])
	}
}

package mydatabase

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// checkObjectStores stalls a MyDatabase whose spec.backup or
// spec.bootstrap.recovery names a credentials Secret that does not exist
// or lacks a key, before any pod is made: the kubelet would otherwise
// leave the pods in CreateContainerConfigError. The Secret is the user's
// (read around the cache, never written).
func (r *MyDatabaseReconciler) checkObjectStores(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation) error {
	stores := map[string]databasev1alpha1.ObjectStore{}
	if db.Spec.Backup != nil {
		stores["spec.backup.objectStore"] = db.Spec.Backup.ObjectStore
	}
	if rec := specs.Recovery(db); rec != nil {
		stores["spec.bootstrap.recovery.objectStore"] = rec.ObjectStore
	}
	for _, field := range []string{"spec.backup.objectStore", "spec.bootstrap.recovery.objectStore"} {
		store, ok := stores[field]
		if !ok {
			continue
		}
		name := store.CredentialsSecret
		secret := &corev1.Secret{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, secret)
		if apierrors.IsNotFound(err) {
			obs.stalled = &blocker{databasev1alpha1.ReasonObjectStoreCredentials, fmt.Sprintf(
				"Secret %q named in %s.credentialsSecret does not exist in namespace %q: create it with the keys %s and %s of the bucket's access key",
				name, field, db.Namespace, specs.ObjectStoreAccessKeyIDKey, specs.ObjectStoreSecretAccessKeyKey)}
			return nil
		} else if err != nil {
			return objectError("get", secret, name, err)
		}
		var missing []string
		for _, k := range []string{specs.ObjectStoreAccessKeyIDKey, specs.ObjectStoreSecretAccessKeyKey} {
			if len(secret.Data[k]) == 0 {
				missing = append(missing, k)
			}
		}
		if len(missing) > 0 {
			obs.stalled = &blocker{databasev1alpha1.ReasonObjectStoreCredentials, fmt.Sprintf(
				"Secret %q named in %s.credentialsSecret lacks the keys %s", name, field, strings.Join(missing, ", "))}
			return nil
		}
	}
	return nil
}

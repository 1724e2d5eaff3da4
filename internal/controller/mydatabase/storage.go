package mydatabase

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get

// storageClass is the component of the check of the storage class.
type storageClass struct {
	*kit
	*scope
}

// reconcile stalls a MyDatabase whose spec.storage.storageClassName
// names a class the cluster does not have, before anything is created: its
// claims would stay Pending forever with the reason visible only on the
// PVCs. It is checked only until the StatefulSet exists (the class is
// immutable, and later its claims tell the story), read around the cache
// since classes are few and cluster-scoped. Where the operator may not read
// StorageClasses (a namespace-scoped install without that grant), the check
// is skipped rather than blocking every database.
func (r *storageClass) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	name := db.Spec.Storage.StorageClassName
	if name == nil || *name == "" || r.sts != nil {
		return nil
	}
	class := &storagev1.StorageClass{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Name: *name}, class)
	switch {
	case apierrors.IsNotFound(err):
		obs.stalled = &blocker{Reason: databasev1alpha1.ReasonStorageClassNotFound, Message: fmt.Sprintf(
			"StorageClass %q named in spec.storage.storageClassName does not exist: create it, "+
				"or delete and recreate this MyDatabase with an existing class (kubectl get storageclass); "+
				"nothing has been created yet", *name)}
		return nil
	case apierrors.IsForbidden(err):
		log(ctx).V(1).Info("Not allowed to read StorageClasses, not checking the class", "storageClass", *name)
		return nil
	}
	return objectError("get", class, *name, err)
}

// retainedVolumes is the component of the adoption of retained volumes.
type retainedVolumes struct {
	*kit
	*scope
}

// reconcile takes over the volumes (data and WAL) that a deleted
// MyDatabase of the same name retained: the new StatefulSet mounts them by
// name, and relabelling them with the new owner's UID puts them under the
// new deletion policy. Volumes that still have an owner (a StatefulSet
// being collected) are left to it.
func (r *retainedVolumes) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	pvcs := &corev1.PersistentVolumeClaimList{}
	if err := r.listOwn(ctx, pvcs, db, specs.InstanceLabels(db)); err != nil {
		return objectError("list", &corev1.PersistentVolumeClaim{}, "", err)
	}
	ours := func(name string) bool {
		for _, v := range specs.Volumes(db) {
			if strings.HasPrefix(name, v.ClaimPrefix(db)) {
				return true
			}
		}
		return false
	}
	for i := range pvcs.Items {
		pvc := &pvcs.Items[i]
		if pvc.Labels[databasev1alpha1.LabelOwnerUID] == string(db.UID) || len(pvc.OwnerReferences) > 0 ||
			!ours(pvc.Name) || !pvc.DeletionTimestamp.IsZero() {
			continue
		}
		if err := r.alignMetadata(ctx, pvc, map[string]string{databasev1alpha1.LabelOwnerUID: string(db.UID)}, nil, nil, db); err != nil {
			return err
		}
	}
	return nil
}

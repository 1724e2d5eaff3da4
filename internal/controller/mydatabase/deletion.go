package mydatabase

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// reconcileDelete applies the deletion policy, then lets the MyDatabase go.
// Everything with our controller reference (StatefulSet, Services,
// ConfigMap, PodDisruptionBudget) is left to the garbage collector; only the
// data (PVCs) and the Secrets (passwords, CA and server certificate) need a
// decision:
//   - Retain: they carry no owner reference under Retain in the first place;
//     any left (a policy changed a moment ago) are removed, so they outlive
//     the MyDatabase and a new one of the same name adopts them.
//   - Delete: they are deleted, selected by the owner UID label and deleted
//     with a UID precondition, never by name alone.
//
// The data and Secrets are listed from the API server, not the cache: a
// stale read must neither miss a volume nor touch one of a newer owner.
//
// The pass reports Deleting in status only when something keeps the
// MyDatabase: an error here, or finalizers of others after ours.
func (r *kit) reconcileDelete(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation) error {
	obs.deleting = true
	if !controllerutil.ContainsFinalizer(db, databasev1alpha1.Finalizer) {
		obs.gone = true // ours has run; what others wait for is theirs to report
		return nil
	}
	r.event(db, corev1.EventTypeNormal, "Deleting", "Deleting with deletionPolicy %s", db.Spec.DeletionPolicy)
	r.Metrics.Set(client.ObjectKeyFromObject(db), databasev1alpha1.PhaseDeleting)

	owned := client.MatchingLabels{databasev1alpha1.LabelOwnerUID: string(db.UID), databasev1alpha1.LabelManagedBy: databasev1alpha1.ManagedBy}
	pvcs := &corev1.PersistentVolumeClaimList{}
	secrets := &corev1.SecretList{}
	for _, list := range []client.ObjectList{pvcs, secrets} {
		if err := r.APIReader.List(ctx, list, client.InNamespace(db.Namespace), owned); err != nil {
			return err
		}
	}
	var data []client.Object
	for i := range pvcs.Items {
		data = append(data, &pvcs.Items[i])
	}
	for i := range secrets.Items {
		data = append(data, &secrets.Items[i])
	}

	for _, obj := range data {
		var err error
		if db.Spec.DeletionPolicy == databasev1alpha1.DeletionPolicyDelete {
			err = r.deleteExact(ctx, obj)
		} else {
			err = r.release(ctx, db, obj)
		}
		if err != nil {
			return err
		}
	}

	patch := client.MergeFromWithOptions(db.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(db, databasev1alpha1.Finalizer)
	err := r.Patch(ctx, db, patch)
	obs.gone = apierrors.IsNotFound(err) || (err == nil && len(db.Finalizers) == 0)
	return client.IgnoreNotFound(err)
}

// release removes the owner references through which the garbage collector
// would delete obj with the MyDatabase: ours, and the StatefulSet's (set on
// PVCs while the policy was Delete).
func (r *kit) release(ctx context.Context, db *databasev1alpha1.MyDatabase, obj client.Object) error {
	refs := slices.DeleteFunc(slices.Clone(obj.GetOwnerReferences()), func(ref metav1.OwnerReference) bool {
		return ref.UID == db.UID || (ref.Kind == "StatefulSet" && ref.Name == specs.StatefulSetName(db))
	})
	if len(refs) == len(obj.GetOwnerReferences()) {
		return nil
	}
	patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	obj.SetOwnerReferences(refs)
	return client.IgnoreNotFound(r.Patch(ctx, obj, patch))
}

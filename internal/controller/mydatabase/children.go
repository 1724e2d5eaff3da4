package mydatabase

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/apply"
	"example.com/myoperator/internal/specs"
)

func (r *kit) applyChild(ctx context.Context, obs *observation,
	desired apply.Configuration, live client.Object) error {
	outcome, err := (&apply.Engine{Client: r.Client, FieldOwner: FieldOwner, HashAnnotation: databasev1alpha1.AnnotationSpecHash, Marks: r.marks}).Apply(ctx, desired, live)
	if owned := (*apply.OwnedElsewhereError)(nil); errors.As(err, &owned) {
		obs.waiting = &blocker{databasev1alpha1.ReasonWaitingForOldInstance, owned.Error()}
		return nil
	}
	if outcome == apply.Created {
		obs.created = append(obs.created, apply.KindOf(live)+" "+live.GetName())
	}
	return err
}

// serverConfig is the component of the PostgreSQL configuration ConfigMap.
type serverConfig struct {
	*kit
	*scope
}

func (r *serverConfig) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	return r.applyChild(ctx, obs, specs.ConfigMap(db), &corev1.ConfigMap{})
}

// services is the component of the Services.
type services struct {
	*kit
	*scope
}

// reconcile keeps the headless and read-write Services, and the
// read-only one while there are replicas to read from.
func (r *services) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	if err := r.applyChild(ctx, obs, specs.HeadlessService(db), &corev1.Service{}); err != nil {
		return err
	}
	if err := r.applyChild(ctx, obs, specs.ReadWriteService(db), &corev1.Service{}); err != nil {
		return err
	}
	if specs.Replicas(db) > 1 {
		return r.applyChild(ctx, obs, specs.ReadOnlyService(db), &corev1.Service{})
	}
	return r.deleteChild(ctx, db, &corev1.Service{}, specs.ReadOnlyServiceName(db))
}

// disruptionBudget is the component of the PodDisruptionBudget.
type disruptionBudget struct {
	*kit
	*scope
}

func (r *disruptionBudget) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	if specs.Replicas(db) > 1 {
		return r.applyChild(ctx, obs, specs.PodDisruptionBudget(db), &policyv1.PodDisruptionBudget{})
	}
	return r.deleteChild(ctx, db, &policyv1.PodDisruptionBudget{}, specs.PodDisruptionBudgetName(db))
}

// networkPolicy is the component of the NetworkPolicy.
type networkPolicy struct {
	*kit
	*scope
}

// reconcile keeps the NetworkPolicy while spec.networkPolicy
// asks for one.
func (r *networkPolicy) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	if specs.NetworkPolicyEnabled(db) {
		return r.applyChild(ctx, obs, specs.NetworkPolicy(db), &networkingv1.NetworkPolicy{})
	}
	return r.deleteChild(ctx, db, &networkingv1.NetworkPolicy{}, specs.NetworkPolicyName(db))
}

func (r *kit) deleteChild(ctx context.Context, db *databasev1alpha1.MyDatabase, obj client.Object, name string) error {
	deleted, err := r.deleteOwned(ctx, db, obj, name)
	if deleted {
		r.event(db, corev1.EventTypeNormal, "Deleted", "Deleted %s %s", apply.KindOf(obj), name)
	}
	return err
}

// servers is the component of the StatefulSet and the size of its volumes.
type servers struct {
	*kit
	*scope
	upgrade *majorUpgrade // the MyDatabase the StatefulSet is built from, during an upgrade
	// applied is the StatefulSet as this pass left it: the live one, or
	// the server's answer to the apply.
	applied *appsv1.StatefulSet
}

// reconcile applies the StatefulSet. Its volumeClaimTemplates are
// immutable: a larger spec.storage.size first grows the volumes and
// replaces the StatefulSet (alignVolumes, resize.go).
func (r *servers) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	want, err := r.alignVolumes(ctx, db, obs)
	if err != nil || want == nil {
		return err
	}
	if view := r.upgrade.view(); view != db { // a major upgrade (upgrade.go)
		view.Spec.Storage = want.Spec.Storage
		want = view
	}
	var before int32
	if r.sts != nil && r.sts.Spec.Replicas != nil {
		before = *r.sts.Spec.Replicas
	}
	sts := &appsv1.StatefulSet{}
	if err := r.applyChild(ctx, obs, specs.StatefulSet(want, r.Platform), sts); err != nil || !metav1.IsControlledBy(sts, db) {
		return err
	}
	if r.sts != nil && before != specs.Replicas(db) {
		r.event(db, corev1.EventTypeNormal, "Scaled", "Scaled StatefulSet %s from %d to %d servers", sts.Name, before, specs.Replicas(db))
	}
	r.applied, obs.sts = sts, sts
	return nil
}

// podRoles is the component of the role labels of the pods.
type podRoles struct {
	*kit
	*scope
}

// reconcile labels each pod primary or replica (the primary is the
// Lease's holder), which is how the Services find them, and stalls a
// restore that failed or makes no progress.
func (r *podRoles) reconcile(ctx context.Context, obs *observation) error {
	if obs.stalled == nil {
		obs.stalled = restoreStalled(r.db, r.pods)
	}
	for i := range r.pods {
		pod := &r.pods[i]
		if !pod.DeletionTimestamp.IsZero() {
			continue
		}
		role := databasev1alpha1.RoleReplica
		if pod.Name == r.primaryPod() {
			role = databasev1alpha1.RolePrimary
		}
		if pod.Labels[databasev1alpha1.LabelRole] == role {
			continue
		}
		patch := client.MergeFrom(pod.DeepCopy())
		pod.Labels[databasev1alpha1.LabelRole] = role
		if err := r.Patch(ctx, pod, patch); err != nil && !apierrors.IsNotFound(err) {
			return objectError("label", pod, pod.Name, err)
		}
	}
	return nil
}

// retainedVolumes is the component of the adoption of retained volumes.
type retainedVolumes struct {
	*kit
	*scope
}

// reconcile takes over the data volumes that a deleted
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
	prefix := specs.DataVolumeName + "-" + specs.StatefulSetName(db) + "-"
	for i := range pvcs.Items {
		pvc := &pvcs.Items[i]
		if pvc.Labels[databasev1alpha1.LabelOwnerUID] == string(db.UID) || len(pvc.OwnerReferences) > 0 ||
			!strings.HasPrefix(pvc.Name, prefix) || !pvc.DeletionTimestamp.IsZero() {
			continue
		}
		if err := r.alignMetadata(ctx, pvc, map[string]string{databasev1alpha1.LabelOwnerUID: string(db.UID)}, nil, nil, db); err != nil {
			return err
		}
	}
	return nil
}

// deleteOwned deletes the named child if it exists and belongs to this
// MyDatabase (by owner UID label), with a UID precondition so that an object
// re-created under the same name in the meantime is never touched.
func (r *kit) deleteOwned(ctx context.Context, db *databasev1alpha1.MyDatabase, obj client.Object, name string) (bool, error) {
	if err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, obj); err != nil {
		return false, objectError("get", obj, name, client.IgnoreNotFound(err))
	}
	if obj.GetLabels()[databasev1alpha1.LabelOwnerUID] != string(db.UID) || !obj.GetDeletionTimestamp().IsZero() {
		return false, nil
	}
	return true, r.deleteExact(ctx, obj)
}

// deleteExact deletes obj only if it is still the object with obj's UID.
func (r *kit) deleteExact(ctx context.Context, obj client.Object) error {
	uid := obj.GetUID()
	err := r.Delete(ctx, obj, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone already, or a different object now has the name
	}
	return objectError("delete", obj, obj.GetName(), err)
}

// +kubebuilder:rbac:groups=core,resources=events,verbs=list

// podCreation is the component of the check of why the StatefulSet controller cannot
// create a pod.
type podCreation struct {
	*kit
	*scope
	servers *servers
}

// reconcile reports why the StatefulSet controller cannot create a
// server's pod or volume claim: it does not write that into the
// StatefulSet's status, only into its events (FailedCreate), so a quota
// on claims or a policy that denies the pods would otherwise leave the
// MyDatabase Provisioning forever without a word. It looks only while the
// StatefulSet controller has seen the current spec and has a pod to create
// (creating); the newest of FailedCreate and SuccessfulCreate tells whether
// the failure still holds. Listing events is a scan of the namespace's
// events on the API server, so a rollout that only waits for a pod to
// become Ready lists none: with many MyDatabases starting together in one
// namespace, looking on every pass made each pass slower the more there
// were (docs/benchmarks.md, B9).
func (r *podCreation) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	sts := r.servers.applied
	if sts == nil || sts.Spec.Replicas == nil || sts.Status.ObservedGeneration < sts.Generation ||
		sts.Status.Replicas >= *sts.Spec.Replicas || !creating(sts, r.pods) || obs.blocked() {
		return nil
	}
	events := &corev1.EventList{}
	err := r.APIReader.List(ctx, events, client.InNamespace(db.Namespace), client.MatchingFields{
		"involvedObject.kind": "StatefulSet", "involvedObject.name": sts.Name, "involvedObject.uid": string(sts.UID)})
	if apierrors.IsForbidden(err) {
		log(ctx).V(1).Info("Not allowed to list events, not checking pod creation", "statefulSet", sts.Name)
		return nil
	}
	if err != nil {
		return objectError("list", &corev1.Event{}, "", err)
	}
	var latest *corev1.Event
	for i := range events.Items {
		e := &events.Items[i]
		if (e.Reason == "FailedCreate" || e.Reason == "SuccessfulCreate") &&
			(latest == nil || latest.LastTimestamp.Before(&e.LastTimestamp) ||
				(latest.LastTimestamp.Equal(&e.LastTimestamp) && e.Reason == "SuccessfulCreate")) {
			latest = e
		}
	}
	if latest != nil && latest.Reason == "FailedCreate" {
		if obs.stalled = createFailure(db, sts.Name, latest.Message); obs.stalled == nil {
			log(ctx).V(1).Info("The StatefulSet controller cannot create a server yet", "event", latest.Message)
		}
	}
	obs.podsMissing = obs.stalled == nil
	return nil
}

// creating reports whether the StatefulSet controller has a pod to create
// now, rather than one to wait for. With OrderedReady pod management it
// creates the lowest missing ordinal once every pod below it is Ready (and
// not being deleted), and until then waits without a word; with Parallel,
// every missing pod is created at once. pods are the StatefulSet's, as the
// cache shows them: one it does not show yet only makes this look once
// more.
func creating(sts *appsv1.StatefulSet, pods []corev1.Pod) bool {
	if sts.Spec.PodManagementPolicy == appsv1.ParallelPodManagement {
		return true
	}
	for ordinal := range *sts.Spec.Replicas {
		name := fmt.Sprintf("%s-%d", sts.Name, ordinal)
		i := slices.IndexFunc(pods, func(p corev1.Pod) bool { return p.Name == name })
		switch {
		case i < 0:
			return true
		case !podReady(&pods[i]) || !pods[i].DeletionTimestamp.IsZero():
			return false
		}
	}
	return false
}

// passing tells the refusals of a pod or claim that resolve without anyone
// acting: a namespace whose default service account is not made yet, a
// quota whose usage is not computed yet, a namespace being deleted.
func passing(words string) bool {
	for _, w := range []string{"error looking up service account", "status unknown for quota", "being terminated"} {
		if strings.Contains(words, w) {
			return true
		}
	}
	return false
}

// createFailure stalls on the refusals of a pod or claim that a person must
// lift; anything else (see passing) resolves with the StatefulSet
// controller's own retries, and gives nil.
func createFailure(db *databasev1alpha1.MyDatabase, sts, words string) *blocker {
	var reason string
	switch {
	case strings.Contains(words, "exceeded quota"):
		reason = databasev1alpha1.ReasonQuotaExceeded
	case admissionDenial(words) || (strings.Contains(words, " is forbidden: ") && !passing(words)):
		reason = databasev1alpha1.ReasonAdmissionDenied
	case strings.Contains(words, " is invalid"):
		reason = databasev1alpha1.ReasonInvalidChild
	default:
		return nil
	}
	return &blocker{reason, fmt.Sprintf("the StatefulSet controller cannot create the servers of StatefulSet %s: %s. %s; "+
		"it retries on its own", sts, quote(words), whatToDo(db, reason))}
}

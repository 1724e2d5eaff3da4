package mydatabase

import (
	"cmp"
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

// reconcileChildren aligns every child with the spec, in dependency order,
// and returns what it observed. A paused MyDatabase is only observed.
func (r *MyDatabaseReconciler) reconcileChildren(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation) error {
	defer r.recordCreated(db, obs)
	sts := &appsv1.StatefulSet{}
	switch err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: specs.StatefulSetName(db)}, sts); {
	case err == nil && metav1.IsControlledBy(sts, db):
		obs.sts = sts
	case err != nil && !apierrors.IsNotFound(err):
		return objectError("get", sts, specs.StatefulSetName(db), err)
	}
	if db.Spec.Paused {
		return nil
	}
	// A blocked preflight writes no child at all: pods must never start
	// against a password the data does not know, nor claim volumes no class
	// can provision.
	for _, check := range []func(context.Context, *databasev1alpha1.MyDatabase, *observation) error{
		r.checkStorageClass,
		r.checkObjectStores,
		r.reconcileTLS,
		r.reconcileCredentials,
	} {
		if err := check(ctx, db, obs); err != nil || obs.blocked() {
			return err
		}
	}
	steps := []func(context.Context, *databasev1alpha1.MyDatabase, *observation) error{
		r.reconcileConfig,
		r.reconcileServices,
		r.reconcileInstanceAccess,
		r.followPrimary,
		r.reconcileMajorUpgrade,
		r.reconcileStatefulSet,
		r.reconcileDisruptionBudget,
		r.reconcileNetworkPolicy,
		r.reconcilePodMonitor,
		r.reconcilePodRoles,
		r.checkPodCreation,
		r.reconcileSwitchover,
		r.reconcileRollout,
		r.retireReplicationPassword,
		r.adoptRetainedVolumes,
		r.reconcileRotation,
		r.reconcileSchedule,
	}
	for _, step := range steps {
		if err := step(ctx, db, obs); err != nil {
			return err
		}
	}
	return nil
}

func (r *MyDatabaseReconciler) applyChild(ctx context.Context, obs *observation,
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

func (r *MyDatabaseReconciler) reconcileConfig(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation) error {
	return r.applyChild(ctx, obs, specs.ConfigMap(db), &corev1.ConfigMap{})
}

// reconcileServices keeps the headless and read-write Services, and the
// read-only one while there are replicas to read from.
func (r *MyDatabaseReconciler) reconcileServices(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation) error {
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

func (r *MyDatabaseReconciler) reconcileDisruptionBudget(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation) error {
	if specs.Replicas(db) > 1 {
		return r.applyChild(ctx, obs, specs.PodDisruptionBudget(db), &policyv1.PodDisruptionBudget{})
	}
	return r.deleteChild(ctx, db, &policyv1.PodDisruptionBudget{}, specs.PodDisruptionBudgetName(db))
}

// reconcileNetworkPolicy keeps the NetworkPolicy while spec.networkPolicy
// asks for one.
func (r *MyDatabaseReconciler) reconcileNetworkPolicy(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation) error {
	if specs.NetworkPolicyEnabled(db) {
		return r.applyChild(ctx, obs, specs.NetworkPolicy(db), &networkingv1.NetworkPolicy{})
	}
	return r.deleteChild(ctx, db, &networkingv1.NetworkPolicy{}, specs.NetworkPolicyName(db))
}

func (r *MyDatabaseReconciler) deleteChild(ctx context.Context, db *databasev1alpha1.MyDatabase, obj client.Object, name string) error {
	deleted, err := r.deleteOwned(ctx, db, obj, name)
	if deleted {
		r.event(db, corev1.EventTypeNormal, "Deleted", "Deleted %s %s", apply.KindOf(obj), name)
	}
	return err
}

// reconcileStatefulSet applies the StatefulSet. Its volumeClaimTemplates are
// immutable: a larger spec.storage.size first grows the volumes and
// replaces the StatefulSet (alignVolumes, resize.go).
func (r *MyDatabaseReconciler) reconcileStatefulSet(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation) error {
	want, err := r.alignVolumes(ctx, db, obs)
	if err != nil || want == nil {
		return err
	}
	if view := obs.statefulSetView(db); view != db { // a major upgrade (upgrade.go)
		view.Spec.Storage = want.Spec.Storage
		want = view
	}
	var before int32
	if obs.sts != nil && obs.sts.Spec.Replicas != nil {
		before = *obs.sts.Spec.Replicas
	}
	sts := &appsv1.StatefulSet{}
	if err := r.applyChild(ctx, obs, specs.StatefulSet(want, r.Platform), sts); err != nil || !metav1.IsControlledBy(sts, db) {
		return err
	}
	if obs.sts != nil && before != specs.Replicas(db) {
		r.event(db, corev1.EventTypeNormal, "Scaled", "Scaled StatefulSet %s from %d to %d servers", sts.Name, before, specs.Replicas(db))
	}
	obs.sts = sts
	return nil
}

// reconcilePodRoles labels each pod primary or replica (the primary is the
// Lease's holder), which is how the Services find them, and keeps the pods
// for status.instances.
func (r *MyDatabaseReconciler) reconcilePodRoles(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation) error {
	pods := &corev1.PodList{}
	if err := r.listOwn(ctx, pods, db, specs.InstanceSelector(db)); err != nil {
		return objectError("list", &corev1.Pod{}, "", err)
	}
	// A list comes in no particular order; the rollout and the status go
	// by ordinal. The names share their prefix, so the shorter is the
	// lower ("db-9" before "db-10").
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int {
		return cmp.Or(cmp.Compare(len(a.Name), len(b.Name)), cmp.Compare(a.Name, b.Name))
	})
	obs.pods = pods.Items
	if obs.stalled == nil {
		obs.stalled = restoreStalled(db, obs.pods)
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if !pod.DeletionTimestamp.IsZero() {
			continue
		}
		role := databasev1alpha1.RoleReplica
		if pod.Name == obs.primaryPod(db) {
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

// adoptRetainedVolumes takes over the data volumes that a deleted
// MyDatabase of the same name retained: the new StatefulSet mounts them by
// name, and relabelling them with the new owner's UID puts them under the
// new deletion policy. Volumes that still have an owner (a StatefulSet
// being collected) are left to it.
func (r *MyDatabaseReconciler) adoptRetainedVolumes(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation) error {
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
func (r *MyDatabaseReconciler) deleteOwned(ctx context.Context, db *databasev1alpha1.MyDatabase, obj client.Object, name string) (bool, error) {
	if err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, obj); err != nil {
		return false, objectError("get", obj, name, client.IgnoreNotFound(err))
	}
	if obj.GetLabels()[databasev1alpha1.LabelOwnerUID] != string(db.UID) || !obj.GetDeletionTimestamp().IsZero() {
		return false, nil
	}
	return true, r.deleteExact(ctx, obj)
}

// deleteExact deletes obj only if it is still the object with obj's UID.
func (r *MyDatabaseReconciler) deleteExact(ctx context.Context, obj client.Object) error {
	uid := obj.GetUID()
	err := r.Delete(ctx, obj, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone already, or a different object now has the name
	}
	return objectError("delete", obj, obj.GetName(), err)
}

// +kubebuilder:rbac:groups=core,resources=events,verbs=list

// checkPodCreation reports why the StatefulSet controller cannot create a
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
func (r *MyDatabaseReconciler) checkPodCreation(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation) error {
	sts := obs.sts
	if sts == nil || sts.Spec.Replicas == nil || sts.Status.ObservedGeneration < sts.Generation ||
		sts.Status.Replicas >= *sts.Spec.Replicas || !creating(sts, obs.pods) || obs.blocked() {
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

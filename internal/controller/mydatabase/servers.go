package mydatabase

import (
	"context"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// servers is the component of the StatefulSet and the size of its volumes.
type servers struct {
	*kit
	*scope
	// upgrade gives the MyDatabase the StatefulSet is built from during an
	// upgrade.
	upgrade input[upgradeResult]
	// hibernation stops the servers.
	hibernation input[hibernationResult]
	out         *result[serversResult]
}

// serversResult is what servers hands over to podCreation, rollout,
// managerUpdate and replicationPassword.
type serversResult struct {
	// applied is the StatefulSet as this pass left it: the live one, or
	// the server's answer to the apply; nil when there is none.
	applied *appsv1.StatefulSet
}

// reconcile applies the StatefulSet. Its volumeClaimTemplates are
// immutable: a larger spec.storage.size first grows the volumes and
// replaces the StatefulSet (alignVolumes).
func (r *servers) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	out := r.out.produce()
	out.applied = r.sts
	want, err := r.alignVolumes(ctx, db, obs)
	if err != nil || want == nil {
		return err
	}
	if view := r.upgrade.get().view; view != nil { // a major upgrade (upgrade.go)
		view.Spec.Storage, view.Spec.WALStorage = want.Spec.Storage, want.Spec.WALStorage
		want = view
	}
	if r.hibernation.get().stopped {
		want = scaledToZero(want)
	}
	var before int32
	if r.sts != nil && r.sts.Spec.Replicas != nil {
		before = *r.sts.Spec.Replicas
	}
	platform := r.Platform
	if image := r.keptInstanceManagerImage(want); image != "" {
		platform.InstanceManagerImage = image // managers.go
	}
	sts := &appsv1.StatefulSet{}
	if err := r.applyChild(ctx, obs, specs.StatefulSet(want, platform), sts); err != nil || !metav1.IsControlledBy(sts, db) {
		return err
	}
	if r.sts != nil && before != specs.Replicas(want) {
		r.event(db, corev1.EventTypeNormal, "Scaled", "Scaled StatefulSet %s from %d to %d servers", sts.Name, before, specs.Replicas(want))
	}
	out.applied, obs.sts = sts, sts
	return nil
}

// Online volume expansion. A StatefulSet's volumeClaimTemplates are
// immutable and its controller never resizes the claims it made, so a larger
// spec.storage.size is carried out in three steps, each decided afresh on
// every pass from what exists, so that a pass interrupted anywhere converges
// on the next one:
//
//  1. every bound data claim that asks for less than the spec is patched to
//     ask for the spec (the storage driver and the kubelet then grow the
//     volume and its file system while the pod runs);
//  2. once none asks for less, a StatefulSet whose template asks for another
//     size is deleted with orphan propagation: the garbage collector only
//     removes its ownerReferences from the pods, which keep running;
//  3. once it is gone, the ordinary apply creates it again with the new
//     template; its controller adopts the pods and, the pod template being
//     unchanged, their revision, so no pod restarts.
//
// Claims are never deleted or created here. Until every server's claim shows
// the new size in status.capacity, the MyDatabase is Reconciling
// (StorageResizing) with the claims not there yet.

// alignVolumes grows the volumes (data, and WAL with spec.walStorage) to
// their spec's size and returns the MyDatabase to build the StatefulSet
// from: db itself, a copy with the live template's size for volumes that
// cannot grow (Stalled; every other change is still applied), or nil while
// the StatefulSet is being replaced and must not be applied. A StatefulSet
// without the WAL volume's template is replaced the same way when
// spec.walStorage is added; its new pod template then rolls the servers
// (rollout), each moving its WAL to its new volume as it starts.
func (r *servers) alignVolumes(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation) (*databasev1alpha1.MyDatabase, error) {
	want := db
	var replace, progress []string
	for _, v := range specs.Volumes(db) {
		claims, err := r.claims(ctx, db, v)
		if err != nil {
			return nil, err
		}
		size, growth, atMax := volumeSize(v, claims, r.pods, r.Clock.Now())
		if atMax != "" {
			r.event(db, corev1.EventTypeWarning, databasev1alpha1.ReasonAutoGrowAtMax, "%s", atMax)
		}
		plan := planVolumes(claims, size)
		template := claimSize(r.sts, v.Name)
		if len(plan.grow) > 0 {
			if b, err := r.growClaims(ctx, db, v, plan.grow, size); err != nil || b != nil {
				obs.stalled = b
				want = withClaimSize(want, v, template)
				if err != nil {
					return want, err
				}
				continue
			}
			// Recorded once the claims ask for it: a growth refused is
			// asked again on the next pass, and must not write the status
			// each time.
			if growth != nil {
				r.event(db, corev1.EventTypeNormal, "AutoGrowing", "Growing the %s volumes from %s to %s: %s",
					v.What, growth.From.String(), growth.To.String(), growth.Reason)
			}
		}
		if obs.storage == nil {
			obs.storage = map[string]*storageState{}
		}
		obs.storage[v.Name] = &storageState{size: size, growth: growth}
		if len(plan.failed) > 0 {
			obs.stalled = &blocker{Reason: databasev1alpha1.ReasonStorageResizeFailed, Message: fmt.Sprintf(
				"the storage driver cannot expand %s to %s: see the events of each claim (kubectl describe pvc -n %s) and "+
					"make room in the storage behind its StorageClass; the operator looks again on its own",
				strings.Join(plan.failed, ", "), size.String(), db.Namespace)}
		}
		if p := plan.progress(size); p != "" {
			progress = append(progress, fmt.Sprintf("expanding the %s volumes%s", v.What, p))
		}
		switch {
		case r.sts == nil:
		case template == nil:
			replace = append(replace, fmt.Sprintf("a %s volume of %s for every server", v.What, size.String()))
		case template.Cmp(size) != 0:
			replace = append(replace, fmt.Sprintf("%s volumes of %s", v.What, size.String()))
		}
		want = withClaimSize(want, v, &size)
	}
	if len(replace) > 0 {
		setWaiting(obs, fmt.Sprintf("re-creating StatefulSet %s so that its volumeClaimTemplates ask for %s; "+
			"its pods keep running%s", r.sts.Name, strings.Join(replace, " and "), strings.Join(append([]string{""}, progress...), "; ")))
		return nil, r.replaceStatefulSet(ctx, db, r.sts, strings.Join(replace, " and "))
	}
	if len(progress) > 0 {
		setWaiting(obs, strings.Join(progress, "; "))
	}
	return want, nil
}

// setWaiting reports the resize as progress, unless the pass already waits
// for something else, which then comes first.
func setWaiting(obs *observation, message string) {
	if obs.waiting == nil {
		obs.waiting = &blocker{Reason: databasev1alpha1.ReasonStorageResizing, Message: message}
	}
}

// claims lists the claims of volume v of the servers the spec asks for, by
// ordinal, from the cache. Retained claims of higher ordinals (scaled away
// under Retain) are left as they are until a scale-up mounts them again;
// claims of an older MyDatabase of the same name are this one's once
// retainedVolumes has relabelled them.
func (r *servers) claims(ctx context.Context, db *databasev1alpha1.MyDatabase, v specs.Volume) ([]corev1.PersistentVolumeClaim, error) {
	list := &corev1.PersistentVolumeClaimList{}
	selector := specs.InstanceLabels(db)
	selector[databasev1alpha1.LabelOwnerUID] = string(db.UID)
	if err := r.listOwn(ctx, list, db, selector); err != nil {
		return nil, objectError("list", &corev1.PersistentVolumeClaim{}, "", err)
	}
	servers := map[string]bool{}
	for i := range specs.Replicas(db) {
		servers[v.ClaimName(db, i)] = true
	}
	claims := slices.DeleteFunc(list.Items, func(pvc corev1.PersistentVolumeClaim) bool {
		return !servers[pvc.Name] || !pvc.DeletionTimestamp.IsZero()
	})
	slices.SortFunc(claims, func(a, b corev1.PersistentVolumeClaim) int { return strings.Compare(a.Name, b.Name) })
	return claims, nil
}

// volumePlan is what the data claims need for the size the spec asks for.
type volumePlan struct {
	// grow are the bound claims that ask for less: they are patched.
	grow []*corev1.PersistentVolumeClaim
	// notYet describes each claim whose status.capacity is below the size.
	notYet []string
	// failed names the claims whose expansion the driver reports infeasible.
	failed []string
}

// planVolumes sorts each claim into what it needs. An unbound claim cannot
// be patched (the API server expands only bound claims): it is patched once
// bound, and until then counts as not there yet.
func planVolumes(claims []corev1.PersistentVolumeClaim, want resource.Quantity) volumePlan {
	var plan volumePlan
	for i := range claims {
		pvc := &claims[i]
		request, capacity := pvc.Spec.Resources.Requests[corev1.ResourceStorage], pvc.Status.Capacity[corev1.ResourceStorage]
		switch {
		case pvc.Status.Phase != corev1.ClaimBound:
			if request.Cmp(want) < 0 {
				plan.notYet = append(plan.notYet, pvc.Name+" (not bound yet; expanded once bound)")
			}
		case capacity.Cmp(want) >= 0:
		case resizeInfeasible(pvc):
			plan.failed = append(plan.failed, fmt.Sprintf("%s (%s)", pvc.Name, pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage]))
		case request.Cmp(want) < 0:
			plan.grow = append(plan.grow, pvc)
			plan.notYet = append(plan.notYet, fmt.Sprintf("%s (%s of %s)", pvc.Name, capacity.String(), want.String()))
		case fileSystemResizePending(pvc):
			plan.notYet = append(plan.notYet, pvc.Name+" (FileSystemResizePending: the kubelet grows the file system)")
		default:
			plan.notYet = append(plan.notYet, fmt.Sprintf("%s (%s of %s)", pvc.Name, capacity.String(), want.String()))
		}
	}
	return plan
}

// progress lists the claims not at the size yet, for a status message.
func (p volumePlan) progress(want resource.Quantity) string {
	if len(p.notYet) == 0 {
		return ""
	}
	return fmt.Sprintf("; not at %s yet: %s", want.String(), strings.Join(p.notYet, ", "))
}

func resizeInfeasible(pvc *corev1.PersistentVolumeClaim) bool {
	switch pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage] {
	case corev1.PersistentVolumeClaimControllerResizeInfeasible, corev1.PersistentVolumeClaimNodeResizeInfeasible:
		return true
	}
	return false
}

func fileSystemResizePending(pvc *corev1.PersistentVolumeClaim) bool {
	for _, c := range pvc.Status.Conditions {
		if c.Type == corev1.PersistentVolumeClaimFileSystemResizePending && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// +kubebuilder:rbac:groups=core,resources=persistentvolumeclaims,verbs=patch

// growClaims patches each claim to ask for want, once their StorageClasses
// allow it. A class that does not gives a blocker and no claim is patched,
// so that the servers never end up with volumes of different sizes. The
// patch carries the resourceVersion read: a claim someone changed since is
// read again (a conflict) rather than overwritten.
func (r *servers) growClaims(ctx context.Context, db *databasev1alpha1.MyDatabase, v specs.Volume,
	claims []*corev1.PersistentVolumeClaim, want resource.Quantity) (*blocker, error) {
	if b, err := r.checkExpandable(ctx, v, claims, want); err != nil || b != nil {
		return b, err
	}
	names := make([]string, 0, len(claims))
	for _, pvc := range claims {
		from := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
		patch := client.MergeFromWithOptions(pvc.DeepCopy(), client.MergeFromWithOptimisticLock{})
		pvc.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: want}
		err := r.Patch(ctx, pvc, patch)
		if expansionRefused(err) {
			return &blocker{Reason: databasev1alpha1.ReasonStorageResize, Message: fmt.Sprintf(
				"the API server refuses to expand PVC %s (StorageClass %q) from %s to %s: %s. Ask a cluster admin to set "+
					"allowVolumeExpansion: true on its StorageClass if its driver can expand volumes, or %s; "+
					"the volumes keep their size and every other change is applied",
				pvc.Name, ptr.Deref(pvc.Spec.StorageClassName, ""), from.String(), want.String(), quote(err.Error()), undoGrowth(v, from))}, nil
		}
		if err != nil {
			return nil, objectError("patch", pvc, pvc.Name, err)
		}
		names = append(names, pvc.Name)
	}
	r.event(db, corev1.EventTypeNormal, "ExpandingVolumes", "Expanding PVC %s to %s", strings.Join(names, ", "), want.String())
	return nil, nil
}

// undoGrowth says how to take back a growth to a size the volumes cannot
// have: one auto-growth asked for, or a larger size in the spec.
func undoGrowth(v specs.Volume, from resource.Quantity) string {
	if size := v.Size(); v.Spec.AutoGrow != nil && size.Cmp(from) <= 0 {
		return fmt.Sprintf("set %s.autoGrow.maxSize to %s, or remove autoGrow", v.Field, from.String())
	}
	return fmt.Sprintf("set %s.size back to %s", v.Field, from.String())
}

// expansionRefused tells the API server's refusal to expand a claim whose
// class does not allow it (its PersistentVolumeClaimResize admission).
func expansionRefused(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "must support resize")
}

// checkExpandable reads the StorageClass of each claim to grow, around the
// cache (classes are few and cluster-scoped): the API server expands only
// claims of a class with allowVolumeExpansion: true. Where the operator may
// not read StorageClasses (a namespace-scoped install), the API server's
// answer to the patch decides instead.
func (r *servers) checkExpandable(ctx context.Context, v specs.Volume,
	claims []*corev1.PersistentVolumeClaim, want resource.Quantity) (*blocker, error) {
	checked := map[string]bool{}
	for _, pvc := range claims {
		name, from := ptr.Deref(pvc.Spec.StorageClassName, ""), pvc.Spec.Resources.Requests[corev1.ResourceStorage]
		keep := undoGrowth(v, from) + "; the volumes keep their size and every other change is applied"
		if checked[name] {
			continue
		}
		checked[name] = true
		if name == "" {
			return &blocker{Reason: databasev1alpha1.ReasonStorageResize, Message: fmt.Sprintf(
				"PVC %s has no StorageClass, and only volumes of a class with allowVolumeExpansion: true can be expanded "+
					"to %s: expand the volume by hand, or %s", pvc.Name, want.String(), keep)}, nil
		}
		class := &storagev1.StorageClass{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Name: name}, class)
		switch {
		case apierrors.IsForbidden(err):
			log(ctx).V(1).Info("Not allowed to read StorageClasses, the API server decides on the expansion", "storageClass", name)
		case apierrors.IsNotFound(err):
			return &blocker{Reason: databasev1alpha1.ReasonStorageResize, Message: fmt.Sprintf(
				"StorageClass %q of PVC %s no longer exists, so the volume cannot be expanded to %s: create it again "+
					"with allowVolumeExpansion: true, or %s", name, pvc.Name, want.String(), keep)}, nil
		case err != nil:
			return nil, objectError("get", class, name, err)
		case !ptr.Deref(class.AllowVolumeExpansion, false):
			return &blocker{Reason: databasev1alpha1.ReasonStorageClassNotExpandable, Message: fmt.Sprintf(
				"StorageClass %q of the %s volumes does not allow volume expansion, so they cannot grow from %s to %s: "+
					"if its driver can expand volumes, have a cluster admin set it "+
					"(kubectl patch storageclass %s -p '{\"allowVolumeExpansion\":true}'); otherwise %s",
				name, v.What, from.String(), want.String(), name, keep)}, nil
		}
	}
	return nil, nil
}

// replaceStatefulSet deletes the StatefulSet so that the next pass creates
// it with the new volumeClaimTemplates. Orphan propagation leaves its pods
// (and under deletionPolicy Delete, its claims) to the new one; the UID
// precondition never deletes a newer StatefulSet of the same name. While the
// garbage collector orphans the pods, the StatefulSet carries a deletion
// timestamp and nothing is done; its deletion wakes the next pass.
func (r *servers) replaceStatefulSet(ctx context.Context, db *databasev1alpha1.MyDatabase,
	sts *appsv1.StatefulSet, want string) error {
	if !sts.DeletionTimestamp.IsZero() {
		return nil
	}
	uid := sts.UID
	err := r.Delete(ctx, sts, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationOrphan))
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return objectError("delete", sts, sts.Name, err)
	}
	r.event(db, corev1.EventTypeNormal, "ReplacingStatefulSet",
		"Deleted StatefulSet %s, leaving its pods running, to create it again with volumeClaimTemplates for %s", sts.Name, want)
	return nil
}

// claimResized passes the claim events that move an expansion on: a bound
// claim whose capacity, resize conditions (FileSystemResizePending and the
// like) or resize status changed. Every other claim event, creation,
// binding and the Unused condition that follows its pod included, would
// only cost a reconcile.
var claimResized = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		was, ok1 := e.ObjectOld.(*corev1.PersistentVolumeClaim)
		is, ok2 := e.ObjectNew.(*corev1.PersistentVolumeClaim)
		if !ok1 || !ok2 || was.Status.Phase != corev1.ClaimBound || is.Status.Phase != corev1.ClaimBound {
			return false
		}
		return !equality.Semantic.DeepEqual(was.Status.Capacity, is.Status.Capacity) ||
			resizeConditions(was) != resizeConditions(is) ||
			!equality.Semantic.DeepEqual(was.Status.AllocatedResourceStatuses, is.Status.AllocatedResourceStatuses)
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// resizeConditions sums up the conditions an expansion sets on a claim.
func resizeConditions(pvc *corev1.PersistentVolumeClaim) string {
	var b strings.Builder
	for _, c := range pvc.Status.Conditions {
		switch c.Type {
		case corev1.PersistentVolumeClaimResizing, corev1.PersistentVolumeClaimFileSystemResizePending,
			corev1.PersistentVolumeClaimControllerResizeError, corev1.PersistentVolumeClaimNodeResizeError:
			fmt.Fprintf(&b, "%s=%s;", c.Type, c.Status)
		}
	}
	return b.String()
}

// claimSize is the size the live StatefulSet's volumeClaimTemplate of this
// name asks for, nil when there is no StatefulSet or no such template.
func claimSize(sts *appsv1.StatefulSet, name string) *resource.Quantity {
	if sts == nil {
		return nil
	}
	for _, t := range sts.Spec.VolumeClaimTemplates {
		if t.Name == name {
			if q, ok := t.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
				return &q
			}
		}
	}
	return nil
}

// withClaimSize is db with the volumes v of the given size: what they
// grew to, or what the live template asks for when they cannot grow, so
// that the StatefulSet is applied with every other change.
func withClaimSize(db *databasev1alpha1.MyDatabase, v specs.Volume, size *resource.Quantity) *databasev1alpha1.MyDatabase {
	if size == nil || size.Cmp(v.Size()) == 0 {
		return db
	}
	keep := db.DeepCopy()
	for _, kept := range specs.Volumes(keep) {
		if kept.Name == v.Name {
			kept.Spec.Size = *size
		}
	}
	return keep
}

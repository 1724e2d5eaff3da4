package reliability

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// The expansion of the data volumes takes writes of three kinds (claims
// patched, the StatefulSet deleted with orphan propagation, the StatefulSet
// created again), with the garbage collector acting in between. envtest has
// none, so expansionGC below plays it, one pass late, so that a pass sees
// the StatefulSet while it is being deleted.

// storageClass creates (once) a StorageClass for the tests of this file.
func storageClass(t *testing.T, name string, expandable bool) string {
	t.Helper()
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: "example.com/test",
		AllowVolumeExpansion: new(expandable)}
	if err := env.Client.Create(context.Background(), sc); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return name
}

// servers plays the StatefulSet controller and the volume binder for a
// converged MyDatabase: each server's pod, controlled by the StatefulSet,
// and its data claim, bound with the size asked for.
func servers(t *testing.T, db *databasev1alpha1.MyDatabase) (pods, claims map[string]types.UID) {
	t.Helper()
	ctx := context.Background()
	sts := &appsv1.StatefulSet{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(db), sts); err != nil {
		t.Fatal(err)
	}
	tmpl := sts.Spec.VolumeClaimTemplates[0]
	pods, claims = map[string]types.UID{}, map[string]types.UID{}
	for i := range *sts.Spec.Replicas {
		name := fmt.Sprintf("%s-%d", sts.Name, i)
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: tmpl.Name + "-" + name, Labels: tmpl.Labels},
			Spec:       tmpl.Spec,
		}
		if err := env.Client.Create(ctx, pvc); err != nil {
			t.Fatal(err)
		}
		pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, Capacity: tmpl.Spec.Resources.Requests}
		if err := env.Client.Status().Update(ctx, pvc); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: name, Labels: sts.Spec.Template.Labels,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}},
			Spec: *sts.Spec.Template.Spec.DeepCopy(),
		}
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: tmpl.Name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name}}})
		if err := env.Client.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		pods[pod.Name], claims[pvc.Name] = pod.UID, pvc.UID
	}
	return pods, claims
}

// expansionGC plays the garbage collector in a namespace, one call late: a
// StatefulSet deleted with orphan propagation (the orphan finalizer) loses
// its finalizer, and its pods their owner reference, at the second call
// that sees it; pods whose StatefulSet is gone without orphaning them are
// deleted, as the real collector would.
type expansionGC struct {
	ns   string
	seen map[types.UID]bool
}

// collect runs the collector once and reports whether it changed anything.
func (gc *expansionGC) collect(t *testing.T) bool {
	t.Helper()
	ctx := context.Background()
	if gc.seen == nil {
		gc.seen = map[types.UID]bool{}
	}
	sets := &appsv1.StatefulSetList{}
	pods := &corev1.PodList{}
	if err := env.Client.List(ctx, sets, client.InNamespace(gc.ns)); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.List(ctx, pods, client.InNamespace(gc.ns)); err != nil {
		t.Fatal(err)
	}
	live, orphaning := map[types.UID]bool{}, map[types.UID]*appsv1.StatefulSet{}
	for i := range sets.Items {
		sts := &sets.Items[i]
		live[sts.UID] = true
		if !sts.DeletionTimestamp.IsZero() && slices.Contains(sts.Finalizers, metav1.FinalizerOrphanDependents) {
			if gc.seen[sts.UID] {
				orphaning[sts.UID] = sts
			}
			gc.seen[sts.UID] = true
		}
	}
	changed := false
	for i := range pods.Items {
		pod := &pods.Items[i]
		ref := metav1.GetControllerOf(pod)
		switch {
		case ref == nil:
		case orphaning[ref.UID] != nil:
			patch := client.MergeFrom(pod.DeepCopy())
			pod.OwnerReferences = nil
			mustSucceed(t, env.Client.Patch(ctx, pod, patch))
			changed = true
		case !live[ref.UID]:
			mustSucceed(t, client.IgnoreNotFound(env.Client.Delete(ctx, pod)))
			changed = true
		}
	}
	for _, sts := range orphaning {
		patch := client.MergeFrom(sts.DeepCopy())
		sts.Finalizers = slices.DeleteFunc(sts.Finalizers, func(f string) bool { return f == metav1.FinalizerOrphanDependents })
		mustSucceed(t, env.Client.Patch(ctx, sts, patch))
		changed = true
	}
	return changed
}

func mustSucceed(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// settle runs passes of o, with the garbage collector between them, until
// a pass writes nothing and the collector has nothing left to do.
func settle(t *testing.T, o *operator, key client.ObjectKey, gc *expansionGC) {
	t.Helper()
	for range 15 {
		before := len(o.errs)
		o.converge(t, key)
		// Twice: the collector acts one call late.
		collected := gc.collect(t)
		collected = gc.collect(t) || collected
		if !collected && len(o.errs) == before {
			return
		}
	}
	t.Fatalf("no convergence with the garbage collector; errors: %v", o.errs)
}

// grow sets the MyDatabase's storage size.
func grow(t *testing.T, key client.ObjectKey, size string) {
	t.Helper()
	db := &databasev1alpha1.MyDatabase{}
	mustSucceed(t, env.Client.Get(context.Background(), key, db))
	db.Spec.Storage.Size = resource.MustParse(size)
	mustSucceed(t, env.Client.Update(context.Background(), db))
}

// expansionSetup is a converged MyDatabase of two servers on an
// expandable class, with its pods and bound 1Gi claims, grown to 2Gi.
func expansionSetup(t *testing.T) (key client.ObjectKey, gc *expansionGC, pods, claims map[string]types.UID) {
	t.Helper()
	ns := namespace(t)
	class := storageClass(t, "rel-expandable", true)
	db := newDB(ns, func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Replicas = ptr.To[int32](2)
		db.Spec.Storage.StorageClassName = &class
	})
	key, gc = client.ObjectKeyFromObject(db), &expansionGC{ns: ns}
	newOperator(env.Client, env.Client).converge(t, key)
	pods, claims = servers(t, db)
	newOperator(env.Client, env.Client).converge(t, key) // labels the pods' roles
	grow(t, key, "2Gi")
	return key, gc, pods, claims
}

// Scenario 1 for the expansion: the operator dies right after its k-th
// write, for every k through an expansion, while the garbage collector goes
// on; a restarted operator reaches exactly the state of an undisturbed run:
// every claim the same (UID) and asking for the new size, a StatefulSet
// whose template asks for it, the same pods, never deleted.
func TestCrashAtEveryWriteDuringVolumeExpansion(t *testing.T) {
	refKey, refGC, _, _ := expansionSetup(t)
	settle(t, newOperator(env.Client, env.Client), refKey, refGC)
	want := snapshot(t, refKey.Namespace)
	assertExpanded(t, refKey, nil, nil)

	for k := 0; ; k++ {
		key, gc, pods, claims := expansionSetup(t)
		c := &crash{left: k}
		crashing := newOperator(crashingClient(env.Client, c), env.Client)
		for i := 0; i < 15 && !c.happened(); i++ {
			_, _ = crashing.pass(key)
			gc.collect(t)
		}
		if !c.happened() {
			t.Logf("an expansion takes %d writes; crashed after each of them", k)
			if k < 4 {
				t.Fatalf("only %d writes: the crash points were not exercised", k)
			}
			return
		}
		settle(t, newOperator(env.Client, env.Client), key, gc)
		if diff := cmp.Diff(want, snapshot(t, key.Namespace)); diff != "" {
			t.Fatalf("crash after write %d: end state differs from an undisturbed run (-want +got):\n%s", k, diff)
		}
		assertExpanded(t, key, pods, claims)
	}
}

// assertExpanded checks the invariants of an expansion to 2Gi: the same
// claims (when given) asking for 2Gi, the same pods (when given), a
// StatefulSet asking for 2Gi, Reconciling StorageResizing until the
// claims show the capacity.
func assertExpanded(t *testing.T, key client.ObjectKey, pods, claims map[string]types.UID) {
	t.Helper()
	ctx := context.Background()
	for name, uid := range claims {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: name}, pvc); err != nil || pvc.UID != uid {
			t.Fatalf("PVC %s: uid %s, was %s (err %v): a claim was lost", name, pvc.UID, uid, err)
		}
		if got := pvc.Spec.Resources.Requests.Storage().String(); got != "2Gi" {
			t.Errorf("PVC %s asks for %s, want 2Gi", name, got)
		}
	}
	for name, uid := range pods {
		pod := &corev1.Pod{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: name}, pod); err != nil ||
			pod.UID != uid || !pod.DeletionTimestamp.IsZero() {
			t.Fatalf("pod %s: uid %s, was %s, deleting %v (err %v): a pod was restarted", name, pod.UID, uid, !pod.DeletionTimestamp.IsZero(), err)
		}
	}
	sts := &appsv1.StatefulSet{}
	mustSucceed(t, env.Client.Get(ctx, key, sts))
	if got := sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().String(); got != "2Gi" || !sts.DeletionTimestamp.IsZero() {
		t.Errorf("StatefulSet asks for %s (deleting %v), want a live one asking for 2Gi", got, !sts.DeletionTimestamp.IsZero())
	}
	db := &databasev1alpha1.MyDatabase{}
	mustSucceed(t, env.Client.Get(ctx, key, db))
	rec := meta.FindStatusCondition(db.Status.Conditions, databasev1alpha1.ConditionReconciling)
	if rec == nil || rec.Reason != databasev1alpha1.ReasonStorageResizing || !strings.Contains(rec.Message, "data-pg-0 (1Gi of 2Gi), data-pg-1 (1Gi of 2Gi)") {
		t.Errorf("Reconciling %+v, want StorageResizing naming both claims", rec)
	}
}

// Where the operator may not read StorageClasses (a namespace-scoped
// install), the API server decides: a class that does not allow expansion
// refuses the patch, and the MyDatabase is Stalled with the server's words
// and nothing changed; one that does lets the expansion go on.
func TestExpansionWithoutReadingStorageClasses(t *testing.T) {
	noClasses := func(c client.Client) client.Client {
		return intercept(c, interceptor.Funcs{
			Get: func(ctx context.Context, next client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if _, ok := obj.(*storagev1.StorageClass); ok {
					return apierrors.NewForbidden(storagev1.Resource("storageclasses"), key.Name, errors.New("namespace-scoped install"))
				}
				return next.Get(ctx, key, obj, opts...)
			},
		})
	}
	for name, expandable := range map[string]bool{"fixed": false, "expandable": true} {
		t.Run(name, func(t *testing.T) {
			ns := namespace(t)
			class := storageClass(t, "rel-unread-"+name, expandable)
			db := newDB(ns, func(db *databasev1alpha1.MyDatabase) { db.Spec.Storage.StorageClassName = &class })
			key := client.ObjectKeyFromObject(db)
			newOperator(env.Client, env.Client).converge(t, key)
			servers(t, db)
			grow(t, key, "2Gi")
			// Not converge: unable to read the class, each pass asks the
			// API server again (the class may have changed), a write a
			// stalled pass repeats.
			o := newOperator(env.Client, noClasses(env.Client))
			for range 3 {
				if _, err := o.pass(key); err != nil {
					t.Fatal(err)
				}
			}

			pvc, sts := &corev1.PersistentVolumeClaim{}, &appsv1.StatefulSet{}
			mustSucceed(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "data-pg-0"}, pvc))
			mustSucceed(t, env.Client.Get(context.Background(), key, sts))
			mustSucceed(t, env.Client.Get(context.Background(), key, db))
			stalled := meta.FindStatusCondition(db.Status.Conditions, databasev1alpha1.ConditionStalled)
			request := pvc.Spec.Resources.Requests.Storage().String()
			if !expandable {
				if stalled == nil || stalled.Reason != databasev1alpha1.ReasonStorageResize ||
					!strings.Contains(stalled.Message, "must support resize") || !strings.Contains(stalled.Message, class) {
					t.Errorf("Stalled %+v, want %s quoting the API server and naming %s", stalled, databasev1alpha1.ReasonStorageResize, class)
				}
				if request != "1Gi" || !sts.DeletionTimestamp.IsZero() {
					t.Errorf("PVC asks for %s, StatefulSet deleting %v: want nothing changed", request, !sts.DeletionTimestamp.IsZero())
				}
				return
			}
			if stalled != nil || request != "2Gi" || sts.DeletionTimestamp.IsZero() {
				t.Errorf("Stalled %+v, PVC asks for %s, StatefulSet deleting %v: want the expansion under way",
					stalled, request, !sts.DeletionTimestamp.IsZero())
			}
		})
	}
}

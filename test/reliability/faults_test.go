package reliability

import (
	"context"
	"maps"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/testenv"
)

// staleClient answers every Get of a MyDatabase with an old copy, as a lagging
// cache would.
func staleClient(c client.Client, stale *databasev1alpha1.MyDatabase) client.Client {
	return intercept(c, interceptor.Funcs{
		Get: func(ctx context.Context, next client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if db, ok := obj.(*databasev1alpha1.MyDatabase); ok {
				stale.DeepCopyInto(db)
				return nil
			}
			return next.Get(ctx, key, obj, opts...)
		},
	})
}

// Scenario 3: a MyDatabase deleted and created again under the same name,
// and an operator that still sees the old one (a stale read): the new
// instance's volume and Secrets are never touched.
func TestSameNameNewObjectWithStaleReads(t *testing.T) {
	ns := namespace(t)
	deleteMe := func(db *databasev1alpha1.MyDatabase) { db.Spec.DeletionPolicy = databasev1alpha1.DeletionPolicyDelete }
	old := newDB(ns, deleteMe)
	key := client.ObjectKeyFromObject(old)
	newOperator(env.Client, env.Client).converge(t, key)
	oldPVC := dataVolume(t, old)
	if err := env.Client.Delete(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	stale := &databasev1alpha1.MyDatabase{}
	if err := env.Client.Get(context.Background(), key, stale); err != nil {
		t.Fatal(err)
	}
	newOperator(env.Client, env.Client).converge(t, key)
	releasePVCProtection(t, oldPVC)

	// The old instance's children are still there until the garbage
	// collector runs: the new instance waits instead of fighting over them.
	fresh := newDB(ns, deleteMe)
	newOperator(env.Client, env.Client).converge(t, key)
	if err := env.Client.Get(context.Background(), key, fresh); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(fresh.Status.Conditions, databasev1alpha1.ConditionReconciling); c == nil ||
		c.Reason != databasev1alpha1.ReasonWaitingForOldInstance {
		t.Fatalf("Reconciling = %+v, want %s while the old children exist", c, databasev1alpha1.ReasonWaitingForOldInstance)
	}
	collectGarbage(t, ns, old.UID)
	newOperator(env.Client, env.Client).converge(t, key)
	freshPVC := dataVolume(t, fresh)
	before := snapshot(t, ns)

	o := newOperator(staleClient(env.Client, stale), env.Client)
	for range 3 {
		_, _ = o.pass(key)
	}
	if diff := cmp.Diff(before, snapshot(t, ns)); diff != "" {
		t.Fatalf("an operator acting on the old object changed the new instance (-before +after):\n%s", diff)
	}
	got := &corev1.PersistentVolumeClaim{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(freshPVC), got); err != nil || got.UID != freshPVC.UID {
		t.Fatalf("the new instance's volume: %v (err %v)", got.UID, err)
	}
}

// collectGarbage plays the garbage collector, absent from envtest: it
// deletes what the given owner controlled.
func collectGarbage(t *testing.T, ns string, owner types.UID) {
	t.Helper()
	lists := []client.ObjectList{&appsv1.StatefulSetList{}, &corev1.ServiceList{}, &corev1.ConfigMapList{},
		&policyv1.PodDisruptionBudgetList{}, &corev1.SecretList{}}
	for _, list := range lists {
		if err := env.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		items, _ := meta.ExtractList(list)
		for _, item := range items {
			obj := item.(client.Object)
			if ref := metav1.GetControllerOf(obj); ref != nil && ref.UID == owner {
				if err := env.Client.Delete(context.Background(), obj); err != nil && !apierrors.IsNotFound(err) {
					t.Fatal(err)
				}
			}
		}
	}
}

// releasePVCProtection plays the PVC protection controller, absent from
// envtest: a deleted claim that no pod uses goes away.
func releasePVCProtection(t *testing.T, pvc *corev1.PersistentVolumeClaim) {
	t.Helper()
	got := &corev1.PersistentVolumeClaim{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pvc), got); apierrors.IsNotFound(err) {
		return
	}
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`))
	if err := env.Client.Patch(context.Background(), got, patch); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// Scenario 4: the operator misses intermediate specs (frozen while the spec
// goes 3 -> 1 -> 3 replicas and the parameters change twice): the end state
// equals applying only the last spec.
func TestMissedIntermediateStates(t *testing.T) {
	final := func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Replicas = ptr.To[int32](3)
		db.Spec.Parameters = map[string]string{"work_mem": "16MB"}
	}
	refNS := namespace(t)
	ref := newDB(refNS, final)
	newOperator(env.Client, env.Client).converge(t, client.ObjectKeyFromObject(ref))

	ns := namespace(t)
	db := newDB(ns, func(db *databasev1alpha1.MyDatabase) { db.Spec.Replicas = ptr.To[int32](3) })
	key := client.ObjectKeyFromObject(db)
	newOperator(env.Client, env.Client).converge(t, key)
	for _, step := range []func(*databasev1alpha1.MyDatabase){
		func(db *databasev1alpha1.MyDatabase) {
			db.Spec.Replicas = ptr.To[int32](1)
			db.Spec.Parameters = map[string]string{"work_mem": "8MB"}
		},
		final,
	} {
		if err := env.Client.Get(context.Background(), key, db); err != nil {
			t.Fatal(err)
		}
		step(db)
		if err := env.Client.Update(context.Background(), db); err != nil {
			t.Fatal(err)
		}
	}
	newOperator(env.Client, env.Client).converge(t, key)
	if diff := cmp.Diff(snapshot(t, refNS), snapshot(t, ns)); diff != "" {
		t.Fatalf("end state differs from applying only the last spec (-want +got):\n%s", diff)
	}
}

// failingReader fails every read of the given kinds with a server error.
func failingReader(c client.Client, kinds map[string]bool) client.Client {
	fail := func(obj any) error {
		name := kindName(obj)
		if kinds["*"] || kinds[name] {
			return apierrors.NewInternalError(schemaErr(name))
		}
		return nil
	}
	return intercept(c, interceptor.Funcs{
		Get: func(ctx context.Context, next client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := fail(obj); err != nil {
				return err
			}
			return next.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, next client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := fail(list); err != nil {
				return err
			}
			return next.List(ctx, list, opts...)
		},
	})
}

// Scenario 6: when the API server fails (anything but a real NotFound), the
// operator takes no action: no Secret minted because "the volume could not
// be read", no deletion because "the list failed". Its one write is the
// MyDatabase's status saying so, since the status is written after every
// pass (README, "Status").
func TestServerErrorsCauseNoAction(t *testing.T) {
	cases := map[string]struct {
		setup  func(t *testing.T, ns string, db *databasev1alpha1.MyDatabase)
		failOn map[string]bool
	}{
		"every read fails": {failOn: map[string]bool{"*": true}},
		"the data check fails while the Secret is gone": {
			setup: func(t *testing.T, ns string, db *databasev1alpha1.MyDatabase) {
				dataVolume(t, db)
				s := &corev1.Secret{}
				s.Namespace, s.Name = ns, "pg-credentials"
				if err := env.Client.Delete(context.Background(), s); err != nil {
					t.Fatal(err)
				}
			},
			failOn: map[string]bool{"PersistentVolumeClaim": true},
		},
		"listing the data fails during deletion": {
			setup: func(t *testing.T, ns string, db *databasev1alpha1.MyDatabase) {
				dataVolume(t, db)
				if err := env.Client.Delete(context.Background(), db); err != nil {
					t.Fatal(err)
				}
			},
			failOn: map[string]bool{"PersistentVolumeClaimList": true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ns := namespace(t)
			db := newDB(ns, func(db *databasev1alpha1.MyDatabase) { db.Spec.DeletionPolicy = databasev1alpha1.DeletionPolicyDelete })
			key := client.ObjectKeyFromObject(db)
			newOperator(env.Client, env.Client).converge(t, key)
			if tc.setup != nil {
				tc.setup(t, ns, db)
			}
			before := snapshot(t, ns)
			failing := failingReader(env.Client, tc.failOn)
			writes := testenv.NewCountingClient(failing)
			o := newOperator(writes, failing)
			if _, err := o.pass(key); err == nil {
				t.Error("a failed read was not reported as an error (no retry would follow)")
			}
			other := writes.Writes()
			reports := other["patch-status MyDatabase"]
			delete(other, "patch-status MyDatabase")
			if reports > 1 || len(other) > 0 {
				t.Errorf("writes on a failed read: %v; want at most the MyDatabase's status", writes.Writes())
			}
			after := snapshot(t, ns)
			if diff := cmp.Diff(withoutStatus(before), withoutStatus(after)); diff != "" {
				t.Errorf("state changed on a failed read (-before +after):\n%s", diff)
			}
			if reports > 0 {
				got := &databasev1alpha1.MyDatabase{}
				if err := env.Client.Get(context.Background(), key, got); err != nil {
					t.Fatal(err)
				}
				ready := meta.FindStatusCondition(got.Status.Conditions, databasev1alpha1.ConditionReady)
				if ready == nil || ready.Status != metav1.ConditionFalse || !strings.Contains(ready.Message, "injected: ") {
					t.Errorf("the status written on a failed read does not report the server's error: Ready %+v", ready)
				}
			}
			// The server comes back: the operator recovers.
			newOperator(env.Client, env.Client).converge(t, key)
		})
	}
}

// withoutStatus is a snapshot without the status of its MyDatabases.
func withoutStatus(snap map[string]any) map[string]any {
	out := maps.Clone(snap)
	for key, obj := range out {
		if strings.HasPrefix(key, "MyDatabase/") {
			o := maps.Clone(obj.(map[string]any))
			delete(o, "status")
			out[key] = o
		}
	}
	return out
}

func kindName(obj any) string {
	switch obj.(type) {
	case *corev1.PersistentVolumeClaim:
		return "PersistentVolumeClaim"
	case *corev1.PersistentVolumeClaimList:
		return "PersistentVolumeClaimList"
	case *corev1.Secret:
		return "Secret"
	}
	return "other"
}

func schemaErr(kind string) error {
	return apierrors.NewServiceUnavailable("injected: " + schema.GroupKind{Kind: kind}.String() + " unavailable")
}

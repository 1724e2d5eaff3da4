package reliability

import (
	"bytes"
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// Scenario 1: the operator dies right after its k-th write, for every k
// through a create; a restarted operator must reach exactly the state of an
// undisturbed run, with one credentials Secret whose password never changes
// once written, and one CA, never made again.
func TestCrashAtEveryWriteDuringCreate(t *testing.T) {
	refNS := namespace(t)
	ref := newDB(refNS)
	newOperator(env.Client, env.Client).converge(t, client.ObjectKeyFromObject(ref))
	want := snapshot(t, refNS)

	for k := 0; ; k++ {
		ns := namespace(t)
		db := newDB(ns)
		key := client.ObjectKeyFromObject(db)
		if !runUntilCrash(key, k) {
			t.Logf("a create takes %d writes; crashed after each of them", k)
			if k < 5 {
				t.Fatalf("only %d writes before convergence: the crash points were not exercised", k)
			}
			return
		}
		before := password(t, ns)
		ca := secretKey(t, ns, "pg-ca", specs.CAKeyKey)
		o := newOperator(env.Client, env.Client)
		o.converge(t, key)
		if ca != nil && !bytes.Equal(secretKey(t, ns, "pg-ca", specs.CAKeyKey), ca) {
			t.Fatalf("crash after write %d: the CA was made again", k)
		}
		if diff := cmp.Diff(want, snapshot(t, ns)); diff != "" {
			t.Fatalf("crash after write %d: end state differs from an undisturbed run (-want +got):\n%s", k, diff)
		}
		after := password(t, ns)
		if before != "" && after != before {
			t.Fatalf("crash after write %d: the password was regenerated", k)
		}
		assertNoLeak(t, o, key, after)
	}
}

// Scenario 1 continued, and 2: the operator dies at every write of a
// deletion, under each policy; the restarted one applies the policy exactly.
func TestCrashAtEveryWriteDuringDelete(t *testing.T) {
	for _, policy := range []databasev1alpha1.DeletionPolicy{databasev1alpha1.DeletionPolicyRetain, databasev1alpha1.DeletionPolicyDelete} {
		t.Run(string(policy), func(t *testing.T) {
			for k := 0; ; k++ {
				ns := namespace(t)
				db := newDB(ns, func(db *databasev1alpha1.MyDatabase) { db.Spec.DeletionPolicy = policy })
				key := client.ObjectKeyFromObject(db)
				newOperator(env.Client, env.Client).converge(t, key)
				pvc := dataVolume(t, db)
				pw := password(t, ns)

				if err := env.Client.Delete(context.Background(), db); err != nil {
					t.Fatal(err)
				}
				crashed := runUntilCrash(key, k)
				newOperator(env.Client, env.Client).converge(t, key)
				if !gone(key) {
					t.Fatalf("crash after write %d: the MyDatabase was never released", k)
				}
				assertDeletionPolicy(t, policy, ns, pvc, pw)
				if !crashed {
					t.Logf("a deletion under %s takes %d writes; crashed after each of them", policy, k)
					return
				}
			}
		})
	}
}

func assertDeletionPolicy(t *testing.T, policy databasev1alpha1.DeletionPolicy, ns string, pvc *corev1.PersistentVolumeClaim, pw string) {
	t.Helper()
	got := &corev1.PersistentVolumeClaim{}
	err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pvc), got)
	switch policy {
	case databasev1alpha1.DeletionPolicyRetain:
		if err != nil || got.UID != pvc.UID || !got.DeletionTimestamp.IsZero() || len(got.OwnerReferences) > 0 {
			t.Fatalf("Retain: data volume %v (err %v), want the same PVC, unowned", got.ObjectMeta, err)
		}
		if password(t, ns) != pw {
			t.Fatal("Retain: the credentials Secret is gone or changed")
		}
	case databasev1alpha1.DeletionPolicyDelete:
		if err == nil && got.DeletionTimestamp.IsZero() {
			t.Fatal("Delete: the data volume was not deleted")
		}
		for _, name := range []string{"pg-credentials", "pg-ca", "pg-replication-tls"} {
			if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
				t.Fatalf("Delete: Secret %s survives (err %v)", name, err)
			}
		}
	}
}

// Scenario 2: with the operator down, the deletion waits for it: nothing
// is released or deleted until it runs, and then exactly the policy.
func TestOperatorDownDuringDelete(t *testing.T) {
	ns := namespace(t)
	db := newDB(ns, func(db *databasev1alpha1.MyDatabase) { db.Spec.DeletionPolicy = databasev1alpha1.DeletionPolicyDelete })
	key := client.ObjectKeyFromObject(db)
	newOperator(env.Client, env.Client).converge(t, key)
	pvc := dataVolume(t, db)
	if err := env.Client.Delete(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	// Operator down: the finalizer holds the MyDatabase, the data stays.
	if gone(key) {
		t.Fatal("the MyDatabase went away without its finalizer running")
	}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pvc), &corev1.PersistentVolumeClaim{}); err != nil {
		t.Fatalf("data touched while the operator was down: %v", err)
	}
	newOperator(env.Client, env.Client).converge(t, key)
	if !gone(key) {
		t.Fatal("the deletion did not complete once the operator was back")
	}
	assertDeletionPolicy(t, databasev1alpha1.DeletionPolicyDelete, ns, pvc, "")
}

// Scenario 2, by hand: the finalizer removed with the operator gone loses
// nothing under Retain, because nothing that holds data has an owner.
func TestFinalizerRemovedByHandUnderRetain(t *testing.T) {
	ns := namespace(t)
	db := newDB(ns)
	key := client.ObjectKeyFromObject(db)
	newOperator(env.Client, env.Client).converge(t, key)
	pvc := dataVolume(t, db)
	pw := password(t, ns)
	if err := env.Client.Get(context.Background(), key, db); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`))
	if err := env.Client.Patch(context.Background(), db, patch); err != nil {
		t.Fatal(err)
	}
	if !gone(key) {
		t.Fatal("the MyDatabase is still there")
	}
	// What the garbage collector would delete is exactly what has an owner
	// reference; the data and the Secrets have none.
	assertDeletionPolicy(t, databasev1alpha1.DeletionPolicyRetain, ns, pvc, pw)
	for _, name := range []string{"pg-credentials", "pg-ca", "pg-replication-tls"} {
		s := &corev1.Secret{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil || len(s.OwnerReferences) > 0 {
			t.Errorf("Secret %s: owners %v (err %v): the garbage collector could take it", name, s.OwnerReferences, err)
		}
	}
}

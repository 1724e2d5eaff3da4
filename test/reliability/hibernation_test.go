package reliability

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// hibernationSetup is a converged MyDatabase of two servers under
// deletionPolicy Delete with pg-0 holding the Lease, hibernated first when
// asleep is set, then spec.hibernate set to hibernate. It returns the
// claims' UIDs by name.
func hibernationSetup(t *testing.T, asleep, hibernate bool) (client.ObjectKey, *upgradeWorld, map[string]types.UID) {
	t.Helper()
	ctx := context.Background()
	w := &upgradeWorld{}
	key, db, o := twoServers(t, "17", w)
	setHibernate := func(on bool) {
		mustSucceed(t, env.Client.Get(ctx, key, db))
		db.Spec.Hibernate = on
		mustSucceed(t, env.Client.Update(ctx, db))
	}
	if asleep {
		setHibernate(true)
		for range 6 {
			o.converge(t, key)
			w.turn(t)
		}
	}
	setHibernate(hibernate)
	uids := map[string]types.UID{}
	for name, pvc := range w.claims(t) {
		uids[name] = pvc.UID
	}
	return key, w, uids
}

// crashAtEveryHibernationWrite runs the change hibernationSetup makes with
// the operator crashing after its k-th write, for k = 0, 1, ... until a
// run needs fewer writes than k (at least least of them), while the
// StatefulSet controller goes on; then a fresh operator converges, and
// check asserts the end state, with the claims as they were (the same
// UIDs: none deleted under deletionPolicy Delete).
func crashAtEveryHibernationWrite(t *testing.T, asleep, hibernate bool, least int, check func(k int, db *databasev1alpha1.MyDatabase, sts *appsv1.StatefulSet)) {
	t.Helper()
	ctx := context.Background()
	for k := 0; ; k++ {
		key, w, uids := hibernationSetup(t, asleep, hibernate)
		if !crashAt(t, key, w, k, 20, 6) {
			t.Logf("it takes %d writes; crashed after each of them", k)
			if k < least {
				t.Fatalf("only %d writes: the crash points were not exercised", k)
			}
			return
		}
		claims := w.claims(t)
		for name, uid := range uids {
			if pvc := claims[name]; pvc == nil || pvc.UID != uid {
				t.Fatalf("crash after write %d: claim %s was deleted", k, name)
			}
		}
		db := &databasev1alpha1.MyDatabase{}
		mustSucceed(t, env.Client.Get(ctx, key, db))
		sts := &appsv1.StatefulSet{}
		mustSucceed(t, env.Client.Get(ctx, key, sts))
		check(k, db, sts)
	}
}

// Scenario 1 for a hibernation: the operator dies right after its k-th
// write, for every k, while the StatefulSet controller goes on; a
// restarted operator ends Hibernated: the StatefulSet at zero with its
// claims retained, both claims the same ones.
func TestCrashAtEveryWriteDuringHibernation(t *testing.T) {
	crashAtEveryHibernationWrite(t, false, true, 3, func(k int, db *databasev1alpha1.MyDatabase, sts *appsv1.StatefulSet) {
		if h := db.Status.Hibernation; db.Status.Phase != databasev1alpha1.PhaseHibernated || h == nil || h.Primary != "pg-0" {
			t.Fatalf("crash after write %d: phase %s, hibernation %+v; want Hibernated", k, db.Status.Phase, h)
		}
		if p := sts.Spec.PersistentVolumeClaimRetentionPolicy; *sts.Spec.Replicas != 0 || p.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
			t.Fatalf("crash after write %d: StatefulSet at %d servers, claim retention %+v; want 0, Retain", k, *sts.Spec.Replicas, p)
		}
	})
}

// The same for the resume: the restarted operator ends with the
// StatefulSet at two servers, deletionPolicy Delete's retention back,
// status.hibernation Resumed, on the same claims.
func TestCrashAtEveryWriteDuringResume(t *testing.T) {
	crashAtEveryHibernationWrite(t, true, false, 4, func(k int, db *databasev1alpha1.MyDatabase, sts *appsv1.StatefulSet) {
		if h := db.Status.Hibernation; h == nil || h.Phase != databasev1alpha1.HibernationResumed || db.Status.Phase == databasev1alpha1.PhaseHibernated {
			t.Fatalf("crash after write %d: phase %s, hibernation %+v; want Resumed", k, db.Status.Phase, h)
		}
		if p := sts.Spec.PersistentVolumeClaimRetentionPolicy; *sts.Spec.Replicas != 2 || p.WhenScaled != appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
			t.Fatalf("crash after write %d: StatefulSet at %d servers, claim retention %+v; want 2, Delete", k, *sts.Spec.Replicas, p)
		}
	})
}

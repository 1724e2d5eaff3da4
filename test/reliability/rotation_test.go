package reliability

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
)

// playedInstances plays the instance managers of two servers for a
// rotation of the application user's password: whenever the staging
// Secret exists, the primary sets its password (server is then the only
// password PostgreSQL accepts) and both report that they accept it.
type playedInstances struct {
	ns      string
	old     string // the password before the rotation
	server  string // the password PostgreSQL accepts
	applied int    // ALTER ROLEs played
}

func (p *playedInstances) turn(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	staging := &corev1.Secret{}
	accepted := map[string]string{}
	err := env.Client.Get(ctx, client.ObjectKey{Namespace: p.ns, Name: "pg-credentials-rotation"}, staging)
	if err == nil {
		if pw := string(staging.Data[specs.SecretPasswordKey]); pw != p.server {
			p.server, p.applied = pw, p.applied+1
		}
		accepted[staging.Name] = staging.ResourceVersion
	}
	for pod, role := range map[string]string{"pg-0": databasev1alpha1.RolePrimary, "pg-1": databasev1alpha1.RoleReplica} {
		obj := &corev1.Pod{}
		mustSucceed(t, env.Client.Get(ctx, client.ObjectKey{Namespace: p.ns, Name: pod}, obj))
		patch := client.MergeFrom(obj.DeepCopy())
		r := contract.Report{Role: role, Ready: true, Passwords: accepted, Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
		if obj.Annotations == nil {
			obj.Annotations = map[string]string{}
		}
		obj.Annotations[contract.AnnotationInstance] = r.String()
		mustSucceed(t, env.Client.Patch(ctx, obj, patch))
	}
}

// check: the Secret never holds a password PostgreSQL was not given. It
// holds the previous one from the ALTER ROLE until the operator copies the
// new one (docs/password-rotation.md), never the new one before.
func (p *playedInstances) check(t *testing.T, when string) {
	t.Helper()
	if got := password(t, p.ns); got != p.old && got != p.server {
		t.Fatalf("%s: the Secret holds a password PostgreSQL was never given", when)
	}
}

// rotationSetup is a converged MyDatabase of two servers with their pods,
// then a rotation of the application user's password requested.
func rotationSetup(t *testing.T) (client.ObjectKey, *playedInstances) {
	t.Helper()
	ns := namespace(t)
	db := newDB(ns, func(db *databasev1alpha1.MyDatabase) { db.Spec.Replicas = ptr.To[int32](2) })
	key := client.ObjectKeyFromObject(db)
	newOperator(env.Client, env.Client).converge(t, key)
	servers(t, db)
	newOperator(env.Client, env.Client).converge(t, key)
	old := password(t, ns)
	mustSucceed(t, env.Client.Get(context.Background(), key, db))
	db.Spec.PasswordRotation = &databasev1alpha1.PasswordRotationSpec{
		UserRequestedAt: new(metav1.NewTime(time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC)))}
	mustSucceed(t, env.Client.Update(context.Background(), db))
	return key, &playedInstances{ns: ns, old: old, server: old}
}

// Scenario 1 for a rotation: the operator dies right after its k-th write,
// for every k, while the instance managers go on; a restarted operator
// finishes the rotation: one new password, set in PostgreSQL before the
// Secret has it, the request recorded, the staging Secret gone.
func TestCrashAtEveryWriteDuringPasswordRotation(t *testing.T) {
	for k := 0; ; k++ {
		key, im := rotationSetup(t)
		c := &crash{left: k}
		crashing := newOperator(crashingClient(env.Client, c), env.Client)
		for i := 0; i < 15 && !c.happened(); i++ {
			_, _ = crashing.pass(key)
			im.check(t, "crashing operator")
			im.turn(t)
		}
		if !c.happened() {
			t.Logf("a rotation takes %d writes; crashed after each of them", k)
			if k < 3 {
				t.Fatalf("only %d writes: the crash points were not exercised", k)
			}
			return
		}
		o := newOperator(env.Client, env.Client)
		for range 5 {
			o.converge(t, key)
			im.check(t, "restarted operator")
			im.turn(t)
		}
		assertRotated(t, key, im)
		assertNoLeak(t, o, key, im.old, im.server)
		assertNoLeak(t, crashing, key, im.old, im.server)
	}
}

func assertRotated(t *testing.T, key client.ObjectKey, im *playedInstances) {
	t.Helper()
	ctx := context.Background()
	if im.applied != 1 || im.server == im.old {
		t.Fatalf("%d passwords set in PostgreSQL, want exactly one new one", im.applied)
	}
	creds := &corev1.Secret{}
	mustSucceed(t, env.Client.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: "pg-credentials"}, creds))
	if string(creds.Data[specs.SecretPasswordKey]) != im.server {
		t.Fatal("the Secret does not hold the password PostgreSQL accepts")
	}
	if got := creds.Annotations[databasev1alpha1.AnnotationRotationRequest]; got != "2026-11-30T20:00:00Z" {
		t.Fatalf("the Secret records request %q", got)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: "pg-credentials-rotation"}, &corev1.Secret{}); err == nil {
		t.Fatal("the staging Secret is still there")
	}
	db := &databasev1alpha1.MyDatabase{}
	mustSucceed(t, env.Client.Get(ctx, key, db))
	for _, p := range db.Status.Passwords {
		if p.Rotating != "" {
			t.Fatalf("status.passwords still rotating: %+v", p)
		}
	}
}

package reliability

import (
	"context"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// conflictingClient answers every third write with 409 Conflict, as a busy
// object shared with other writers would.
type conflictingClient struct {
	client.Client
	mu        sync.Mutex
	n, failed int
}

func (c *conflictingClient) conflict() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	if c.n%3 == 0 {
		c.failed++
		return apierrors.NewConflict(schema.GroupResource{Resource: "injected"}, "x", nil)
	}
	return nil
}

func (c *conflictingClient) Patch(ctx context.Context, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
	if err := c.conflict(); err != nil {
		return err
	}
	return c.Client.Patch(ctx, obj, p, opts...)
}

func (c *conflictingClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	if err := c.conflict(); err != nil {
		return err
	}
	return c.Client.Apply(ctx, obj, opts...)
}

func (c *conflictingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if err := c.conflict(); err != nil {
		return err
	}
	return c.Client.Create(ctx, obj, opts...)
}

// Scenario 5: a third of the writes conflict and another writer owns a label
// on the StatefulSet and an annotation on the MyDatabase: the operator
// converges, reports no conflict as an error, and keeps the other writer's
// fields.
func TestConflictsAndAnotherWriter(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	db := newDB(ns)
	key := client.ObjectKeyFromObject(db)
	newOperator(env.Client, env.Client).converge(t, key)

	sts := &appsv1.StatefulSet{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pg"}, sts); err != nil {
		t.Fatal(err)
	}
	theirs := client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"example.com/team":"payments"}}}`))
	if err := env.Client.Patch(ctx, sts, theirs, client.FieldOwner("someone-else")); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(ctx, key, db); err != nil {
		t.Fatal(err)
	}
	db.Annotations = map[string]string{"example.com/note": "keep me"}
	db.Spec.Replicas = ptr.To[int32](3)
	db.Spec.Parameters = map[string]string{"work_mem": "32MB"}
	if err := env.Client.Update(ctx, db); err != nil {
		t.Fatal(err)
	}

	cc := &conflictingClient{Client: env.Client}
	o := newOperator(cc, env.Client)
	for range 20 {
		if _, err := o.pass(key); err != nil {
			t.Fatalf("a conflict surfaced as an error: %v", err)
		}
	}
	if cc.failed == 0 {
		t.Fatal("no conflict was injected")
	}
	newOperator(env.Client, env.Client).converge(t, key) // must already be converged: converge fails otherwise
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pg"}, sts); err != nil {
		t.Fatal(err)
	}
	if *sts.Spec.Replicas != 3 || sts.Labels["example.com/team"] != "payments" {
		t.Errorf("replicas %d, labels %v: want 3 and the other writer's label kept", *sts.Spec.Replicas, sts.Labels)
	}
	if err := env.Client.Get(ctx, key, db); err != nil {
		t.Fatal(err)
	}
	if db.Annotations["example.com/note"] != "keep me" || db.Status.ObservedGeneration != db.Generation {
		t.Errorf("annotations %v, observedGeneration %d of %d", db.Annotations, db.Status.ObservedGeneration, db.Generation)
	}
}

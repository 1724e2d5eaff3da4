package mydatabase

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/metrics"
	"example.com/myoperator/internal/testenv"
)

func TestStatusBaselineFollowsTheLastWriteWhileTheCacheLags(t *testing.T) {
	key := types.NamespacedName{Namespace: "shop", Name: "orders"}
	at := func(rv string, phase databasev1alpha1.Phase) *databasev1alpha1.MyDatabase {
		return &databasev1alpha1.MyDatabase{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv},
			Status: databasev1alpha1.MyDatabaseStatus{Phase: phase}}
	}
	var w ownWrites
	if b := w.baseline(key, at("10", "Provisioning")); b.ResourceVersion != "10" || b.Status.Phase != "Provisioning" {
		t.Fatalf("nothing written yet: baseline %s %s, want the cached object", b.ResourceVersion, b.Status.Phase)
	}
	w.remember(key, "10", "10", at("12", "Ready"))
	if b := w.baseline(key, at("10", "Provisioning")); b.ResourceVersion != "12" || b.Status.Phase != "Ready" {
		t.Errorf("cache still at the object written over: baseline %s %s, want the write (12 Ready)", b.ResourceVersion, b.Status.Phase)
	}
	if b := w.baseline(key, at("13", "Ready")); b.ResourceVersion != "13" {
		t.Errorf("cache moved on: baseline %s, want the cached 13", b.ResourceVersion)
	}
	if b := w.baseline(key, at("10", "Provisioning")); b.ResourceVersion != "10" {
		t.Error("the write was not forgotten once the cache moved on")
	}
	// A chain of writes the cache lags behind: any version of it it shows
	// still gives the last write.
	w.remember(key, "13", "13", at("14", "Ready"))
	w.remember(key, "13", "14", at("16", "Updating"))
	for _, cached := range []string{"13", "14"} {
		if b := w.baseline(key, at(cached, "Ready")); b.ResourceVersion != "16" || b.Status.Phase != "Updating" {
			t.Errorf("cache at %s, behind two writes: baseline %s %s, want the last write (16 Updating)", cached, b.ResourceVersion, b.Status.Phase)
		}
	}
	w.remember(key, "14", "16", at("17", "Ready"))
	if b := w.baseline(key, at("13", "Ready")); b.ResourceVersion != "17" {
		t.Errorf("cache at 13, behind three writes: baseline %s, want 17", b.ResourceVersion)
	}
	if b := w.baseline(key, at("17", "Ready")); b.ResourceVersion != "17" || len(w.m) != 0 {
		t.Errorf("the cache caught up: baseline %s, %d entries kept; want the cached 17 and none", b.ResourceVersion, len(w.m))
	}
	// The object written is kept as the cache holds it: its finalizers
	// with it, its managedFields not.
	written := at("18", "Ready")
	written.Finalizers = []string{databasev1alpha1.Finalizer}
	written.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "myoperator"}}
	w.remember(key, "17", "17", written)
	if b := w.baseline(key, at("17", "Ready")); len(b.Finalizers) != 1 || b.ManagedFields != nil {
		t.Errorf("baseline of a write: finalizers %v, managedFields %v; want the finalizer and none", b.Finalizers, b.ManagedFields)
	}
	w.remember(key, "14", "14", at("15", "Ready"))
	w.forget(key)
	if b := w.baseline(key, at("14", "Ready")); b.ResourceVersion != "14" {
		t.Error("a deleted MyDatabase's write was not forgotten")
	}
}

// The finalizer is added by one patch over the object the pass started
// from, with no read of the API server: a pass whose cache still shows the
// object from before it starts from the write instead and patches nothing;
// a pass over an object someone else has changed since conflicts and
// writes nothing.
func TestFinalizerIsAddedOnceWhileTheCacheLags(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = databasev1alpha1.AddToScheme(scheme)
	db := newDB("shop", "orders")
	patches := 0
	server := fake.NewClientBuilder().WithScheme(scheme).WithObjects(db).Build()
	counting := interceptor.NewClient(server, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			patches++
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	// No APIReader: a read around the cache would panic.
	r := &Reconciler{Client: counting}
	stale := &databasev1alpha1.MyDatabase{}
	if err := server.Get(context.Background(), client.ObjectKeyFromObject(db), stale); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(stale)
	pass := func(cached *databasev1alpha1.MyDatabase) error {
		return r.ensureFinalizer(context.Background(), r.written.baseline(key, cached), cached.ResourceVersion)
	}
	for i := range 2 { // the second pass: the cache still shows the object without it
		if err := pass(stale); err != nil {
			t.Fatalf("pass %d: %v", i+1, err)
		}
	}
	got := &databasev1alpha1.MyDatabase{}
	if err := server.Get(context.Background(), key, got); err != nil {
		t.Fatal(err)
	}
	if patches != 1 || !slices.Equal(got.Finalizers, []string{databasev1alpha1.Finalizer}) {
		t.Fatalf("two passes over the same cached object: %d patches, finalizers %v; want 1 and the finalizer once", patches, got.Finalizers)
	}

	// Someone else adds a finalizer of theirs; the cache shows neither.
	got.Finalizers = append(got.Finalizers, "example.com/theirs")
	if err := server.Update(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	r.written.forget(key) // a restarted operator
	if err := pass(stale); !apierrors.IsConflict(err) {
		t.Fatalf("a patch over an object changed since: %v, want a conflict", err)
	}
	if err := server.Get(context.Background(), key, got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Finalizers, []string{databasev1alpha1.Finalizer, "example.com/theirs"}) {
		t.Errorf("after the conflicting pass the finalizers are %v", got.Finalizers)
	}
}

// The cache's own events end a write, a grace period after the cache shows
// it, without a pass; a later write outlives the grace of an earlier one.
func TestStatusWriteIsForgottenAfterTheCacheShowsIt(t *testing.T) {
	key := types.NamespacedName{Namespace: "shop", Name: "orders"}
	at := func(rv string) *databasev1alpha1.MyDatabase {
		return &databasev1alpha1.MyDatabase{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv}}
	}
	w := ownWrites{grace: 50 * time.Millisecond}
	kept := func() (string, bool) {
		w.mu.Lock()
		defer w.mu.Unlock()
		last, ok := w.m[key]
		return last.version, ok
	}
	w.remember(key, "10", "10", at("12"))
	w.caughtUp(key, "10") // the object the write was made over
	time.Sleep(200 * time.Millisecond)
	if _, ok := kept(); !ok {
		t.Fatal("forgotten while the cache still showed the object before the write")
	}
	w.caughtUp(key, "12")
	if _, ok := kept(); !ok {
		t.Fatal("forgotten at once: a pass that read version 10 just before would lose the write")
	}
	testenv.Eventually(t, 5*time.Second, "the write forgotten", func() error {
		if v, ok := kept(); ok {
			return fmt.Errorf("write %s still kept", v)
		}
		return nil
	})
	w.remember(key, "12", "12", at("13"))
	w.caughtUp(key, "13")
	w.remember(key, "12", "13", at("15")) // written again within the grace
	time.Sleep(200 * time.Millisecond)
	if v, ok := kept(); !ok || v != "15" {
		t.Errorf("the grace of write 13 ended write 15 (kept %q, %v)", v, ok)
	}
}

// The lost update, as it was reproduced against envtest: a pass writes
// Ready; the StatefulSet then goes unready; the next pass still reads the
// MyDatabase from before that write (the cache lags), computes Updating,
// finds it equal to the cached status, and wrote nothing: the server kept
// saying Ready. Here the "cache" is a snapshot served by an interceptor.
func TestStatusIsNotLostWhenTheCacheLags(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = databasev1alpha1.AddToScheme(scheme)
	db := newDB("shop", "orders")
	db.Generation = 1
	db.Status = databasev1alpha1.MyDatabaseStatus{Phase: databasev1alpha1.PhaseProvisioning}
	server := fake.NewClientBuilder().WithScheme(scheme).WithObjects(db).
		WithStatusSubresource(&databasev1alpha1.MyDatabase{}).Build()
	stale := &databasev1alpha1.MyDatabase{}
	if err := server.Get(context.Background(), client.ObjectKeyFromObject(db), stale); err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{
		Client:   server,
		Recorder: events.NewFakeRecorder(100),
		Clock:    clocktesting.NewFakePassiveClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
		Metrics:  metrics.New(prometheus.NewRegistry()),
	}
	sts := func(ready int32) *appsv1.StatefulSet {
		return &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1)},
			Status: appsv1.StatefulSetStatus{Replicas: 1, ReadyReplicas: ready, UpdatedReplicas: 1}}
	}
	phase := func() databasev1alpha1.Phase {
		got := &databasev1alpha1.MyDatabase{}
		if err := server.Get(context.Background(), client.ObjectKeyFromObject(db), got); err != nil {
			t.Fatal(err)
		}
		return got.Status.Phase
	}

	// writeStatus as Reconcile calls it, over the object the cache serves.
	write := func(obs *observation) error {
		key := client.ObjectKeyFromObject(stale)
		return r.writeStatus(context.Background(), r.written.baseline(key, stale), stale.ResourceVersion, obs)
	}
	if err := write(&observation{sts: sts(1)}); err != nil {
		t.Fatal(err)
	}
	if p := phase(); p != databasev1alpha1.PhaseReady {
		t.Fatalf("after the first pass the server says %s, want Ready", p)
	}
	// Next pass: the cache still serves the object from before the write.
	if err := write(&observation{sts: sts(0)}); err != nil {
		t.Fatal(err)
	}
	if p := phase(); p == databasev1alpha1.PhaseReady {
		t.Fatal("the server still says Ready although the last pass saw no ready server: the status write was lost")
	}

	// Someone else writes the status meanwhile: the optimistic lock turns
	// the next write into a conflict, retried through the rate limiter.
	current := &databasev1alpha1.MyDatabase{}
	_ = server.Get(context.Background(), client.ObjectKeyFromObject(db), current)
	current.Status.Phase = "Bogus"
	if err := server.Status().Update(context.Background(), current); err != nil {
		t.Fatal(err)
	}
	// A whole pass over the stale object (paused, so that it writes no
	// child the fake client would have to apply) ends in the same conflict.
	stale.Finalizers = []string{databasev1alpha1.Finalizer}
	stale.Spec.Paused = true
	r.Client = interceptor.NewClient(server, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if p, ok := obj.(*databasev1alpha1.MyDatabase); ok {
				stale.DeepCopyInto(p) // the cache, still behind
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	err := write(&observation{sts: sts(1)})
	if !apierrors.IsConflict(err) {
		t.Fatalf("a write over a status someone else changed: %v, want a conflict", err)
	}
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)})
	if err != nil || !res.Requeue { //nolint:staticcheck // Requeue is the rate-limited retry
		t.Errorf("a conflicting pass returned %+v, %v; want a rate-limited requeue without error", res, err)
	}
}

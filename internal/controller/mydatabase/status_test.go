package mydatabase

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/prometheus/client_golang/prometheus"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/apply"
	"example.com/myoperator/internal/contract"
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
	r := &MyDatabaseReconciler{Client: counting}
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
	r := &MyDatabaseReconciler{
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

// Every branch of the status, read as kubectl wait, Flux and Argo CD read
// it (kstatus), and checked against the rules of Flux's condition checker
// that this operator adopts (see the README, Status).
func TestStatusBranchesThroughKstatus(t *testing.T) {
	rolled := func(n int32) *appsv1.StatefulSet {
		return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: 3},
			Spec: appsv1.StatefulSetSpec{Replicas: new(n)},
			Status: appsv1.StatefulSetStatus{ObservedGeneration: 3, Replicas: n, ReadyReplicas: n, UpdatedReplicas: n,
				CurrentRevision: "a", UpdateRevision: "a"}}
	}
	rolling := rolled(2)
	rolling.Status.UpdateRevision, rolling.Status.UpdatedReplicas, rolling.Status.ReadyReplicas = "b", 1, 1
	unready := rolled(2)
	unready.Status.ReadyReplicas = 1
	scaling := rolled(2)
	scaling.Status.Replicas = 1
	wasReady := func(db *databasev1alpha1.MyDatabase) {
		db.Status.CurrentVersion = "17"
		db.Status.ObservedGeneration = 1
	}
	deleting := func(db *databasev1alpha1.MyDatabase) {
		db.DeletionTimestamp = new(metav1.Now())
		db.Finalizers = []string{"example.com/other"}
	}
	block := &blocker{"Reason", "message"}

	for _, tc := range []struct {
		name    string
		before  func(*databasev1alpha1.MyDatabase)
		obs     observation
		paused  bool
		kstatus status.Status
		phase   databasev1alpha1.Phase
		reason  string // of Ready
	}{
		{"new, nothing yet", nil, observation{}, false, status.InProgressStatus, databasev1alpha1.PhasePending, databasev1alpha1.ReasonProvisioning},
		{"provisioning", nil, observation{sts: unready}, false, status.InProgressStatus, databasev1alpha1.PhaseProvisioning, databasev1alpha1.ReasonProvisioning},
		{"ready", nil, observation{sts: rolled(2)}, false, status.CurrentStatus, databasev1alpha1.PhaseReady, databasev1alpha1.ReasonAvailable},
		{"rolling out a new spec", wasReady, observation{sts: rolling}, false, status.InProgressStatus, databasev1alpha1.PhaseUpdating, databasev1alpha1.ReasonUpdating},
		{"scaling", wasReady, observation{sts: scaling}, false, status.InProgressStatus, databasev1alpha1.PhaseUpdating, databasev1alpha1.ReasonScaling},
		{"a server went unready", wasReady, observation{sts: unready}, false, status.InProgressStatus, databasev1alpha1.PhaseUpdating, databasev1alpha1.ReasonServersNotReady},
		{"waiting for the previous instance", nil, observation{waiting: block}, false, status.InProgressStatus, databasev1alpha1.PhasePending, "Reason"},
		{"transient API error", wasReady, observation{sts: rolled(2), failure: block}, false, status.InProgressStatus, databasev1alpha1.PhaseUpdating, "Reason"},
		{"stalled", nil, observation{stalled: block}, false, status.FailedStatus, databasev1alpha1.PhaseStalled, "Reason"},
		{"stalled while serving", wasReady, observation{sts: rolled(2), stalled: block}, false, status.FailedStatus, databasev1alpha1.PhaseStalled, "Reason"},
		{"paused", wasReady, observation{sts: unready}, true, status.InProgressStatus, databasev1alpha1.PhasePaused, databasev1alpha1.ReasonPaused},
		{"deleting, others' finalizers left", deleting, observation{deleting: true}, false, status.TerminatingStatus, databasev1alpha1.PhaseDeleting, databasev1alpha1.ReasonDeleting},
		{"deleting, failed", deleting, observation{deleting: true, failure: block}, false, status.TerminatingStatus, databasev1alpha1.PhaseDeleting, databasev1alpha1.ReasonDeleting},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := newDB("shop", "orders", func(db *databasev1alpha1.MyDatabase) {
				db.Generation = 2
				db.Spec.Replicas = ptr.To[int32](2)
				db.Spec.Paused = tc.paused
			})
			if tc.before != nil {
				tc.before(db)
			}
			computeStatus(db, &tc.obs, time.Now())
			if db.Status.Phase != tc.phase {
				t.Errorf("phase %s, want %s", db.Status.Phase, tc.phase)
			}
			if ready := condition(db, databasev1alpha1.ConditionReady); ready == nil || ready.Reason != tc.reason {
				t.Errorf("Ready %+v, want reason %s", ready, tc.reason)
			}
			if got := kstatusOf(t, db); got != tc.kstatus {
				t.Errorf("kstatus %s, want %s; status %+v", got, tc.kstatus, db.Status)
			}
			for _, problem := range conditionRules(db) {
				t.Error(problem)
			}
		})
	}
}

func kstatusOf(t *testing.T, db *databasev1alpha1.MyDatabase) status.Status {
	t.Helper()
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(db)
	if err != nil {
		t.Fatal(err)
	}
	res, err := status.Compute(&unstructured.Unstructured{Object: raw})
	if err != nil {
		t.Fatal(err)
	}
	return res.Status
}

// conditionRules checks the status against the rules of Flux's condition
// checker (fluxcd/pkg/runtime/conditions/check, FAIL0001-0010) as this
// operator adopts them. One is narrowed: Reconciling may be True with the
// root observedGeneration equal to the generation when the spec was
// already fully acted on and the servers degraded since (a pod died);
// kstatus then reads InProgress, which is the truth.
func conditionRules(db *databasev1alpha1.MyDatabase) []string {
	var out []string
	ready := condition(db, databasev1alpha1.ConditionReady)
	rec := condition(db, databasev1alpha1.ConditionReconciling)
	stalled := condition(db, databasev1alpha1.ConditionStalled)
	og := db.Status.ObservedGeneration
	isTrue := func(c *metav1.Condition) bool { return c != nil && c.Status == metav1.ConditionTrue }
	if ready == nil {
		out = append(out, "Ready must always be present")
		return out
	}
	if isTrue(ready) && (isTrue(rec) || isTrue(stalled)) {
		out = append(out, "Ready must be False when Reconciling or Stalled is True")
	}
	if rec != nil && stalled != nil {
		out = append(out, "only one of Reconciling and Stalled may be present")
	}
	for _, c := range db.Status.Conditions {
		if c.Status == metav1.ConditionFalse && c.Type != databasev1alpha1.ConditionReady {
			out = append(out, c.Type+" is present with False: it must be removed instead")
		}
		if c.ObservedGeneration != db.Generation {
			out = append(out, c.Type+" does not describe the current generation")
		}
	}
	if og > db.Generation {
		out = append(out, "observedGeneration is ahead of the generation")
	}
	if og < db.Generation && isTrue(ready) {
		out = append(out, "Ready is True for a generation not yet observed")
	}
	if isTrue(ready) && og != ready.ObservedGeneration {
		out = append(out, "Ready is True but the root observedGeneration differs from the conditions'")
	}
	if isTrue(rec) && og >= rec.ObservedGeneration && db.Status.CurrentVersion == "" {
		out = append(out, "Reconciling a generation the root observedGeneration already claims")
	}
	if isTrue(stalled) && og != db.Generation {
		out = append(out, "Stalled but observedGeneration not bumped: kstatus would read InProgress")
	}
	return out
}

func TestClassifyNamesTheChildAndTheClass(t *testing.T) {
	db := newDB("shop", "orders")
	sts := schema.GroupResource{Group: "apps", Resource: "statefulsets"}
	svc := schema.GroupResource{Resource: "services"}
	on := func(kind, name string, err error) error {
		return &apply.ObjectError{Verb: "apply", Kind: kind, Name: name, Err: err}
	}
	terminating := apierrors.NewForbidden(svc, "orders-rw", errors.New("unable to create new content in namespace shop because it is being terminated"))
	terminating.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}
	for _, tc := range []struct {
		err     error
		reason  string
		stalled bool
	}{
		{on("Service", "orders-rw", apierrors.NewForbidden(svc, "orders-rw", errors.New(
			"exceeded quota: tight, requested: services=1, used: services=1, limited: services=1"))),
			databasev1alpha1.ReasonQuotaExceeded, true},
		{on("StatefulSet", "orders", apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "StatefulSet"}, "orders",
			field.ErrorList{field.Forbidden(field.NewPath(""), "ValidatingAdmissionPolicy 'no-sts' with binding 'b' denied request: no")})),
			databasev1alpha1.ReasonAdmissionDenied, true},
		{on("StatefulSet", "orders", apierrors.NewBadRequest(`admission webhook "deny.example.com" denied the request: no`)),
			databasev1alpha1.ReasonAdmissionDenied, true},
		{on("StatefulSet", "orders", apierrors.NewForbidden(sts, "orders", errors.New(
			`User "system:serviceaccount:x:y" cannot patch resource "statefulsets" in API group "apps"`))),
			databasev1alpha1.ReasonForbidden, true},
		{on("StatefulSet", "orders", apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "StatefulSet"}, "orders",
			field.ErrorList{field.Invalid(field.NewPath("metadata", "annotations"), "not a valid key!", "name part must consist of")})),
			databasev1alpha1.ReasonInvalidChild, true},
		{on("ConfigMap", "orders-config", apierrors.NewInternalError(errors.New("etcd is sad"))), databasev1alpha1.ReasonAPIError, false},
		{on("ConfigMap", "orders-config", apierrors.NewTimeoutError("slow", 1)), databasev1alpha1.ReasonAPIError, false},
		{on("ConfigMap", "orders-config", apierrors.NewTooManyRequests("later", 1)), databasev1alpha1.ReasonAPIError, false},
		{on("Service", "orders-rw", terminating), databasev1alpha1.ReasonAPIError, false},
		{fmt.Errorf("dial tcp: connection refused"), databasev1alpha1.ReasonAPIError, false},
	} {
		b, stalled := classify(db, tc.err)
		if b.reason != tc.reason || stalled != tc.stalled {
			t.Errorf("%v: %s (stalled %v), want %s (stalled %v)", tc.err, b.reason, stalled, tc.reason, tc.stalled)
		}
		var oe *apply.ObjectError
		if errors.As(tc.err, &oe) && !strings.Contains(b.message, oe.Kind+" "+oe.Name) {
			t.Errorf("message %q does not name %s %s", b.message, oe.Kind, oe.Name)
		}
	}
}

// The transition events, over the statuses computeStatus writes: one
// Warning per distinct failure, none for a repeat, and a Ready event only
// on the way to Ready.
func TestTransitionEvents(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	r := &MyDatabaseReconciler{Recorder: rec}
	ready := &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: new(int32(1))},
		Status: appsv1.StatefulSetStatus{Replicas: 1, ReadyReplicas: 1, UpdatedReplicas: 1}}
	quota := &blocker{databasev1alpha1.ReasonQuotaExceeded, "quota a"}
	before := newDB("shop", "orders")
	for _, obs := range []observation{
		{sts: &appsv1.StatefulSet{}},
		{stalled: quota},
		{stalled: quota},
		{failure: &blocker{databasev1alpha1.ReasonAPIError, "boom"}},
		{sts: ready},
		{sts: ready},
	} {
		after := before.DeepCopy()
		computeStatus(after, &obs, time.Now())
		r.kit().recordTransitions(context.Background(), before, after)
		before = after
	}
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, strings.Fields(e)[0]+" "+strings.Fields(e)[1])
	}
	want := []string{"Warning QuotaExceeded", "Warning APIError", "Normal Ready"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events %v, want %v", got, want)
	}
}

// The StatefulSet controller's FailedCreate messages: what a person must
// lift stalls, what passes on its own does not.
func TestCreateFailure(t *testing.T) {
	db := newDB("shop", "orders")
	for words, want := range map[string]string{
		`create Claim data-orders-0 Pod orders-0 in StatefulSet orders failed error: persistentvolumeclaims "data-orders-0" is forbidden: exceeded quota: tight, requested: persistentvolumeclaims=1, used: persistentvolumeclaims=0, limited: persistentvolumeclaims=0`: databasev1alpha1.ReasonQuotaExceeded,
		`create Pod orders-0 in StatefulSet orders failed error: pods "orders-0" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true`:                                                                                                           databasev1alpha1.ReasonAdmissionDenied,
		`create Pod orders-0 in StatefulSet orders failed error: pods "orders-0" is forbidden: maximum cpu usage per Container is 100m, but limit is 200m`:                                                                                                               databasev1alpha1.ReasonAdmissionDenied,
		`create Pod orders-0 in StatefulSet orders failed error: admission webhook "deny.example.com" denied the request: no`:                                                                                                                                            databasev1alpha1.ReasonAdmissionDenied,
		`create Pod orders-0 in StatefulSet orders failed error: Pod "orders-0" is invalid: spec.containers[0].image: Required value`:                                                                                                                                    databasev1alpha1.ReasonInvalidChild,
		`create Pod orders-0 in StatefulSet orders failed error: pods "orders-0" is forbidden: error looking up service account shop/default: serviceaccount "default" not found`:                                                                                        "",
		`create Claim data-orders-0 Pod orders-0 in StatefulSet orders failed error: persistentvolumeclaims "data-orders-0" is forbidden: status unknown for quota: tight`:                                                                                               "",
		`create Pod orders-0 in StatefulSet orders failed error: Timeout: request did not complete within requested timeout`:                                                                                                                                             "",
	} {
		got := ""
		if b := createFailure(db, "orders", words); b != nil {
			got = b.reason
			if !strings.Contains(b.message, "StatefulSet orders") || !strings.Contains(b.message, words) {
				t.Errorf("message %q does not name the StatefulSet and quote the event", b.message)
			}
		}
		if got != want {
			t.Errorf("%s: %q, want %q", words, got, want)
		}
	}
}

// While the StatefulSet controller has a pod to create and has not, the
// pass comes back soon to read its events again (no watch brings an
// event): a refused claim is seen within podCreationRecheck, not whenever
// something else changes. A stall then retries at its own pace. A
// StatefulSet that is complete, or that waits for a pod to become Ready
// before it creates the next (OrderedReady), asks for nothing and lists no
// event.
func TestMissingPodsAreLookedAtAgain(t *testing.T) {
	db := newDB("shop", "orders")
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", UID: "sts-uid", Generation: 1},
		Spec:       appsv1.StatefulSetSpec{Replicas: ptr.To[int32](3), PodManagementPolicy: appsv1.OrderedReadyPodManagement},
		Status:     appsv1.StatefulSetStatus{ObservedGeneration: 1},
	}
	refused := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: "shop", Name: "orders.1"},
		InvolvedObject: corev1.ObjectReference{Kind: "StatefulSet", Name: "orders", UID: "sts-uid"},
		Reason:         "FailedCreate", LastTimestamp: metav1.Now(),
		Message: `create Claim data-orders-0 Pod orders-0 in StatefulSet orders failed error: persistentvolumeclaims "data-orders-0" is forbidden: exceeded quota: tight`,
	}
	// pod is a server of the given ordinal, Ready or not.
	pod := func(ordinal int, ready bool) corev1.Pod {
		condition := corev1.ConditionFalse
		if ready {
			condition = corev1.ConditionTrue
		}
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: fmt.Sprintf("orders-%d", ordinal)},
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: condition}}}}
	}
	pass := func(policy appsv1.PodManagementPolicyType, pods []corev1.Pod, seen ...client.Object) (*observation, ctrl.Result, int) {
		t.Helper()
		lists := 0
		b := fake.NewClientBuilder().WithObjects(seen...).WithInterceptorFuncs(interceptor.Funcs{
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				lists++
				return c.List(ctx, list, opts...)
			}})
		for _, f := range []string{"involvedObject.kind", "involvedObject.name", "involvedObject.uid"} {
			b = b.WithIndex(&corev1.Event{}, f, func(o client.Object) []string {
				ref := o.(*corev1.Event).InvolvedObject
				return []string{map[string]string{"involvedObject.kind": ref.Kind, "involvedObject.name": ref.Name,
					"involvedObject.uid": string(ref.UID)}[f]}
			})
		}
		live := sts.DeepCopy()
		live.Spec.PodManagementPolicy = policy
		live.Status.Replicas = int32(len(pods))
		c := &podCreation{kit: &kit{APIReader: b.Build()}, scope: &scope{db: db, pods: pods}, servers: &servers{applied: live}}
		obs := &observation{}
		if err := c.reconcile(context.Background(), obs); err != nil {
			t.Fatal(err)
		}
		return obs, obs.result(30 * time.Second), lists
	}
	ordered := appsv1.OrderedReadyPodManagement
	for _, c := range []struct {
		name   string
		policy appsv1.PodManagementPolicyType
		pods   []corev1.Pod
		look   bool
	}{
		{"no pod yet", ordered, nil, true},
		{"the first pod starting", ordered, []corev1.Pod{pod(0, false)}, false},
		{"the first pod Ready, the second not made", ordered, []corev1.Pod{pod(0, true)}, true},
		{"two Ready, the third starting", ordered, []corev1.Pod{pod(0, true), pod(1, true), pod(2, false)}, false},
		{"the first gone while the third is not Ready", ordered, []corev1.Pod{pod(1, true), pod(2, false)}, true},
		{"the first pod starting, in parallel", appsv1.ParallelPodManagement, []corev1.Pod{pod(0, false)}, true},
	} {
		obs, res, lists := pass(c.policy, c.pods)
		if looked := lists > 0; looked != c.look || obs.podsMissing != c.look || (res.RequeueAfter == podCreationRecheck) != c.look {
			t.Errorf("%s: %d event lists, podsMissing %v, result %+v; want a look (and again in %s): %v",
				c.name, lists, obs.podsMissing, res, podCreationRecheck, c.look)
		}
		if !c.look {
			continue
		}
		if obs, res, _ := pass(c.policy, c.pods, refused); obs.stalled == nil || obs.podsMissing || res.RequeueAfter != 30*time.Second {
			t.Errorf("%s, a claim refused by a quota: stalled %v, podsMissing %v, result %+v; want Stalled, retried every 30 s",
				c.name, obs.stalled, obs.podsMissing, res)
		}
	}
	all := []corev1.Pod{pod(0, true), pod(1, true), pod(2, true)}
	if obs, res, lists := pass(ordered, all, refused); obs.stalled != nil || obs.podsMissing || res.RequeueAfter != 0 || lists != 0 {
		t.Errorf("every pod there: stalled %v, podsMissing %v, result %+v, %d event lists; want nothing", obs.stalled, obs.podsMissing, res, lists)
	}
}

// TestRestoreShowsInStatus: the first instance's report of a restore
// becomes the reason of a new MyDatabase's status: Reconciling while it
// replays, Stalled with what to do when it failed or makes no progress,
// and nothing once the MyDatabase has served.
func TestRestoreShowsInStatus(t *testing.T) {
	pod := func(r *contract.Restore) []corev1.Pod {
		rep := contract.Report{Restore: r}
		return []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "orders-0",
			Annotations: map[string]string{contract.AnnotationInstance: rep.String()}}}}
	}
	sts := &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: new(int32(1))}, Status: appsv1.StatefulSetStatus{Replicas: 1}}
	running := &contract.Restore{BackupID: "20261203T120000Z", Phase: contract.RestoreRunning, LastWAL: "000000020000000000000005",
		Message: "replaying the archive: it last fetched WAL file 000000020000000000000005"}
	stalled := &contract.Restore{BackupID: "20261203T120000Z", Phase: contract.RestoreRunning, Stalled: true,
		Message: "recovery has fetched no new WAL file for 1m5s: it last asked the archive for WAL file 000000020000000000000006, which the archive does not hold"}
	failed := &contract.Restore{BackupID: "20261203T120000Z", Phase: contract.RestoreFailed,
		Message: "the recovery of base backup 20261203T120000Z stopped before it reached its target: it last asked the archive for WAL file 000000010000000000000004, which the archive does not hold"}
	for _, tc := range []struct {
		name    string
		restore *contract.Restore
		served  bool
		kstatus status.Status
		reason  string
		says    string
	}{
		{"replaying", running, false, status.InProgressStatus, databasev1alpha1.ReasonRestoring, "orders-0 restores base backup 20261203T120000Z: replaying the archive: it last fetched WAL file 000000020000000000000005"},
		{"no progress", stalled, false, status.FailedStatus, databasev1alpha1.ReasonRestoreStalled, "which the archive does not hold"},
		{"failed", failed, false, status.FailedStatus, databasev1alpha1.ReasonRestoreFailed, "WAL file 000000010000000000000004, which the archive does not hold"},
		{"a report left over once it served", failed, true, status.InProgressStatus, databasev1alpha1.ReasonUpdating, "rolling out the spec"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := newDB("shop", "orders", func(db *databasev1alpha1.MyDatabase) { db.Spec.Replicas = ptr.To[int32](1) })
			if tc.served {
				db.Status.CurrentVersion = "17"
			}
			obs := observation{sts: sts, pods: pod(tc.restore)}
			obs.stalled = restoreStalled(db, obs.pods)
			computeStatus(db, &obs, time.Now())
			ready := meta.FindStatusCondition(db.Status.Conditions, databasev1alpha1.ConditionReady)
			if got := kstatusOf(t, db); got != tc.kstatus || ready.Reason != tc.reason || !strings.Contains(ready.Message, tc.says) {
				t.Errorf("kstatus %s, Ready %s %q; want %s, %s saying %q", got, ready.Reason, ready.Message, tc.kstatus, tc.reason, tc.says)
			}
			if tc.kstatus == status.FailedStatus && !strings.Contains(ready.Message, "spec.bootstrap.recovery") {
				t.Errorf("a stalled restore's message names no remedy: %q", ready.Message)
			}
		})
	}
}

package reliability

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/controller/mydatabase"
)

// conflicts answers every third write of the clients it wraps with 409
// Conflict, as a busy object shared with other writers would.
type conflicts struct {
	mu        sync.Mutex
	n, failed int
}

func (c *conflicts) conflict() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	if c.n%3 == 0 {
		c.failed++
		return apierrors.NewConflict(schema.GroupResource{Resource: "injected"}, "x", nil)
	}
	return nil
}

func (c *conflicts) count() (writes, failed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n, c.failed
}

// wrap returns inner with its creates, patches and applies going through c.
func (c *conflicts) wrap(inner client.Client) client.Client {
	return intercept(inner, interceptor.Funcs{
		Create: func(ctx context.Context, next client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := c.conflict(); err != nil {
				return err
			}
			return next.Create(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, next client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			if err := c.conflict(); err != nil {
				return err
			}
			return next.Patch(ctx, obj, p, opts...)
		},
		Apply: func(ctx context.Context, next client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			if err := c.conflict(); err != nil {
				return err
			}
			return next.Apply(ctx, obj, opts...)
		},
	})
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

	cc := &conflicts{}
	o := newOperator(cc.wrap(env.Client), env.Client)
	for range 20 {
		if _, err := o.pass(key); err != nil {
			t.Fatalf("a conflict surfaced as an error: %v", err)
		}
	}
	if _, failed := cc.count(); failed == 0 {
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
	if db.Annotations["example.com/note"] != "keep me" {
		t.Errorf("annotations %v: the other writer's was not kept", db.Annotations)
	}
	if err := actedOn(db); err != nil {
		t.Error(err)
	}
}

// errorLog counts what is logged at error level.
type errorLog struct {
	mu       sync.Mutex
	messages []string
}

func (l *errorLog) Init(logr.RuntimeInfo)          {}
func (l *errorLog) Enabled(int) bool               { return false }
func (l *errorLog) Info(int, string, ...any)       {}
func (l *errorLog) WithValues(...any) logr.LogSink { return l }
func (l *errorLog) WithName(string) logr.LogSink   { return l }
func (l *errorLog) Error(err error, msg string, _ ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.messages = append(l.messages, fmt.Sprintf("%s: %v", msg, err))
}

func (l *errorLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.messages)
}

// Scenario 5, with the operator running: while another writer patches the
// MyDatabase and its StatefulSet and ConfigMap every 100 ms, and a third of
// the operator's writes get a 409, the spec changes. The operator converges
// on it, logs no error (a conflict is retried quietly), the other writer's
// labels and annotations survive, and once converged the operator has
// nothing to write however often the other writer changes its own fields.
func TestConcurrentWriterEvery100ms(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	errs := &errorLog{}
	injected := &conflicts{}
	startManager(t, env.Config, mydatabase.CacheOptions(env.Config), managerSetup{
		logger:     logr.New(errs),
		wrapClient: injected.wrap,
	})
	db := newDB(ns)
	key := client.ObjectKeyFromObject(db)
	waitUntil(t, "the first convergence", func() error {
		return env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pg-config"}, &corev1.ConfigMap{})
	})

	marked := []client.Object{
		&databasev1alpha1.MyDatabase{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg"}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg-config"}},
	}
	stop := make(chan struct{})
	writerDone := make(chan int)
	var rounds atomic.Int64 // rounds of the other writer, each a patch of every marked object
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		n := 0
		for {
			select {
			case <-stop:
				writerDone <- n
				return
			case <-tick.C:
			}
			n++
			mark := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"labels":{"example.com/tick":"%d"},"annotations":{"example.com/tick":"%d"}}}`, n, n))
			for _, obj := range marked {
				_ = env.Client.Patch(ctx, obj, mark, client.FieldOwner("someone-else"))
			}
			rounds.Add(1)
		}
	}()
	// writerRounds waits until the other writer has marked every object n
	// more times.
	writerRounds := func(what string, n int64) {
		t.Helper()
		until := rounds.Load() + n
		waitUntil(t, what, func() error {
			if got := rounds.Load(); got < until {
				return fmt.Errorf("round %d of %d", got, until)
			}
			return nil
		})
	}

	writerRounds("the other writer at work before the spec changes", 10)
	if err := env.Client.Get(ctx, key, db); err != nil {
		t.Fatal(err)
	}
	specChange := client.MergeFrom(db.DeepCopy())
	db.Spec.Replicas = ptr.To[int32](3)
	db.Spec.Parameters = map[string]string{"work_mem": "32MB"}
	if err := env.Client.Patch(ctx, db, specChange); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "convergence on the new spec under the other writer", func() error {
		sts, cm := &appsv1.StatefulSet{}, &corev1.ConfigMap{}
		if err := env.Client.Get(ctx, key, sts); err != nil {
			return err
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pg-config"}, cm); err != nil {
			return err
		}
		if err := env.Client.Get(ctx, key, db); err != nil {
			return err
		}
		if *sts.Spec.Replicas != 3 || !strings.Contains(cm.Data["postgresql.conf"], "work_mem = '32MB'") {
			return fmt.Errorf("replicas %d, postgresql.conf:\n%s", *sts.Spec.Replicas, cm.Data["postgresql.conf"])
		}
		return actedOn(db)
	})
	// Converged, the operator sees every change of the other writer and
	// has nothing to write for it.
	before, _ := injected.count()
	writerRounds("20 changes of the other writer after convergence", 20)
	close(stop)
	ticks := <-writerDone
	if after, _ := injected.count(); after != before {
		t.Errorf("%d writes after convergence, answering the other writer's changes", after-before)
	}

	want := fmt.Sprint(ticks)
	for _, obj := range marked {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Fatal(err)
		}
		if obj.GetLabels()["example.com/tick"] != want || obj.GetAnnotations()["example.com/tick"] != want {
			t.Errorf("%T %s: the other writer's tick %s was not kept: labels %v", obj, obj.GetName(), want, obj.GetLabels())
		}
	}
	if writes, failed := injected.count(); failed == 0 {
		t.Errorf("no conflict was injected in %d writes", writes)
	}
	if logged := errs.all(); len(logged) > 0 {
		t.Errorf("%d errors logged, want none (conflicts are retried quietly):\n%s", len(logged), strings.Join(logged, "\n"))
	}
	t.Logf("the other writer patched 3 objects %d times", ticks)
}

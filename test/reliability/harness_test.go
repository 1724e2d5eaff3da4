package reliability

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/controller/mydatabase"
	"example.com/myoperator/internal/metrics"
	"example.com/myoperator/internal/pki"
	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
)

// The scenarios here drive the reconciler directly, pass by pass, with an
// uncached client, so that every fault lands at an exact, repeatable point.
// "Restarting the operator" means a new reconciler with a healthy client.

var env *testenv.Env

func TestMain(m *testing.M) {
	var err error
	env, err = testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

// recorder keeps every event, to check that no secret value leaks into one.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) Eventf(_ runtime.Object, _ runtime.Object, eventType, reason, action, note string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf("%s %s %s: %s", eventType, reason, action, fmt.Sprintf(note, args...)))
}

func (r *recorder) all() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.events, "\n")
}

// operator is one incarnation of the operator.
type operator struct {
	*mydatabase.Reconciler
	events *recorder
	errs   []string
}

func newOperator(c client.Client, reader client.Reader) *operator {
	rec := &recorder{}
	return &operator{
		Reconciler: &mydatabase.Reconciler{
			Client:      c,
			APIReader:   reader,
			Recorder:    rec,
			NewPassword: specs.RandomPassword,
			Clock:       clocktesting.NewFakePassiveClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
			Metrics:     metrics.New(prometheus.NewRegistry()),
		},
		events: rec,
	}
}

func (o *operator) pass(key client.ObjectKey) (ctrl.Result, error) {
	res, err := o.Reconcile(context.Background(), ctrl.Request{NamespacedName: key})
	if err != nil {
		o.errs = append(o.errs, err.Error())
	}
	return res, err
}

// converge runs passes until one makes no write and asks for no retry, or
// the MyDatabase is gone.
func (o *operator) converge(t *testing.T, key client.ObjectKey) {
	t.Helper()
	counter := testenv.NewCountingClient(o.Client)
	inner := o.Client
	o.Client = counter
	defer func() { o.Client = inner }()
	for range 15 {
		before := counter.Total()
		res, err := o.pass(key)
		if err == nil && counter.Total() == before && res.RequeueAfter == 0 {
			return
		}
		if err == nil && res.RequeueAfter > 0 && counter.Total() == before {
			return // stalled or waiting: nothing more to do now
		}
	}
	t.Fatalf("no convergence after 15 passes; errors: %v", o.errs)
}

// actedOn fails unless db's status describes its current generation, every
// child applied. status.observedGeneration moves only when a pass ends
// Ready, Stalled or Paused (README, "Status"), and envtest runs no
// StatefulSet controller, so the servers never become ready: a pass that
// applied everything ends Reconciling, with the Ready condition, which every
// pass writes, at the generation it describes and no failure as its reason.
func actedOn(db *databasev1alpha1.MyDatabase) error {
	ready := meta.FindStatusCondition(db.Status.Conditions, databasev1alpha1.ConditionReady)
	switch {
	case ready == nil || ready.ObservedGeneration != db.Generation:
		return fmt.Errorf("no status for generation %d yet (Ready: %+v)", db.Generation, ready)
	case ready.Reason == databasev1alpha1.ReasonAPIError:
		return fmt.Errorf("generation %d: %s: %s", db.Generation, ready.Reason, ready.Message)
	}
	if stalled := meta.FindStatusCondition(db.Status.Conditions, databasev1alpha1.ConditionStalled); stalled != nil {
		return fmt.Errorf("generation %d stalled: %s: %s", db.Generation, stalled.Reason, stalled.Message)
	}
	return nil
}

// errCrashed stands for the operator process dying.
var errCrashed = errors.New("injected crash")

// crash lets the first k mutating calls through, then fails every later
// one, as if the process had died right after its k-th write.
type crash struct {
	mu      sync.Mutex
	left    int
	crashed bool
}

func (c *crash) write() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.left == 0 {
		c.crashed = true
		return errCrashed
	}
	c.left--
	return nil
}

func (c *crash) happened() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.crashed
}

// crashingClient is c with every write, of an object or of its status,
// counted by cr.
func crashingClient(c client.Client, cr *crash) client.Client {
	return intercept(c, interceptor.Funcs{
		Create: func(ctx context.Context, next client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := cr.write(); err != nil {
				return err
			}
			return next.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, next client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := cr.write(); err != nil {
				return err
			}
			return next.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, next client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			if err := cr.write(); err != nil {
				return err
			}
			return next.Patch(ctx, obj, p, opts...)
		},
		Apply: func(ctx context.Context, next client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			if err := cr.write(); err != nil {
				return err
			}
			return next.Apply(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, next client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if err := cr.write(); err != nil {
				return err
			}
			return next.Delete(ctx, obj, opts...)
		},
		DeleteAllOf: func(ctx context.Context, next client.WithWatch, obj client.Object, opts ...client.DeleteAllOfOption) error {
			if err := cr.write(); err != nil {
				return err
			}
			return next.DeleteAllOf(ctx, obj, opts...)
		},
		SubResourceCreate: func(ctx context.Context, next client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceCreateOption) error {
			if err := cr.write(); err != nil {
				return err
			}
			return next.SubResource(sub).Create(ctx, obj, subObj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, next client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if err := cr.write(); err != nil {
				return err
			}
			return next.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, next client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			if err := cr.write(); err != nil {
				return err
			}
			return next.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
		SubResourceApply: func(ctx context.Context, next client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			if err := cr.write(); err != nil {
				return err
			}
			return next.SubResource(sub).Apply(ctx, obj, opts...)
		},
	})
}

// intercept puts controller-runtime's interceptor in front of c, which,
// like every client here (an envtest client, a manager's), cannot watch:
// the interceptor wants a client.WithWatch.
func intercept(c client.Client, funcs interceptor.Funcs) client.Client {
	return interceptor.NewClient(unwatched{c}, funcs)
}

type unwatched struct{ client.Client }

func (unwatched) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, errors.New("this test client does not watch")
}

// runUntilCrash runs passes of an operator whose k-th write is its last.
// It reports whether the crash happened before the work was done.
func runUntilCrash(key client.ObjectKey, k int) bool {
	c := &crash{left: k}
	o := newOperator(crashingClient(env.Client, c), env.Client)
	for i := 0; i < 15 && !c.happened(); i++ {
		if _, err := o.pass(key); err == nil && !c.happened() {
			if gone(key) {
				break
			}
		}
	}
	return c.happened()
}

func gone(key client.ObjectKey) bool {
	return apierrors.IsNotFound(env.Client.Get(context.Background(), key, &databasev1alpha1.MyDatabase{}))
}

func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "rel-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func newDB(ns string, mutate ...func(*databasev1alpha1.MyDatabase)) *databasev1alpha1.MyDatabase {
	db := &databasev1alpha1.MyDatabase{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg"}}
	for _, m := range mutate {
		m(db)
	}
	if err := env.Client.Create(context.Background(), db); err != nil {
		panic(err)
	}
	return db
}

// snapshot is everything the operator manages in a namespace, with what
// differs between two equivalent runs (UIDs, resourceVersions, timestamps,
// cluster IPs, the namespace name, password values) normalised away.
func snapshot(t *testing.T, ns string) map[string]any {
	t.Helper()
	ctx := context.Background()
	out := map[string]any{}
	lists := map[string]client.ObjectList{
		"Secret": &corev1.SecretList{}, "ConfigMap": &corev1.ConfigMapList{}, "Service": &corev1.ServiceList{},
		"StatefulSet": &appsv1.StatefulSetList{}, "PodDisruptionBudget": &policyv1.PodDisruptionBudgetList{},
		"PersistentVolumeClaim": &corev1.PersistentVolumeClaimList{}, "MyDatabase": &databasev1alpha1.MyDatabaseList{},
	}
	for kind, list := range lists {
		if err := env.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(list)
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		items, _ := m["items"].([]any)
		for _, item := range items {
			obj := item.(map[string]any)
			md := obj["metadata"].(map[string]any)
			name := md["name"].(string)
			if kind == "Secret" {
				if ann, ok := md["annotations"].(map[string]any); ok {
					if seal, ok := ann[databasev1alpha1.AnnotationCertificateSeal].(string); ok {
						// The times stay; the MAC is keyed by a CA that differs between runs.
						ann[databasev1alpha1.AnnotationCertificateSeal] = seal[:strings.LastIndexByte(seal, '.')+1] + "<mac>"
					}
				}
				data := obj["data"].(map[string]any)
				for k, v := range data {
					plain, _ := base64.StdEncoding.DecodeString(v.(string))
					data[k] = string(plain)
					switch {
					case k == specs.SecretPasswordKey || k == specs.SecretURIKey:
						data[k] = fmt.Sprintf("<%d bytes>", len(plain))
					case strings.HasSuffix(k, ".key"):
						data[k] = "<private key>" // random; and never in a report
					case strings.HasSuffix(k, ".crt"):
						data[k] = certificateSummary(plain) // random serial and key
					}
				}
			}
			out[kind+"/"+name] = normalise(obj, ns)
		}
	}
	return out
}

// certificateSummary is what two runs issue alike of a certificate: its
// subject, issuer, names and validity.
func certificateSummary(pem []byte) string {
	cert, err := pki.ParseCert(pem)
	if err != nil {
		return "<not a certificate: " + err.Error() + ">"
	}
	return fmt.Sprintf("<certificate %q by %q for %v, %s to %s>", cert.Subject.CommonName, cert.Issuer.CommonName,
		cert.DNSNames, cert.NotBefore.UTC().Format(time.RFC3339), cert.NotAfter.UTC().Format(time.RFC3339))
}

var volatile = map[string]bool{
	"uid": true, "resourceVersion": true, "creationTimestamp": true, "managedFields": true,
	"lastTransitionTime": true, "clusterIP": true, "clusterIPs": true, "generation": true,
	"deletionTimestamp": true, "deletionGracePeriodSeconds": true, databasev1alpha1.AnnotationSpecHash: true,
	"observedGeneration":                      true, // equal to generation after converge, which differs by history
	databasev1alpha1.AnnotationPasswordDigest: true, // passwords differ between runs
	databasev1alpha1.AnnotationPodTemplate:    true, // the template holds the MyDatabase's uid
}

func normalise(v any, ns string) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, val := range x {
			if volatile[k] {
				continue
			}
			out[k] = normalise(val, ns)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = normalise(x[i], ns)
		}
		return out
	case string:
		s := strings.ReplaceAll(x, ns, "<ns>")
		if looksLikeUID(s) {
			return "<uid>"
		}
		return s
	}
	return v
}

func looksLikeUID(s string) bool {
	return len(s) == 36 && strings.Count(s, "-") == 4
}

// dataVolume creates the PVC the StatefulSet controller would create for
// ordinal 0 (envtest runs no StatefulSet controller).
func dataVolume(t *testing.T, db *databasev1alpha1.MyDatabase) *corev1.PersistentVolumeClaim {
	t.Helper()
	sts := &appsv1.StatefulSet{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: db.Namespace, Name: db.Name}, sts); err != nil {
		t.Fatal(err)
	}
	tmpl := sts.Spec.VolumeClaimTemplates[0]
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: tmpl.Name + "-" + sts.Name + "-0", Labels: tmpl.Labels},
		Spec:       tmpl.Spec,
	}
	if err := env.Client.Create(context.Background(), pvc); err != nil {
		t.Fatal(err)
	}
	return pvc
}

// password is the one in the credentials Secret of the MyDatabase pg.
func password(t *testing.T, ns string) string {
	t.Helper()
	s := &corev1.Secret{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "pg-credentials"}, s); err != nil {
		return ""
	}
	return string(s.Data[specs.SecretPasswordKey])
}

// assertNoLeak fails if a password appears in the events, errors or status.
func assertNoLeak(t *testing.T, o *operator, db client.ObjectKey, secrets ...string) {
	t.Helper()
	var status string
	got := &databasev1alpha1.MyDatabase{}
	if err := env.Client.Get(context.Background(), db, got); err == nil {
		raw, _ := json.Marshal(got.Status)
		status = string(raw)
	}
	haystack := o.events.all() + strings.Join(o.errs, "\n") + status
	for _, s := range secrets {
		if s != "" && strings.Contains(haystack, s) {
			t.Errorf("a password leaked into events, errors or status")
		}
	}
}

package mydatabase

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zapcore"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/metrics"
	"example.com/myoperator/internal/testenv"
)

// The reconciler runs in a real manager against a real kube-apiserver
// (envtest). envtest has no garbage collector, StatefulSet controller or
// pods: tests play the StatefulSet controller by writing its status, and
// assert owner references where the garbage collector would act. The
// simulated cluster (test/e2e) covers the real ones.

var (
	env        *testenv.Env
	writes     *testenv.CountingClient
	reconciler *Reconciler
	k8s        client.Client // the test's own client, uncached
)

// testNow is the reconciler's clock in these tests.
var testNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// Every log line is kept to be scanned for secrets at the end;
	// TEST_LOG=1 also shows them, with every apply (V(1)).
	var logOut io.Writer = logs
	if os.Getenv("TEST_LOG") != "" {
		logOut = io.MultiWriter(logs, os.Stderr)
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(logOut), zap.UseDevMode(true), zap.Level(zapcore.Level(-1))))
	var err error
	env, err = testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	k8s = env.Client

	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:     env.Scheme,
		Cache:      CacheOptions(env.Config),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: new(true)},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	writes = testenv.NewCountingClient(mgr.GetClient())
	reconciler = &Reconciler{
		Client:      writes,
		APIReader:   mgr.GetAPIReader(),
		Recorder:    mgr.GetEventRecorder("mydatabase-controller"),
		NewPassword: sequentialPasswords(),
		Clock:       clocktesting.NewFakePassiveClock(testNow),
		Metrics:     metrics.New(prometheus.NewRegistry()),
		// Stalled MyDatabases look again soon, so that a lifted quota or
		// policy shows within a test's patience.
		StallRetry: 2 * time.Second,
		Managers:   managers,
	}
	if err := reconciler.SetupWithManager(mgr, 2); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	defer func() { cancel(); <-done }()
	code := m.Run()
	if leak := findSecretLeak(); leak != "" {
		fmt.Fprintln(os.Stderr, "FAIL: a password leaked:", leak)
		return 1
	}
	return code
}

// managers replaces instance managers in every test (managers_test.go).
var managers = &fakeManagers{}

// logs holds everything the operator logged during the tests.
var logs = &syncBuffer{}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// leakMarkers are substrings of every password the tests generate or type.
// leakMarkers: the passwords the tests make or type, and the PEM header of
// every private key (the CAs' and the server certificates').
var leakMarkers = []string{"test-password-", "someone-typed-this", "s3cret-from-the-user", "PRIVATE KEY"}

// findSecretLeak scans the operator's logs, every event and every status
// written during the tests for a password or a private key.
func findSecretLeak() string {
	ctx := context.Background()
	haystacks := map[string]string{"logs": logs.String()}
	events := &eventsv1.EventList{}
	dbs := &databasev1alpha1.MyDatabaseList{}
	for name, list := range map[string]client.ObjectList{"events": events, "status": dbs} {
		if err := k8s.List(ctx, list); err != nil {
			return "cannot list " + name + ": " + err.Error()
		}
		raw, _ := json.Marshal(list)
		haystacks[name] = string(raw)
	}
	if passwordsGenerated.Load() == 0 {
		return "" // no test made a MyDatabase (go test -run a plain test)
	}
	if len(events.Items) == 0 || !strings.Contains(haystacks["logs"], "Applied") {
		return "nothing was captured to scan"
	}
	for where, text := range haystacks {
		for _, marker := range leakMarkers {
			if strings.Contains(text, marker) {
				return fmt.Sprintf("%q found in %s", marker, where)
			}
		}
	}
	return ""
}

// passwordsGenerated counts the passwords sequentialPasswords made.
var passwordsGenerated atomic.Int64

// sequentialPasswords returns distinct, recognisable passwords.
func sequentialPasswords() func() (string, error) {
	return func() (string, error) {
		return fmt.Sprintf("test-password-%04d-abcdefghijklmnop", passwordsGenerated.Add(1)), nil
	}
}

// namespace creates a fresh namespace for one test.
func namespace(t testing.TB) string { return testenv.Namespace(t, k8s) }

// newDB returns a MyDatabase as the API server would default it.
var newDB = testenv.NewDatabase

// create creates db, failing the test if the API server refuses it.
func create(t testing.TB, db *databasev1alpha1.MyDatabase) *databasev1alpha1.MyDatabase {
	t.Helper()
	return testenv.CreateDatabase(t, k8s, db)
}

// eventually polls check until it returns nil, failing the test after 30s.
func eventually(t testing.TB, what string, check func() error) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, what, check)
}

// get reads obj by namespace and name into obj.
func get(ns, name string, obj client.Object) error {
	return k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, obj)
}

// update re-reads the MyDatabase, applies mutate and writes it, retrying on
// conflicts with the operator's own writes.
func update(t *testing.T, db *databasev1alpha1.MyDatabase, mutate func(*databasev1alpha1.MyDatabase)) {
	t.Helper()
	eventually(t, "updating the MyDatabase", func() error {
		if err := get(db.Namespace, db.Name, db); err != nil {
			return err
		}
		mutate(db)
		return k8s.Update(context.Background(), db)
	})
}

func reconcileOnce(t *testing.T, db *databasev1alpha1.MyDatabase) {
	t.Helper()
	// The manager may be reconciling the same MyDatabase meanwhile (a direct
	// call bypasses its queue's one-pass-per-object rule), which a pass can
	// answer with a retriable error, or with a requeue when its status write
	// conflicted with the worker's: retry as the queue would. A pass that
	// lost a conflict wrote nothing, and no event may come to wake another.
	testenv.Eventually(t, 10*time.Second, "a reconcile without error or conflict", func() error {
		res, err := reconciler.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)})
		if err == nil && res.Requeue { //nolint:staticcheck // what conflict returns
			return errors.New("the pass conflicted and asked to be retried")
		}
		return err
	})
}

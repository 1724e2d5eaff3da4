package mydatabasebackup

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/controller/mydatabase"
	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
)

// The reconciler runs in a real manager against a real kube-apiserver
// (envtest), alone: no MyDatabase controller labels the pods or reports
// anything, so the tests play it and the instance managers, writing the
// pods' role label and reports themselves.

// testNow is the reconciler's clock: a report is fresh when it is no older
// than reportFresh at this time.
var testNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

var (
	testConfig *rest.Config
	k8s        client.Client // the test's own client, uncached
	cached     client.Reader // the operator's cache
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	env, err := testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	testConfig, k8s = env.Config, env.Client

	// The operator's own cache, which holds only the pods it manages: the
	// backup reconciler shares it with the MyDatabase controller.
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:     env.Scheme,
		Cache:      mydatabase.CacheOptions(env.Config),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: new(true)},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cached = mgr.GetCache()
	if err := (&Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("mydatabasebackup-controller"),
		Clock: clocktesting.NewFakePassiveClock(testNow)}).SetupWithManager(mgr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	defer func() { cancel(); <-done }()
	return m.Run()
}

// namespace creates a fresh namespace for one test.
func namespace(t testing.TB) string { return testenv.Namespace(t, k8s) }

// newDB returns a MyDatabase as the API server would default it.
var newDB = testenv.NewDatabase

// create creates db, failing the test if the API server refuses it, and
// plays the MyDatabase controller and the StatefulSet controller: db's
// StatefulSet is at the revision "<name>-1".
func create(t testing.TB, db *databasev1alpha1.MyDatabase) *databasev1alpha1.MyDatabase {
	t.Helper()
	db = testenv.CreateDatabase(t, k8s, db)
	rollout(t, db, db.Name+"-1")
	return db
}

// rollout plays the StatefulSet controller: db's StatefulSet (made if it
// is not there) has taken in a pod template at revision, which the pods
// instancePod makes from then on run.
func rollout(t testing.TB, db *databasev1alpha1.MyDatabase, revision string) {
	t.Helper()
	labels := specs.SelectorLabels(db)
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: specs.StatefulSetName(db)},
		Spec: appsv1.StatefulSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "postgres:17"}}}}}}
	if err := k8s.Create(context.Background(), sts); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err := get(sts.Namespace, sts.Name, sts); err != nil {
		t.Fatal(err)
	}
	sts.Status.ObservedGeneration, sts.Status.UpdateRevision = sts.Generation, revision
	if err := k8s.Status().Update(context.Background(), sts); err != nil {
		t.Fatal(err)
	}
}

// withBackup gives a MyDatabase spec.backup. Its credentials Secret is
// not made: only the MyDatabase controller reads it.
func withBackup(db *databasev1alpha1.MyDatabase) {
	db.Spec.Backup = &databasev1alpha1.BackupSpec{ObjectStore: databasev1alpha1.ObjectStore{
		Endpoint: "https://s3.example.com", Bucket: "backups", CredentialsSecret: "s3-key"}}
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

// instancePod plays the StatefulSet controller (a pod of its revision),
// the MyDatabase controller (the role label it gives the Lease's holder)
// and the instance manager (a ready server's report in role, at lsn, at
// testNow).
func instancePod(t *testing.T, db *databasev1alpha1.MyDatabase, name, role, lsn string) {
	t.Helper()
	sts := &appsv1.StatefulSet{}
	if err := get(db.Namespace, specs.StatefulSetName(db), sts); err != nil {
		t.Fatal(err)
	}
	labels := specs.Labels(db, specs.ComponentDatabase)
	labels[databasev1alpha1.LabelRole] = role
	labels[appsv1.ControllerRevisionHashLabelKey] = sts.Status.UpdateRevision
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: name, Labels: labels, Annotations: map[string]string{
			contract.AnnotationInstance: contract.Report{Role: role, Ready: true, Timeline: 1, LSN: lsn, Replayed: lsn, Time: testNow}.String()}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "postgres:17"}}},
	}
	// AlreadyExists: client-go retries a create the API server answered
	// with Retry-After (a loaded machine's timeout), which may have
	// created the pod the first time.
	if err := k8s.Create(context.Background(), pod); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// In the operator's cache before the test goes on: a backup made
	// while the cache lacks a replica is assigned to the primary, for
	// good (CI saw it once).
	testenv.Eventually(t, 10*time.Second, name+" in the operator's cache", func() error {
		return cached.Get(context.Background(), client.ObjectKeyFromObject(pod), &corev1.Pod{})
	})
}

// deletePod deletes a pod at once and waits until it is gone.
func deletePod(t *testing.T, ns, name string) {
	t.Helper()
	if err := k8s.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	eventually(t, name+" gone", func() error {
		if err := get(ns, name, &corev1.Pod{}); err == nil {
			return fmt.Errorf("still there")
		}
		return nil
	})
}

// publishReport plays a pod's instance manager: it publishes r.
func publishReport(t *testing.T, ns, pod string, r contract.Report) {
	t.Helper()
	testenv.PublishReport(t, k8s, ns, pod, r)
}

func backupObject(t *testing.T, ns, name, database string, target databasev1alpha1.BackupTarget) *databasev1alpha1.MyDatabaseBackup {
	t.Helper()
	b := &databasev1alpha1.MyDatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: databasev1alpha1.MyDatabaseBackupSpec{Database: database, Target: target}}
	if err := k8s.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	return b
}

func waitBackup(t *testing.T, b *databasev1alpha1.MyDatabaseBackup, what string, check func(databasev1alpha1.MyDatabaseBackupStatus) error) {
	t.Helper()
	eventually(t, b.Name+": "+what, func() error {
		if err := get(b.Namespace, b.Name, b); err != nil {
			return err
		}
		return check(b.Status)
	})
}

func failedWith(text string) func(databasev1alpha1.MyDatabaseBackupStatus) error {
	return func(st databasev1alpha1.MyDatabaseBackupStatus) error {
		if st.Phase != databasev1alpha1.BackupFailed || !strings.Contains(st.Message, text) || st.StoppedAt == nil {
			return fmt.Errorf("status %+v, want Failed mentioning %q", st, text)
		}
		return nil
	}
}

// askedOf waits until the backup is assigned to pod, and the pod asked.
func askedOf(t *testing.T, b *databasev1alpha1.MyDatabaseBackup, pod string) {
	t.Helper()
	waitBackup(t, b, "assigned to "+pod, func(st databasev1alpha1.MyDatabaseBackupStatus) error {
		if st.Phase != databasev1alpha1.BackupPending || st.Instance != pod || st.InstanceUID == "" {
			return fmt.Errorf("status %+v, want Pending on %s", st, pod)
		}
		return nil
	})
	eventually(t, pod+" asked for "+b.Name, func() error {
		p := &corev1.Pod{}
		if err := get(b.Namespace, pod, p); err != nil {
			return err
		}
		if got := p.Annotations[contract.AnnotationBackupRequest]; got != b.Name {
			return fmt.Errorf("the pod asks for %q", got)
		}
		return nil
	})
}

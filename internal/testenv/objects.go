package testenv

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
)

// Namespace creates a fresh namespace for one test.
func Namespace(t testing.TB, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// NewDatabase returns a MyDatabase as the API server would default it,
// changed by mutate.
func NewDatabase(ns, name string, mutate ...func(*databasev1alpha1.MyDatabase)) *databasev1alpha1.MyDatabase {
	db := &databasev1alpha1.MyDatabase{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       databasev1alpha1.MyDatabaseSpec{Version: "17"},
	}
	for _, m := range mutate {
		m(db)
	}
	return db
}

// PublishReport plays a pod's instance manager: it publishes r on the
// pod, retrying until the pod exists (30 s).
func PublishReport(t testing.TB, c client.Client, ns, pod string, r contract.Report) {
	t.Helper()
	Eventually(t, 30*time.Second, "the report of "+pod, func() error {
		p := &corev1.Pod{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: pod}, p); err != nil {
			return err
		}
		patch := client.MergeFrom(p.DeepCopy())
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[contract.AnnotationInstance] = r.String()
		return c.Patch(context.Background(), p, patch)
	})
}

// Kstatus is the status kubectl wait, Flux and Argo CD read of obj
// (sigs.k8s.io/cli-utils kstatus).
func Kstatus(t testing.TB, obj runtime.Object) status.Status {
	t.Helper()
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	res, err := status.Compute(&unstructured.Unstructured{Object: raw})
	if err != nil {
		t.Fatal(err)
	}
	return res.Status
}

// CreateDatabase creates db, failing the test if the API server refuses it.
func CreateDatabase(t testing.TB, c client.Client, db *databasev1alpha1.MyDatabase) *databasev1alpha1.MyDatabase {
	t.Helper()
	if err := c.Create(context.Background(), db); err != nil {
		t.Fatalf("creating MyDatabase: %v", err)
	}
	return db
}

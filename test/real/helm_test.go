//go:build real

package real

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/testenv"
)

// helm install of charts/myoperator gives a working operator: the
// operator's image built from this checkout runs in a pod of the chart's
// Deployment (namespace-scoped), passes its readiness probe, and makes a
// MyDatabase of its namespace Ready, with a server psql reaches. The
// suite's own operator process is stopped meanwhile, so that only the
// chart's reconciles.
func TestHelmInstallRunsTheOperator(t *testing.T) {
	helmBin := os.Getenv("HELM")
	if helmBin == "" {
		if out, err := testenv.Make(env.repo, "helm"); err != nil {
			t.Fatalf("make helm: %v\n%s", err, out)
		}
		helmBin = filepath.Join(env.repo, "bin", "helm")
	}
	helm := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(helmBin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	if err := env.operator.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.startOperator(); err != nil {
			t.Errorf("restarting the suite's operator: %v", err)
		}
	})

	ns := newNamespace(t, "helm-operator", map[string]string{
		"pod-security.kubernetes.io/enforce":         "restricted",
		"pod-security.kubernetes.io/enforce-version": "latest",
	})
	start := time.Now()
	out := helm("install", "myoperator", filepath.Join(env.repo, "charts", "myoperator"), "-n", ns,
		"--set", "namespaceScoped=true", "--set", "image="+env.instanceImage, "--wait", "--timeout", "2m")
	t.Logf("helm install --wait returned after %s:\n%s", time.Since(start).Round(100*time.Millisecond), out)
	t.Cleanup(func() {
		out, err := exec.Command(helmBin, "uninstall", "myoperator", "-n", ns, "--wait").CombinedOutput()
		if err != nil {
			t.Errorf("helm uninstall: %v\n%s", err, out)
		}
	})
	dep := &appsv1.Deployment{}
	if err := env.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "main-controller-manager"}, dep); err != nil {
		t.Fatal(err)
	}
	if dep.Status.ReadyReplicas != 1 {
		t.Fatalf("the chart's operator Deployment has %d ready replicas, want 1", dep.Status.ReadyReplicas)
	}

	db := &databasev1alpha1.MyDatabase{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: dbName},
		Spec: databasev1alpha1.MyDatabaseSpec{
			Version: "17", Replicas: ptr.To[int32](1), DeletionPolicy: databasev1alpha1.DeletionPolicyDelete,
			Storage: databasev1alpha1.StorageSpec{Size: resource.MustParse("1Gi")},
		},
	}
	if err := env.c.Create(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	waitReady(t, ns, 1, 3*time.Minute)
	testenv.Eventually(t, 30*time.Second, "kubectl mydb psql reaches the server the chart's operator made", func() error {
		out, err := kubectlMydb(t, "psql", dbName, "-n", ns, "--psql", psqlBinary(t), "--",
			"--no-psqlrc", "--tuples-only", "--no-align", "--command", "SELECT 6 * 7")
		if err != nil {
			return err
		}
		if !strings.Contains(out, "\n42\n") {
			return fmt.Errorf("output %q lacks 42", out)
		}
		return nil
	})

	// kubectl mydb report collects the log of the operator running in the
	// cluster.
	bundle := filepath.Join(t.TempDir(), "bundle")
	if _, err := kubectlMydb(t, "report", dbName, "-n", ns, "-o", bundle); err != nil {
		t.Fatal(err)
	}
	logs, _ := filepath.Glob(filepath.Join(bundle, "operator", ns, "main-controller-manager-*-manager.log"))
	if len(logs) != 1 {
		readme, _ := os.ReadFile(filepath.Join(bundle, "README.txt"))
		t.Fatalf("the bundle holds %d operator logs, want 1; README.txt:\n%s", len(logs), readme)
	}
	log, err := os.ReadFile(logs[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "Starting workers") {
		t.Errorf("the operator log in the bundle lacks \"Starting workers\":\n%s", log)
	}
	t.Logf("the bundle holds the in-cluster operator's log, %d bytes", len(log))

	deleteAndWait(t, ns)
}

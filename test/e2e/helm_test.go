//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/myoperator/internal/helmchart"
	"example.com/myoperator/internal/testenv"
)

// helmBin is helm, built from the Go module proxy by make helm (make
// test-e2e passes it as HELM).
func helmBin(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	if out, err := testenv.Make(env.repo, "helm"); err != nil {
		t.Fatalf("make helm: %v\n%s", err, out)
	}
	return filepath.Join(env.repo, "bin", "helm")
}

func helm(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(helmBin(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// helm install of charts/myoperator, namespace-scoped with an image of our
// choosing, creates every object helm template renders, as rendered; helm
// uninstall removes them and keeps the CRD. KWOK runs no container, so the
// operator's pod is only marked Running: that the chart's operator works
// is not shown here (the Deployment is the one of config/, which make
// test-helm proves alike, and test/real runs the operator's image on a
// real node).
func TestHelmInstall(t *testing.T) {
	ns := newNamespace(t, "helm", nil)
	chart := filepath.Join(env.repo, "charts", "myoperator")
	values := []string{"--set", "namespaceScoped=true", "--set", "image=registry.example.com/myoperator:e2e"}
	installed := false
	t.Cleanup(func() {
		if installed {
			_, _ = exec.Command(helmBin(t), "uninstall", "main", "-n", ns, "--kubeconfig", env.kubeconfig).CombinedOutput()
		}
	})
	start := time.Now()
	out := helm(t, append([]string{"install", "main", chart, "-n", ns, "--kubeconfig", env.kubeconfig}, values...)...)
	installed = true
	t.Logf("helm install took %s:\n%s", time.Since(start).Round(100*time.Millisecond), out)

	rendered, err := helmchart.SplitYAML([]byte(helm(t, append([]string{"template", "main", chart, "-n", ns}, values...)...)))
	if err != nil {
		t.Fatal(err)
	}
	if len(rendered) < 10 {
		t.Fatalf("helm template rendered %d objects", len(rendered))
	}
	var names []string
	for _, want := range rendered {
		u := &unstructured.Unstructured{Object: want}
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(u.GroupVersionKind())
		if err := env.c.Get(ctx, client.ObjectKey{Namespace: u.GetNamespace(), Name: u.GetName()}, live); err != nil {
			t.Errorf("%s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
			continue
		}
		for _, field := range []string{"rules", "roleRef", "subjects", "spec"} {
			if w, ok := want[field]; ok {
				if diff := subsetDiff(field, w, live.Object[field]); diff != "" {
					t.Errorf("%s %s: the live object differs from helm template: %s", u.GetKind(), u.GetName(), diff)
				}
			}
		}
		names = append(names, u.GetKind()+"/"+u.GetName())
	}
	t.Logf("helm install created %d objects as rendered: %v", len(names), names)

	dep := &appsv1.Deployment{}
	if !exists(t, ns, "main-controller-manager", dep) {
		t.Fatal("no Deployment main-controller-manager")
	}
	c := dep.Spec.Template.Spec.Containers[0]
	t.Logf("manager image %s, env %v", c.Image, c.Env)
	eventually(t, 60*time.Second, "the operator's pod scheduled and marked Ready by KWOK (no process runs in it)", func() (bool, string) {
		d := &appsv1.Deployment{}
		exists(t, ns, "main-controller-manager", d)
		return d.Status.AvailableReplicas == 1, fmt.Sprintf("available %d", d.Status.AvailableReplicas)
	})

	// kubectl mydb report finds the operator's Deployment by its labels
	// and collects its pods' logs, or says why it could not.
	applyDB(t, ns, 1, retain)
	bundle := filepath.Join(t.TempDir(), "bundle")
	mustMydb(t, "report", dbName, "-n", ns, "-o", bundle)
	if _, err := os.Stat(filepath.Join(bundle, "operator", ns, "main-controller-manager.yaml")); err != nil {
		t.Errorf("the bundle lacks the operator's Deployment: %v", err)
	}
	readme, _ := os.ReadFile(filepath.Join(bundle, "README.txt"))
	logs, _ := filepath.Glob(filepath.Join(bundle, "operator", ns, "main-controller-manager-*-manager.log"))
	t.Logf("operator logs in the bundle: %v; README.txt:\n%s", logs, readme)
	if len(logs) == 0 && !strings.Contains(string(readme), "operator: log of pod "+ns+"/main-controller-manager-") {
		t.Errorf("the bundle has neither the operator's log nor why not")
	}

	out = helm(t, "uninstall", "main", "-n", ns, "--kubeconfig", env.kubeconfig, "--wait")
	installed = false
	t.Logf("helm uninstall:\n%s", out)
	for _, want := range rendered {
		u := &unstructured.Unstructured{Object: want}
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(u.GroupVersionKind())
		err := env.c.Get(ctx, client.ObjectKey{Namespace: u.GetNamespace(), Name: u.GetName()}, live)
		gone := apierrors.IsNotFound(err) || (err == nil && live.GetDeletionTimestamp() != nil)
		if !gone {
			t.Errorf("%s %s still exists after helm uninstall (%v)", u.GetKind(), u.GetName(), err)
		}
	}
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	if err := env.c.Get(ctx, client.ObjectKey{Name: "mydatabases.database.example.com"}, crd); err != nil {
		t.Errorf("the CRD after helm uninstall: %v", err)
	}
}

// subsetDiff says where want (rendered) is not in got (live, with the
// server's defaults added): every map key of want must be in got with a
// value like it, every list as long, element by element. Scalars compare
// by their text, as YAML numbers parse to float64 and JSON ones to int64.
func subsetDiff(path string, want, got any) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: want a map, got %T", path, got)
		}
		for k, wv := range w {
			if d := subsetDiff(path+"."+k, wv, g[k]); d != "" {
				return d
			}
		}
	case []any:
		if len(w) == 0 && got == nil {
			return "" // the server drops an empty list
		}
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Sprintf("%s: want %d elements, got %v", path, len(w), got)
		}
		for i := range w {
			if d := subsetDiff(fmt.Sprintf("%s[%d]", path, i), w[i], g[i]); d != "" {
				return d
			}
		}
	default:
		if fmt.Sprint(want) != fmt.Sprint(got) {
			return fmt.Sprintf("%s: want %v, got %v", path, want, got)
		}
	}
	return ""
}

// Package helm proves that charts/myoperator installs what config/ does:
// for each of the chart's options, `helm template` renders the same
// objects as `kustomize build` of the matching kustomization. Run with
// make test-helm (HELM and KUSTOMIZE name the binaries).
package helm

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"example.com/myoperator/internal/helmchart"
	"example.com/myoperator/internal/testenv"
)

func TestChartMatchesKustomize(t *testing.T) {
	helm := os.Getenv("HELM")
	if helm == "" {
		t.Fatal("HELM is not set: run make test-helm, which builds helm into bin/")
	}
	repo := testenv.RepoRoot()
	cases := map[string]struct {
		namespace string
		set       []string
		overlay   string // a kustomization.yaml; "" for kustomize build of base alone
		base      string
		drop      []string // kind/name of kustomize objects the chart leaves out with these values
	}{
		"defaults are config/default": {
			namespace: helmchart.KustomizeNamespace, base: "config/default",
		},
		"namespaceScoped is config/namespaced": {
			namespace: helmchart.KustomizeNamespace, base: "config/namespaced", set: []string{"namespaceScoped=true"},
		},
		"another namespace and image, namespace-scoped": {
			namespace: "dbs", base: "config/namespaced",
			set: []string{"namespaceScoped=true", "image=registry.example.com/myoperator:v1.2.3",
				"poolerImage=registry.example.com/pgbouncer:1.23.1"},
			// What make deploy IMG=... does: the image, and the
			// INSTANCE_MANAGER_IMAGE that config/manager copies from it;
			// and the poolers' image.
			overlay: `namespace: dbs
images:
- name: controller
  newName: registry.example.com/myoperator
  newTag: v1.2.3
patches:
- target: {kind: Deployment, name: main-controller-manager}
  patch: |-
    - op: replace
      path: /spec/template/spec/containers/0/env/0
      value: {name: INSTANCE_MANAGER_IMAGE, value: registry.example.com/myoperator:v1.2.3}
    - op: replace
      path: /spec/template/spec/containers/0/env/1
      value: {name: POOLER_IMAGE, value: registry.example.com/pgbouncer:1.23.1}
`,
		},
		"metricsService=false leaves the metrics Service out": {
			namespace: helmchart.KustomizeNamespace, base: "config/default", set: []string{"metricsService=false"},
			drop: []string{"Service/main-controller-manager-metrics-service"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(repo, tc.base)
			if tc.overlay != "" {
				// Inside the checkout: kustomize loads no base from outside
				// the overlay's tree of parents.
				if err := os.MkdirAll(filepath.Join(repo, "bin"), 0o755); err != nil {
					t.Fatal(err)
				}
				tmp, err := os.MkdirTemp(filepath.Join(repo, "bin"), "helm-overlay-")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = os.RemoveAll(tmp) })
				dir = tmp
				base, err := filepath.Rel(dir, filepath.Join(repo, tc.base))
				if err != nil {
					t.Fatal(err)
				}
				k := fmt.Sprintf("resources:\n- %s\n%s", base, tc.overlay)
				if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want := kustomize(t, dir)
			delete(want, "Namespace/"+tc.namespace) // helm install --create-namespace
			for _, key := range tc.drop {
				if _, ok := want[key]; !ok {
					t.Fatalf("kustomize renders no %s", key)
				}
				delete(want, key)
			}
			args := make([]string, 0, 6+2*len(tc.set))
			args = append(args, "template", "main", filepath.Join(repo, "charts/myoperator"), "--namespace", tc.namespace, "--include-crds")
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			out, err := exec.Command(helm, args...).CombinedOutput()
			if err != nil {
				t.Fatalf("helm %v: %v\n%s", args, err, out)
			}
			got := byKey(t, out)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("helm template differs from kustomize build (-kustomize +helm):\n%s", diff)
			}
			keys := make([]string, 0, len(got))
			for k := range got {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			t.Logf("%d objects alike: %v", len(got), keys)
		})
	}
}

func kustomize(t *testing.T, dir string) map[string]map[string]any {
	t.Helper()
	bin := os.Getenv("KUSTOMIZE")
	if bin == "" {
		bin = filepath.Join(testenv.RepoRoot(), "bin", "kustomize")
	}
	out, err := exec.Command(bin, "build", dir).Output()
	if err != nil {
		t.Fatalf("kustomize build %s: %v %s", dir, err, stderr(err))
	}
	return byKey(t, out)
}

// byKey parses a YAML stream into objects by kind/name.
func byKey(t *testing.T, stream []byte) map[string]map[string]any {
	t.Helper()
	docs, err := helmchart.SplitYAML(stream)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, d := range docs {
		md, _ := d["metadata"].(map[string]any)
		key := fmt.Sprintf("%v/%v", d["kind"], md["name"])
		if _, dup := out[key]; dup {
			t.Fatalf("%s twice", key)
		}
		out[key] = d
	}
	return out
}

func stderr(err error) string {
	if exit, ok := errors.AsType[*exec.ExitError](err); ok {
		return string(exit.Stderr)
	}
	return ""
}

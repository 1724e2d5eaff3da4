package helmchart

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"example.com/myoperator/internal/specs"
)

const clusterWide = `apiVersion: v1
kind: Namespace
metadata:
  name: main-system
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: things.example.com
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: main-manager-role
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: main-controller-manager
  namespace: main-system
spec:
  image: controller:latest
  pooler: mydatabase-pgbouncer:1.18.0
`

func TestRender(t *testing.T) {
	namespaced := strings.Replace(clusterWide, "kind: ClusterRole\nmetadata:\n  name: main-manager-role\n",
		"kind: Role\nmetadata:\n  name: main-manager-role\n  namespace: main-system\n", 1)
	chart, err := Render([]byte(clusterWide), []byte(namespaced))
	if err != nil {
		t.Fatal(err)
	}
	want := Chart{
		"crds/things.example.com.yaml": "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: things.example.com\n",
		"templates/clusterrole-manager-role.yaml": `{{- if .Values.namespaceScoped }}
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: main-manager-role
  namespace: {{ .Release.Namespace }}
{{- else }}
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: main-manager-role
{{- end }}
`,
		"templates/deployment-controller-manager.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: main-controller-manager
  namespace: {{ .Release.Namespace }}
spec:
  image: {{ .Values.image | quote }}
  pooler: {{ .Values.poolerImage | quote }}
`,
	}
	if diff := cmp.Diff(want, chart); diff != "" {
		t.Errorf("chart (-want +got):\n%s", diff)
	}
}

// The chart's placeholder for the poolers' image is the operator's
// default, which config/manager sets and values.yaml repeats.
func TestPoolerImagePlaceholder(t *testing.T) {
	if KustomizePoolerImage != specs.DefaultPoolerImage {
		t.Errorf("KustomizePoolerImage %q, the operator's default %q", KustomizePoolerImage, specs.DefaultPoolerImage)
	}
}

func TestRenderRefuses(t *testing.T) {
	cases := map[string]struct{ clusterWide, namespaced, err string }{
		"a namespace in a string": {
			clusterWide: "kind: ConfigMap\nmetadata:\n  name: c\ndata:\n  url: http://svc.main-system.svc\n",
			err:         "cannot make it a value",
		},
		"an object only in config/default": {
			clusterWide: "kind: ConfigMap\nmetadata:\n  name: c\n", namespaced: "kind: ConfigMap\nmetadata:\n  name: d\n",
			err: "ConfigMap c is in config/default but not in config/namespaced",
		},
	}
	for name, tc := range cases {
		ns := tc.namespaced
		if ns == "" {
			ns = tc.clusterWide
		}
		_, err := Render([]byte(tc.clusterWide), []byte(ns))
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: error %v, want one with %q", name, err, tc.err)
		}
	}
}

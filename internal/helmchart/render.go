// Package helmchart renders charts/myoperator from the kustomize output of
// config/default and config/namespaced, so that the chart never drifts
// from config/ (make helm-chart writes it, make verify fails when the
// committed chart differs).
//
// The chart is the kustomize output with three things made values:
//   - the namespace (main-system) is the release's;
//   - the image (controller:latest, in the manager's image and in its
//     INSTANCE_MANAGER_IMAGE) is .Values.image, and the poolers' default
//     image (mydatabase-pgbouncer:1.18.0, its POOLER_IMAGE)
//     .Values.poolerImage;
//   - every object in which config/default and config/namespaced differ
//     (the manager's ClusterRole or Role, its binding, the Deployment's
//     WATCH_NAMESPACE) has both forms, chosen by .Values.namespaceScoped;
//
// and the metrics Service is optional (.Values.metricsService). The CRD goes
// to crds/, which Helm installs before the templates and never deletes;
// the Namespace object is left out (helm install --create-namespace).
package helmchart

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Placeholders in the kustomize output that become values.
const (
	KustomizeNamespace = "main-system"
	KustomizeImage     = "controller:latest"
	// KustomizePoolerImage is specs.DefaultPoolerImage (render_test.go).
	KustomizePoolerImage = "mydatabase-pgbouncer:1.18.0"
	metricsServiceName   = "main-controller-manager-metrics-service"
)

// Chart is the chart's generated files (templates/ and crds/) by path
// relative to the chart's directory. Chart.yaml, values.yaml and
// templates/NOTES.txt are written by hand.
type Chart map[string]string

type object struct {
	kind, name string
	body       map[string]any
}

// SplitYAML parses a multi-document YAML stream into objects.
func SplitYAML(stream []byte) ([]map[string]any, error) {
	var out []map[string]any
	for doc := range strings.SplitSeq(string(stream), "\n---\n") {
		if strings.TrimSpace(strings.TrimPrefix(doc, "---\n")) == "" {
			continue
		}
		m := map[string]any{}
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			return nil, err
		}
		if len(m) > 0 { // not a document of comments alone
			out = append(out, m)
		}
	}
	return out, nil
}

func (o object) key() string {
	return strings.TrimPrefix(o.kind, "Cluster") + "/" + o.name
}

func objects(stream []byte) ([]object, error) {
	docs, err := SplitYAML(stream)
	if err != nil {
		return nil, err
	}
	out := make([]object, 0, len(docs))
	for _, m := range docs {
		md, _ := m["metadata"].(map[string]any)
		name, _ := md["name"].(string)
		kind, _ := m["kind"].(string)
		if kind == "" || name == "" {
			return nil, fmt.Errorf("an object without kind or name: %v", m)
		}
		out = append(out, object{kind: kind, name: name, body: m})
	}
	return out, nil
}

// Render builds the chart from `kustomize build config/default` and
// `kustomize build config/namespaced`.
func Render(clusterWide, namespaced []byte) (Chart, error) {
	cw, err := objects(clusterWide)
	if err != nil {
		return nil, fmt.Errorf("config/default: %w", err)
	}
	ns, err := objects(namespaced)
	if err != nil {
		return nil, fmt.Errorf("config/namespaced: %w", err)
	}
	// Objects are matched by kind and name, where a ClusterRole matches a
	// Role (namespace-scoped, the manager's ClusterRole becomes a Role of
	// the same name) and a ClusterRoleBinding a RoleBinding.
	byName := map[string]object{}
	for _, o := range ns {
		byName[o.key()] = o
	}
	chart := Chart{}
	for _, o := range cw {
		twin, ok := byName[o.key()]
		if !ok {
			return nil, fmt.Errorf("%s %s is in config/default but not in config/namespaced", o.kind, o.name)
		}
		delete(byName, o.key())
		switch o.kind {
		case "Namespace":
			continue
		case "CustomResourceDefinition":
			text, err := yaml.Marshal(o.body)
			if err != nil {
				return nil, err
			}
			chart["crds/"+o.name+".yaml"] = string(text)
			continue
		}
		text, err := template(o.body)
		if err != nil {
			return nil, err
		}
		twinText, err := template(twin.body)
		if err != nil {
			return nil, err
		}
		if twinText != text {
			text = "{{- if .Values.namespaceScoped }}\n" + twinText + "{{- else }}\n" + text + "{{- end }}\n"
		}
		if o.name == metricsServiceName {
			text = "{{- if .Values.metricsService }}\n" + text + "{{- end }}\n"
		}
		chart["templates/"+strings.ToLower(o.kind)+"-"+strings.TrimPrefix(o.name, "main-")+".yaml"] = text
	}
	if len(byName) > 0 {
		var names []string
		for n := range byName {
			names = append(names, n)
		}
		slices.Sort(names)
		return nil, fmt.Errorf("in config/namespaced but not in config/default: %v", names)
	}
	return chart, nil
}

// template is one object as YAML with the namespace and the image made
// values.
func template(body map[string]any) (string, error) {
	text, err := yaml.Marshal(body)
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	for line := range strings.SplitSeq(strings.TrimSuffix(string(text), "\n"), "\n") {
		key, value, found := strings.Cut(line, ": ")
		switch {
		case found && value == KustomizeNamespace && strings.HasSuffix(key, "namespace"):
			line = key + ": {{ .Release.Namespace }}"
		case found && value == KustomizeImage:
			line = key + ": {{ .Values.image | quote }}"
		case found && value == KustomizePoolerImage:
			line = key + ": {{ .Values.poolerImage | quote }}"
		case strings.Contains(line, KustomizeNamespace) || strings.Contains(line, KustomizeImage) || strings.Contains(line, KustomizePoolerImage):
			return "", fmt.Errorf("%q: a namespace or image where the chart cannot make it a value", line)
		}
		out.WriteString(line + "\n")
	}
	return out.String(), nil
}

// Header starts every generated file.
const Header = "# Generated by make helm-chart (hack/helmchart) from config/: do not edit.\n"

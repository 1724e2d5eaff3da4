package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// PrometheusBin is the directory holding prometheus and promtool, built
// from the Go module proxy by hack/prometheus.sh the first time (about
// 4 minutes on 2 cores) and cached outside the checkout.
func PrometheusBin() (string, error) {
	out, err := exec.Command(filepath.Join(RepoRoot(), "hack/prometheus.sh")).Output()
	if err != nil {
		return "", fmt.Errorf("hack/prometheus.sh: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// AlertRule is a rule of config/prometheus/prometheusrule.yaml.
type AlertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	Annotations map[string]string `json:"annotations"`
}

// AlertRules reads config/prometheus/prometheusrule.yaml: its spec as the
// Prometheus rule file the Prometheus Operator would write, and its rules.
// Fields the PrometheusRule does not have are refused.
func AlertRules() (ruleFile []byte, rules []AlertRule, err error) {
	raw, err := os.ReadFile(filepath.Join(RepoRoot(), "config/prometheus/prometheusrule.yaml"))
	if err != nil {
		return nil, nil, err
	}
	var doc struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       map[string]any `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(raw, &doc); err != nil {
		return nil, nil, fmt.Errorf("prometheusrule.yaml: %w", err)
	}
	var spec struct {
		Groups []struct {
			Rules []AlertRule `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(raw, &struct {
		Spec any `json:"spec"`
	}{&spec}); err != nil {
		return nil, nil, err
	}
	for _, g := range spec.Groups {
		rules = append(rules, g.Rules...)
	}
	ruleFile, err = yaml.Marshal(doc.Spec)
	return ruleFile, rules, err
}

// PgBouncerBin is the path of a PgBouncer executable, Debian's package
// extracted by hack/pgbouncer.sh the first time (seconds).
func PgBouncerBin() (string, error) {
	out, err := exec.Command(filepath.Join(RepoRoot(), "hack/pgbouncer.sh")).Output()
	if err != nil {
		return "", fmt.Errorf("hack/pgbouncer.sh: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

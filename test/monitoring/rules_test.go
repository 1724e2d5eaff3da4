// Package monitoring tests the alerting rules and the dashboard shipped in
// the repository (config/prometheus, docs/monitoring) with promtool, built
// from the Go module proxy by hack/prometheus.sh. test/postgres evaluates
// the same expressions on a real Prometheus scraping real servers.
package monitoring

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"example.com/myoperator/internal/testenv"
)

// prometheusRule is the part of config/prometheus/prometheusrule.yaml the
// tests read.
type prometheusRule struct {
	Spec struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// TestAlertRules: promtool accepts the rules (check rules) and every alert
// fires on its condition and not on its near miss
// (prometheusrule_test.yaml, test rules); every alert has a test and a
// runbook with the four sections.
func TestAlertRules(t *testing.T) {
	root := testenv.RepoRoot()
	raw, err := os.ReadFile(filepath.Join(root, "config/prometheus/prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var pr prometheusRule
	if err := yaml.UnmarshalStrict(raw, &struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       any            `json:"spec"`
	}{}); err != nil {
		t.Fatalf("prometheusrule.yaml: %v", err)
	}
	if err := yaml.Unmarshal(raw, &pr); err != nil {
		t.Fatal(err)
	}
	// The rule file promtool and Prometheus read is the PrometheusRule's
	// spec, as the Prometheus Operator writes it.
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	spec, err := yaml.Marshal(doc["spec"])
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), spec, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join(root, "config/prometheus/prometheusrule_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	bin, err := testenv.PrometheusBin()
	if err != nil {
		t.Fatal(err)
	}
	promtool := filepath.Join(bin, "promtool")
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "rules_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}

	alerts := 0
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			if !strings.Contains(string(tests), "alertname: "+r.Alert+"\n") {
				t.Errorf("%s has no test in prometheusrule_test.yaml", r.Alert)
			}
			want := "docs/runbooks/" + r.Alert + ".md"
			if r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
			}
			runbook, err := os.ReadFile(filepath.Join(root, want))
			if err != nil {
				t.Errorf("%s: %v", r.Alert, err)
				continue
			}
			for _, section := range []string{"## Meaning", "## Impact", "## Diagnosis", "## Mitigation", "kubectl mydb status"} {
				if !strings.Contains(string(runbook), section) {
					t.Errorf("%s lacks %q", want, section)
				}
			}
		}
	}
	if alerts != 7 {
		t.Errorf("%d alerts, want the 7 the README lists", alerts)
	}
}

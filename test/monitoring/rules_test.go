// Package monitoring tests the alerting rules and the dashboard shipped in
// the repository (config/prometheus, docs/monitoring) with promtool, built
// from the Go module proxy by hack/prometheus.sh. test/postgres evaluates
// the same expressions on a real Prometheus scraping real servers.
package monitoring

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"example.com/myoperator/internal/testenv"
)

// alertRow is a row of the README's table of alerts.
var alertRow = regexp.MustCompile("(?m)^\\| `MyDatabase[A-Za-z]+` \\| .* \\| \\[docs/runbooks/")

// TestAlertRules: promtool accepts the rules (check rules) and every alert
// fires on its condition and not on its near miss
// (prometheusrule_test.yaml, test rules); every alert has a test and a
// runbook with the four sections.
func TestAlertRules(t *testing.T) {
	root := testenv.RepoRoot()
	ruleFile, rules, err := testenv.AlertRules()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), ruleFile, 0o644); err != nil {
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

	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	alerts := 0
	for _, r := range rules {
		if r.Alert == "" {
			continue
		}
		alerts++
		if !strings.Contains(string(readme), "\n| `"+r.Alert+"` | ") {
			t.Errorf("%s is not in the README's table of alerts", r.Alert)
		}
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
	if listed := len(alertRow.FindAll(readme, -1)); listed != alerts {
		t.Errorf("the README lists %d alerts, the rules have %d", listed, alerts)
	}
}

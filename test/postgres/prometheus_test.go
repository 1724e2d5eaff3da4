package postgres

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"example.com/myoperator/internal/testenv"
)

// prometheusEvaluates runs Prometheus on the two servers, with the
// alerting rules loaded, and evaluates every expression of the rules and
// the dashboard through its query API.
func prometheusEvaluates(t *testing.T, c *cluster, pods ...*pod) {
	bin, err := testenv.PrometheusBin()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ruleFile, alertRules, err := testenv.AlertRules()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), ruleFile, 0o644); err != nil {
		t.Fatal(err)
	}
	rules := make([]string, 0, len(alertRules))
	for _, r := range alertRules {
		rules = append(rules, r.Expr)
	}
	var targets strings.Builder
	for _, p := range pods {
		fmt.Fprintf(&targets, "      - targets: [%q]\n        labels: {namespace: %q, mydatabase: %q, pod: %q}\n", p.metrics, c.db.Namespace, c.db.Name, p.name)
	}
	config := "global: {scrape_interval: 1s, evaluation_interval: 1s}\nrule_files: [rules.yaml]\nscrape_configs:\n" +
		"  - job_name: mydatabase\n    static_configs:\n" + targets.String()
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	address := fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1)[0])
	cmd := exec.Command(filepath.Join(bin, "prometheus"), "--config.file=prometheus.yml", "--storage.tsdb.path=data",
		"--web.listen-address="+address)
	cmd.Dir = dir
	logFile, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			out, _ := os.ReadFile(logFile.Name())
			t.Logf("prometheus log:\n%s", out)
		}
	})
	query := func(expr string) (int, error) {
		resp, err := http.Get("http://" + address + "/api/v1/query?query=" + url.QueryEscape(expr))
		if err != nil {
			return 0, err
		}
		defer func() { _ = resp.Body.Close() }()
		var r struct {
			Status string `json:"status"`
			Error  string `json:"error"`
			Data   struct {
				Result []json.RawMessage `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return 0, err
		}
		if r.Status != "success" {
			return 0, fmt.Errorf("%s", r.Error)
		}
		return len(r.Data.Result), nil
	}
	eventually(t, time.Minute, "Prometheus scraping both servers", func() (bool, string) {
		n, err := query(`mydatabase_pg_up == 1`)
		return err == nil && n == len(pods), fmt.Sprint(n, err)
	})
	time.Sleep(3 * time.Second) // a few samples, for rate()
	// A healthy pair of servers raises no alert: every rule's expression
	// is empty.
	for _, e := range rules {
		n, err := query(e)
		switch {
		case err != nil:
			t.Errorf("rule %s: %v", e, err)
		case n != 0:
			t.Errorf("rule %s: %d series on healthy servers, want none", e, n)
		}
	}
	// Every panel shows data, but those of metrics this test has no
	// source of: the kubelet's, the operator's, and an archive's age.
	exprs := dashboardExpressions(t, c)
	for _, e := range exprs {
		n, err := query(e)
		switch {
		case err != nil:
			t.Errorf("dashboard %s: %v", e, err)
		case n == 0 && !regexp.MustCompile(`kubelet_|mydatabase_primary_changes|mydatabase_reconcile_errors|last_archive_age`).MatchString(e):
			t.Errorf("dashboard %s: no series", e)
		}
	}
	t.Logf("%d rule and %d dashboard expressions evaluated", len(rules), len(exprs))
}

// dashboardExpressions are the dashboard's queries, its variables
// replaced as Grafana does.
func dashboardExpressions(t *testing.T, c *cluster) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs/monitoring/dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	vars := strings.NewReplacer("$__rate_interval", "1m", "$namespace", c.db.Namespace, "$mydatabase", c.db.Name)
	var out []string
	for _, p := range d.Panels {
		for _, target := range p.Targets {
			out = append(out, vars.Replace(target.Expr))
		}
	}
	for _, v := range d.Templating.List {
		// label_values(EXPR, label) is Grafana's; Prometheus evaluates EXPR.
		if inner, ok := strings.CutPrefix(v.Definition, "label_values("); ok {
			out = append(out, vars.Replace(inner[:strings.LastIndex(inner, ",")]))
		}
	}
	if len(out) < 20 {
		t.Fatalf("the dashboard has %d expressions, want its every panel's", len(out))
	}
	return out
}

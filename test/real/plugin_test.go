//go:build real

package real

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/testenv"
)

var plugin testenv.Plugin

// kubectlMydb runs `kubectl mydb ARGS` with cmd/kubectl-mydb, built from
// this checkout, on PATH.
func kubectlMydb(t *testing.T, args ...string) (string, error) {
	t.Helper()
	if plugin.Dir == "" {
		plugin.Repo, plugin.Dir = env.repo, filepath.Join(env.work, "plugin")
	}
	return plugin.Run(t, args...)
}

// psqlBinary is the psql the plugin runs: on PATH, else the one of
// hack/postgres.sh's PostgreSQL.
func psqlBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("psql"); err == nil {
		return p
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/psql")
	if len(found) == 0 {
		t.Fatal("no psql on this machine: hack/postgres.sh installs it")
	}
	return found[len(found)-1]
}

// checkPlugin runs kubectl mydb status, and psql on the primary and on a
// replica, against the MyDatabase dbName of three servers that holds rows
// rows in items.
func checkPlugin(t *testing.T, ns, password string, rows int) {
	out, err := kubectlMydb(t, "status", dbName, "-n", ns)
	if err != nil {
		t.Fatal(err)
	}
	squeezed := squeeze(out)
	primary := getDB(t, ns).Status.CurrentPrimary
	wants := make([]string, 0, 5)
	wants = append(wants, "\nPhase Ready\n", "\nPrimary "+primary+"\n")
	for i := range 3 {
		name, role := fmt.Sprintf("%s-%d", dbName, i), "replica"
		if name == primary {
			role = "primary"
		}
		wants = append(wants, "\n"+name+" "+role+" true ")
	}
	for _, want := range wants {
		if !strings.Contains(squeezed, want) {
			t.Errorf("status output lacks %q", strings.TrimSpace(want))
		}
	}
	psql := psqlBinary(t)
	for _, tc := range []struct {
		flags    []string
		recovery string
	}{{nil, "f"}, {[]string{"--replica"}, "t"}} {
		args := append([]string{"psql", dbName, "-n", ns, "--psql", psql}, tc.flags...)
		args = append(args, "--", "--no-psqlrc", "--tuples-only", "--no-align",
			"--command", "SELECT pg_is_in_recovery(), count(*) FROM items")
		want := fmt.Sprintf("%s|%d", tc.recovery, rows)
		testenv.Eventually(t, 30*time.Second, "kubectl mydb psql "+strings.Join(tc.flags, " ")+" answers "+want, func() error {
			out, err := kubectlMydb(t, args...)
			if err != nil {
				return err
			}
			if strings.Contains(out, password) {
				t.Fatal("kubectl mydb psql printed the password")
			}
			if !slices.Contains(strings.Split(strings.TrimSpace(out), "\n"), want) {
				return fmt.Errorf("output %q lacks the line %q", out, want)
			}
			return nil
		})
	}
}

// checkPluginMoves runs kubectl mydb switchover to the replica target,
// then restart, each with --wait, and checks what the operator did.
func checkPluginMoves(t *testing.T, ns, target string) {
	from := getDB(t, ns).Status.CurrentPrimary
	if from == target || from == "" {
		t.Fatalf("the primary is %q: pick another target than %s", from, target)
	}
	out, err := kubectlMydb(t, "switchover", dbName, target, "-n", ns, "--wait=2m")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("Switchover Succeeded: %s -> %s.", from, target); !strings.Contains(out, want) {
		t.Errorf("switchover output lacks %q", want)
	}
	if db := getDB(t, ns); db.Status.CurrentPrimary != target {
		t.Fatalf("currentPrimary %q after the switchover, want %s", db.Status.CurrentPrimary, target)
	}

	before := podUIDs(t, ns)
	out, err = kubectlMydb(t, "restart", dbName, "-n", ns, "--wait=5m")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "Restarted: every pod runs the new template") {
		t.Errorf("restart output lacks its success line")
	}
	for name, uid := range podUIDs(t, ns) {
		if before[name] == uid {
			t.Errorf("pod %s was not restarted", name)
		}
	}
	// Replicas first, then the primary's switchover: never a primary
	// restarted in place.
	db := getDB(t, ns)
	sw := db.Status.Switchover
	if sw == nil || sw.Reason != databasev1alpha1.SwitchoverRollingUpdate || sw.Phase != databasev1alpha1.SwitchoverSucceeded ||
		sw.From != target || db.Status.CurrentPrimary == target {
		t.Errorf("after the restart: primary %s, switchover %+v; want a rolling-update switchover away from %s",
			db.Status.CurrentPrimary, sw, target)
	}
}

func squeeze(out string) string {
	var sb strings.Builder
	for line := range strings.SplitSeq(out, "\n") {
		sb.WriteString("\n" + strings.Join(strings.Fields(line), " "))
	}
	return sb.String() + "\n"
}

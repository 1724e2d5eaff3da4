package postgres

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
)

// roleAttributes checks a role's attributes.
func roleAttributes(t *testing.T, c *cluster, p *pod, role, want string) {
	t.Helper()
	got := c.query(t, p.socket("postgres", "postgres"), "", fmt.Sprintf(`SELECT format('super=%%s createrole=%%s createdb=%%s replication=%%s bypassrls=%%s login=%%s',
		rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls, rolcanlogin) FROM pg_roles WHERE rolname = '%s'`, role))
	got = strings.NewReplacer("true", "t", "false", "f").Replace(got)
	if got != want {
		t.Errorf("role %s: %q, want %q", role, got, want)
	}
}

// hbaRules parses the generated pg_hba.conf into the form the query on
// pg_hba_file_rules prints: type, databases, users, address, method.
func hbaRules(t *testing.T, conf string) []string {
	t.Helper()
	var rules []string
	for line := range strings.Lines(conf) {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case f[0] == "local" && len(f) == 4:
			rules = append(rules, strings.Join(f, " "))
		case f[0] != "local" && len(f) == 5:
			rules = append(rules, strings.Join(f, " "))
		default:
			t.Fatalf("the harness cannot read pg_hba.conf line %q", line)
		}
	}
	return rules
}

// checkParameters checks that the server runs on the postgresql.conf
// rendered from db: every line of it read without error, every spec
// parameter in effect with its value, the settings the operator relies on
// in place.
func checkParameters(t *testing.T, c *cluster, p *pod, db *databasev1alpha1.MyDatabase) {
	t.Helper()
	su := p.socket("postgres", "postgres")
	confFile := filepath.Join(p.hostPath(t, specs.ConfigDir), contract.PostgresConfFile)
	if got := c.query(t, su, "", "SHOW config_file"); got != confFile {
		t.Errorf("%s: config_file = %q, want %q", p.name, got, confFile)
	}
	lines := 0
	for line := range strings.Lines(specs.PostgresConf(db)) {
		if s := strings.TrimSpace(line); s != "" && !strings.HasPrefix(s, "#") {
			lines++
		}
	}
	if got, want := c.query(t, su, "", fmt.Sprintf(
		"SELECT count(*) FROM pg_file_settings WHERE sourcefile = '%s' AND applied AND error IS NULL", confFile)),
		strconv.Itoa(lines); got != want {
		t.Errorf("%s: %s settings of postgresql.conf applied, want all %s:\n%s", p.name, got, want,
			c.query(t, su, "", "SELECT concat_ws(' ', sourcefile, sourceline, name, setting, applied, error) FROM pg_file_settings"))
	}
	want := map[string]string{
		// What the operator relies on.
		"wal_level":           "replica",
		"hot_standby":         "on",
		"listen_addresses":    "*",
		"password_encryption": "scram-sha-256",
		"port":                strconv.Itoa(p.port),
	}
	maps.Copy(want, db.Spec.Parameters)
	if _, set := db.Spec.Parameters["log_min_duration_statement"]; !set {
		want["log_min_duration_statement"] = "-1" // removed from the spec: back to the default
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		got := c.query(t, su, "", fmt.Sprintf("SELECT current_setting('%s')", name))
		if got != want[name] {
			t.Errorf("%s: SHOW %s = %q, want %q", p.name, name, got, want[name])
		}
		if v, ok := db.Spec.Parameters[name]; ok {
			// Read from the file exactly as written in the spec.
			if got := c.query(t, su, "", fmt.Sprintf(
				"SELECT setting FROM pg_file_settings WHERE name = '%s' AND sourcefile = '%s'", name, confFile)); got != v {
				t.Errorf("%s: postgresql.conf gives %s = %q, want %q", p.name, name, got, v)
			}
		}
	}
}

// checkProbes runs the readiness and liveness probes: both succeed on a
// healthy server, both fail on a stopped one.
func checkProbes(t *testing.T, p *pod, healthy bool) {
	t.Helper()
	for _, probe := range []struct {
		name string
		run  func(*testing.T) (int, string)
	}{{"readiness", p.ready}, {"liveness", p.alive}} {
		code, out := probe.run(t)
		if healthy && code != 0 {
			t.Errorf("%s: %s probe failed on a healthy server: exit %d %s", p.name, probe.name, code, out)
		}
		if !healthy && code == 0 {
			t.Errorf("%s: %s probe succeeded on a stopped server", p.name, probe.name)
		}
	}
}

// checkContainerIsPostmaster: the container's process (the instance
// manager) is the postmaster's parent, so that it gets the kubelet's
// signals and turns them into PostgreSQL's.
func checkContainerIsPostmaster(t *testing.T, p *pod) {
	t.Helper()
	pid := postmasterPID(p.pgdata())
	if ppid := parentPID(t, pid); ppid != p.cmd.Process.Pid {
		t.Errorf("%s: the postmaster (PID %d) is a child of PID %d, not of the container process %d", p.name, pid, ppid, p.cmd.Process.Pid)
	}
}

// parentPID reads a process's parent from /proc.
func parentPID(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// pid (comm) state ppid ...: comm may hold spaces, so cut at the last ')'.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatal(err)
	}
	return ppid
}

// checkNoSecrets: the passwords are on neither the server's command line nor
// in its environment (where every backend and child process inherits them,
// and libpq in dblink would use them).
func checkNoSecrets(t *testing.T, p *pod, secrets ...string) {
	t.Helper()
	for _, f := range []string{"cmdline", "environ"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", postmasterPID(p.pgdata()), f))
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range secrets {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s: password %d is in the server's %s", p.name, i, f)
			}
		}
	}
}

func waitStreaming(t *testing.T, c *cluster, primary, replica *pod) {
	t.Helper()
	eventually(t, 30*time.Second, replica.name+" streaming from "+primary.name, func() (bool, string) {
		out, err := c.psql(primary.socket("postgres", "postgres"), "",
			"SELECT application_name || ' ' || state || ' ' || sync_state FROM pg_stat_replication ORDER BY 1")
		// The fence is the one synchronous standby (internal/instance,
		// fence.go); the replica streams asynchronously.
		return err == nil && out == "mydatabase_fence streaming sync\n"+replica.name+" streaming async", out
	})
}

// memberSlot is the replication slot the instance of p streams through
// (internal/instance, slots.go).
func memberSlot(p *pod) string { return "mydb_" + strings.ReplaceAll(p.name, "-", "_") }

// waitSlotStreaming waits until replica streams from primary through its
// slot, which holds WAL for it (not lost).
func waitSlotStreaming(t *testing.T, c *cluster, primary, replica *pod) {
	t.Helper()
	eventually(t, 30*time.Second, replica.name+" streaming through its slot", func() (bool, string) {
		out, err := c.psql(primary.socket("postgres", "postgres"), "", fmt.Sprintf(
			"SELECT active_pid IS NOT NULL AND wal_status <> 'lost' FROM pg_replication_slots WHERE slot_name = '%s'", memberSlot(replica)))
		return err == nil && out == "t", out
	})
}

func waitRow(t *testing.T, c *cluster, conninfo, password string, id int, note string) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("row %d in %q", id, conninfo), func() (bool, string) {
		out, err := c.psql(conninfo, password, fmt.Sprintf("SELECT note FROM items WHERE id = %d", id))
		return err == nil && out == note, out
	})
}

func eventually(t *testing.T, timeout time.Duration, what string, ok func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		done, last := ok()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s; last: %s", timeout, what, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func logContains(t *testing.T, log string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(log, w) {
			t.Errorf("the container log lacks %q:\n%s", w, log)
		}
	}
}

func logLacks(t *testing.T, log string, unwanted ...string) {
	t.Helper()
	for _, u := range unwanted {
		if strings.Contains(log, u) {
			t.Errorf("the container log has %q:\n%s", u, log)
		}
	}
}

package postgres

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"filippo.io/age"

	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
)

// TestRestoreWithoutTheOperator runs the procedure of docs/backup.md,
// "Restore without the operator", as written: its shell blocks after the
// settings, in one bash, as the postgres OS user, with curl, zstd, tar and
// (an encrypted store) age against the real S3 server, from a plain store
// and from an encrypted one. The source archives through the instance
// manager and takes two base backups around the target time:
//
//	rows "before"   committed before the first backup
//	rows "after"    committed after it, before the target time
//	rows "late"     after the target time; then the second backup, which
//	                finished after the target and must not be chosen
//
// The restored server must hold "before" and "after" and nothing "late",
// and have promoted itself. Then, from the plain store, the same
// procedure again with one byte flipped in the store's WAL file of the
// "after" rows: its restore_command must stop recovery (exit 126), not
// end it there, so the server never promotes without them.
func TestRestoreWithoutTheOperator(t *testing.T) {
	t.Parallel() // doc.go: which tests run side by side
	script := documentedRestore(t)
	servers := findServers(t)
	srv := servers[len(servers)-1]
	t.Run("plain", func(t *testing.T) { restoreByHand(t, srv, script, nil) })
	t.Run("encrypted", func(t *testing.T) { restoreByHand(t, srv, script, ageIdentity(t)) })
}

// restoreByHand is TestRestoreWithoutTheOperator from a store encrypted
// to key, or a plain one when key is nil.
func restoreByHand(t *testing.T, srv server, script string, key *age.X25519Identity) {
	store := startStore(t, t.TempDir())
	c, primary, insert := archivingSource(t, srv, store, key)
	db := c.db
	su := primary.socket("postgres", "postgres")
	insert("before", 100)
	first := takeBackup(t, c, primary)
	insert("after", 50)
	afterWAL := archiveNow(t, c, primary)
	time.Sleep(time.Second)
	target := c.query(t, su, "", "SELECT clock_timestamp()")
	time.Sleep(time.Second)
	insert("late", 30)
	time.Sleep(time.Second) // backup IDs are by the second
	takeBackup(t, c, primary)
	archiveNow(t, c, primary)

	// The settings, as the environment; for an encrypted store, the
	// identities in a file of the postgres OS user's, and age on PATH.
	settings := []string{"S3_ENDPOINT=" + store.Endpoint, "BUCKET=" + store.Bucket, "STORE_PATH=" + specs.BackupPath(db),
		"REGION=us-east-1", "ACCESS_KEY_ID=" + store.AccessKeyID, "SECRET_ACCESS_KEY=" + store.SecretAccessKey,
		"PGBIN=" + srv.bin, "TARGET_TIME=" + target, "IDENTITIES="}
	path := c.baseEnv()[0]
	if key != nil {
		identities := filepath.Join(c.base, "identities")
		writeOwned(t, c, identities, keySecret("", "", key).Data[specs.EncryptionIdentitiesKey])
		bin := installAge(t, c.base)
		settings = append(settings, "IDENTITIES="+identities)
		path = "PATH=" + bin + ":" + strings.TrimPrefix(path, "PATH=")
	}
	// Each run works in a directory of the postgres OS user.
	byHand := func(name string) (work string, port int, out, log string, err error) {
		work = filepath.Join(c.base, name)
		if err := os.Mkdir(work, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(work, c.user.uid, c.user.gid); err != nil {
			t.Fatal(err)
		}
		pgdata := filepath.Join(work, "pgdata")
		port = freePorts(t, 1)[0]
		env := slices.Concat([]string{path}, c.baseEnv()[1:], settings,
			[]string{"PGDATA=" + pgdata, "PGHOST=" + work, fmt.Sprintf("PGPORT=%d", port)})
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// pg_ctl stops the server of this data directory by its pid file.
			if out, err := c.run(ctx, env, filepath.Join(srv.bin, "pg_ctl"), "stop", "-m", "immediate", "-D", pgdata); err != nil &&
				!strings.Contains(out, "does not exist") {
				t.Errorf("pg_ctl stop: %v\n%s", err, out)
			}
		})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err = c.run(ctx, env, "bash", "-euo", "pipefail", "-c", script)
		b, _ := os.ReadFile(filepath.Join(work, "restore.log"))
		return work, port, out, string(b), err
	}
	work, port, out, log, err := byHand("by-hand")
	if err != nil {
		t.Fatalf("the documented procedure failed: %v\n%s\nthe server's log:\n%s", err, out, testenv.LastLines(log, 40))
	}
	t.Logf("the documented procedure printed:\n%s", out)
	if !strings.Contains(out, "base backup: "+first.ID+"\n") {
		t.Errorf("it chose another base backup than %s, the latest that finished before the target", first.ID)
	}
	if !strings.HasSuffix(out, "f\n") {
		t.Errorf("its last line is not f (pg_is_in_recovery): the server has not promoted")
	}
	restored := fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres", work, port)
	for phase, want := range map[string]string{"before": "100", "after": "50", "late": "0"} {
		if got := c.query(t, restored, "", fmt.Sprintf("SELECT count(*) FROM stamped WHERE phase = '%s'", phase)); got != want {
			t.Errorf("rows %q: %s, want %s", phase, got, want)
		}
	}
	// It is a primary of its own: it takes writes.
	c.query(t, restored, "", "INSERT INTO stamped (phase) VALUES ('restored')")

	if key != nil {
		return
	}
	flipByte(t, store, specs.BackupPath(db)+"/wal/"+afterWAL+".zst")
	if _, _, out, log, err := byHand("by-hand-flipped"); err == nil || !strings.Contains(log, `could not restore file "`+afterWAL+`"`) ||
		!strings.Contains(log, "command not executable") {
		t.Errorf("with %s damaged in the store, the procedure ended %v (want an error, recovery stopped by restore_command's exit 126, which PostgreSQL calls \"command not executable\")\n%s\nthe server's log:\n%s",
			afterWAL, err, out, testenv.LastLines(log, 20))
	}
}

// documentedRestore is the shell of docs/backup.md's "Restore without the
// operator": every sh block of that section after the first, the
// settings, which the test gives as environment variables instead.
func documentedRestore(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "backup.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Restore without the operator\n")
	if !ok {
		t.Fatal(`docs/backup.md has no section "Restore without the operator"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var blocks []string
	for rest := section; ; {
		var block string
		if _, rest, ok = strings.Cut(rest, "\n```sh\n"); !ok {
			break
		}
		if block, rest, ok = strings.Cut(rest, "\n```\n"); !ok {
			t.Fatal("docs/backup.md: an sh block without its end")
		}
		blocks = append(blocks, block)
	}
	if len(blocks) < 2 || !strings.HasPrefix(blocks[0], "# 0. Your settings") {
		t.Fatalf("docs/backup.md: want the settings block and then the steps, found %d blocks", len(blocks))
	}
	return strings.Join(blocks[1:], "\n")
}

// installAge builds age, the command line tool, of the version go.mod
// requires into dir/bin, for the postgres OS user, and returns that
// directory.
func installAge(t *testing.T, dir string) string {
	t.Helper()
	version, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "filippo.io/age").Output()
	if err != nil {
		t.Fatalf("go list -m filippo.io/age: %v", err)
	}
	bin := filepath.Join(dir, "bin")
	cmd := exec.Command("go", "install", "filippo.io/age/cmd/age@"+strings.TrimSpace(string(version)))
	cmd.Env = append(os.Environ(), "GOBIN="+bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install filippo.io/age/cmd/age: %v\n%s", err, out)
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

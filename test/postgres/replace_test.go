package postgres

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
)

// nextInstanceManager is another version of the instance manager: the one
// under test with the test's name appended, which the loader ignores, so
// its digest differs from the running one's and from that of another
// test's.
func (c *cluster) nextInstanceManager(t *testing.T) (path, digest string) {
	t.Helper()
	b, err := os.ReadFile(c.instanceBin)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(c.base, "instance-next-*")
	if err != nil {
		t.Fatal(err)
	}
	path = f.Name()
	_ = f.Close()
	if err := os.WriteFile(path, append(b, "\n"+t.Name()+"\n"...), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o755); err != nil { // CreateTemp made it 0600
		t.Fatal(err)
	}
	if digest, err = contract.Digest(path); err != nil {
		t.Fatal(err)
	}
	return path, digest
}

// replaceManager does what the operator does to replace an instance
// manager in place: it runs contract.ReplaceCommand in the container with
// the binary on its standard input. The server must run on, the same
// process, and the instance manager report the new version.
func (p *pod) replaceManager(t *testing.T, bin, digest string) {
	t.Helper()
	c := p.c
	server := postmasterPID(p.pgdata())
	off := p.logSize()
	in, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = in.Close() }()
	argv := p.argv(t, corev1ac.Container().WithCommand(contract.ReplaceCommand(specs.InstanceManagerPath, digest)...))
	full := append(slices.Clone(c.user.wrap), argv...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, full[0], full[1:]...)
	cmd.Env, cmd.Dir, cmd.Stdin = p.env, c.base, io.Reader(in)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("replacing %s's instance manager: %v\n%s\n%s", p.name, err, out, p.log(off))
	}
	if !strings.Contains(p.log(off), fmt.Sprintf("adopted postgres (pid %d)", server)) {
		t.Errorf("%s's new instance manager did not adopt postgres (pid %d):\n%s", p.name, server, p.log(off))
	}
	if now := postmasterPID(p.pgdata()); now != server || syscall.Kill(server, 0) != nil {
		t.Errorf("%s's postgres was pid %d, is now %d: restarted", p.name, server, now)
	}
	eventually(t, 30*time.Second, p.name+" reporting instance manager "+digest, func() (bool, string) {
		pod := &corev1.Pod{}
		if err := c.api.Client.Get(context.Background(), client.ObjectKey{Namespace: c.db.Namespace, Name: p.name}, pod); err != nil {
			return false, err.Error()
		}
		r, err := contract.Parse(pod.Annotations[contract.AnnotationInstance])
		return err == nil && r.Manager == digest, fmt.Sprint(r.Manager, err)
	})
}

// fenceHeldThrough runs replace, which replaces the primary p's instance
// manager, while one psql commits a row every 5 ms (\watch) that records
// when it began and which walsenders served fence standbys that streamed
// then. The fence bridge must hold the fence across the exec: a commit
// must never begin with none streaming, and three fence standbys must be
// seen in turn: the old process's witness, the bridge (alone from the
// exec until the new process's fence streams, some 100 ms), the new
// process's witness. Without the bridge there are two, and the test
// fails. The longest time between two commits is the write gap.
func (p *pod) fenceHeldThrough(t *testing.T, replace func()) {
	t.Helper()
	c := p.c
	superuser := p.socket("postgres", "postgres")
	c.query(t, superuser, "", "CREATE TABLE fence_watch (began timestamptz, senders int[])")
	script := filepath.Join(c.base, "fence_watch.sql")
	if err := os.WriteFile(script, []byte(`INSERT INTO fence_watch SELECT clock_timestamp(), coalesce(array_agg(pid), '{}') FROM pg_stat_replication
		WHERE application_name = 'mydatabase_fence' AND state = 'streaming' \watch 0.005`), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan string, 1)
	go func() {
		out, _ := c.run(ctx, c.baseEnv(), filepath.Join(c.srv.bin, "psql"), "--no-psqlrc", "--quiet", "--dbname="+superuser, "--file="+script)
		watched <- out
	}()
	time.Sleep(time.Second) // committing before the replacement starts
	off := p.logSize()
	replace()
	time.Sleep(200 * time.Millisecond)
	cancel()
	out := <-watched
	got := c.query(t, superuser, "", `SELECT count(*), count(*) FILTER (WHERE cardinality(senders) = 0),
		(SELECT count(DISTINCT s) FROM fence_watch, unnest(senders) s),
		coalesce(round(extract(epoch FROM max(gap)) * 1000), 0)
		FROM (SELECT senders, began - lag(began) OVER (ORDER BY began) AS gap FROM fence_watch) w`)
	var commits, none, standbys, gap int
	if _, err := fmt.Sscanf(got, "%d|%d|%d|%d", &commits, &none, &standbys, &gap); err != nil {
		t.Fatalf("reading fence_watch (%q): %v; psql said %s", got, err, out)
	}
	t.Logf("while %s's instance manager was replaced: %d commits, %d begun with no fence standby streaming, %d fence standbys in turn; longest time between two commits %d ms",
		p.name, commits, none, standbys, gap)
	if commits < 100 || none > 0 || standbys < 3 {
		t.Errorf("the fence bridge did not hold %s's fence across the exec (psql said %s):\n%s", p.name, out, p.log(off))
	}
	eventually(t, 10*time.Second, p.name+" stopping the fence bridge", func() (bool, string) {
		return strings.Contains(p.log(off), "stopped: this process's fence streams"), ""
	})
}

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
// under test with bytes appended, which the loader ignores, so its digest
// differs.
func (c *cluster) nextInstanceManager(t *testing.T) (path, digest string) {
	t.Helper()
	path = filepath.Join(c.base, "instance-next")
	b, err := os.ReadFile(c.instanceBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, "\nnext version\n"...), 0o755); err != nil {
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

package instance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"example.com/myoperator/internal/contract"
)

// Replace reads the whole binary before it decides anything: the
// operator's exec stream ends only once its standard input is sent.
func TestReplaceReadsTheWholeBinary(t *testing.T) {
	binary := bytes.Repeat([]byte("instance manager "), 1<<16)
	sum := sha256.Sum256(binary)
	digest := hex.EncodeToString(sum[:])
	for _, c := range []struct {
		name    string
		running string // the digest the running instance manager announced
		digest  string // the digest the operator names
		err     string
	}{
		{"replaced already", digest, digest, ""},
		{"another binary than named", "old", strings.Repeat("0", 64), "not replacing"},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, pidFile), []byte("1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, digestFile), []byte(c.running+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		in := bytes.NewReader(binary)
		err := Replace(context.Background(), dir, c.digest, in)
		if (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.err)
		}
		if in.Len() != 0 {
			t.Errorf("%s: %d bytes of the binary left unread", c.name, in.Len())
		}
		if _, err := os.Stat(filepath.Join(dir, nextFile)); err == nil {
			t.Errorf("%s: a binary was staged", c.name)
		}
	}
}

// TestAdoptKeepsTheFence: the new process adopts the primary's server
// with the fence open until the old renewal's deadline and at the quorum
// the Lease asks, before its first turn: its fence streams at once, and a
// fence at no quorum would confirm commits that no replica has flushed.
func TestAdoptKeepsTheFence(t *testing.T) {
	dir := t.TempDir()
	postmaster := exec.Command("sleep", "60")
	if err := postmaster.Start(); err != nil {
		t.Fatal(err)
	}
	t10 := newTiming(10 * time.Second)
	c, log, fence, procs := Config{SocketDir: dir, PGData: dir, PodName: "db-0", Port: "1"}, func(string, ...any) {}, newFence(time.Now), startReaper()
	m := &manager{ha: &ha{c: c, log: log, t: t10, fence: fence, failsafe: newFailsafe("db-0", time.Now), leases: newLeases(nil, "db-0", t10, time.Now)},
		pg: &pgServer{c: c, log: log, t: t10, fence: fence, procs: procs}, procs: procs}
	defer func() {
		m.pg.closeFence()
		_ = postmaster.Process.Kill()
		m.procs.stop()
	}()
	if err := os.WriteFile(filepath.Join(dir, "postmaster.pid"), []byte(strconv.Itoa(postmaster.Process.Pid)+"\n"+dir+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	quorum := contract.Quorum{Instances: 3, Synchronous: 1, Required: true}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{contract.AnnotationQuorum: quorum.String()}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("db-0")}}
	h, err := json.Marshal(handover{Server: postmaster.Process.Pid, Role: asPrimary, Lease: lease, RenewedAgo: time.Second, Mono: monotonicNow()})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, handoverFile), h, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := m.adopt(); err != nil {
		t.Fatal(err)
	}
	if m.pg.role != asPrimary || m.pg.server == nil {
		t.Fatalf("not adopted: role %v", m.pg.role)
	}
	if got := m.fence.quorumNow(); got != quorum {
		t.Errorf("the adopted fence confirms at quorum %+v, want the Lease's %+v", got, quorum)
	}
	// Renewed a second before the exec: open for the rest of the deadline.
	if left := m.fence.left(); left <= m.t.deadline-2*time.Second || left > m.t.deadline-time.Second {
		t.Errorf("the adopted fence is open for %s more, want a little under %s", left, m.t.deadline-time.Second)
	}
}

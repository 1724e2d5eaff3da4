package reliability

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
)

// Leader election timings of this test: short, so that it runs fast, in the
// same proportions as the defaults (15s, 10s, 2s).
const (
	leaseDuration = 4 * time.Second
	renewDeadline = 3 * time.Second
	retryPeriod   = 500 * time.Millisecond

	// takeoverBound is the documented worst case from the leader's last
	// renewal to a follower's acquisition (README, "Leader election"): the
	// follower may see that renewal one retry period late, counts the lease
	// duration from then, and looks again every retry period; client-go
	// stretches each wait by up to JitterFactor (1.2).
	takeoverBound = leaseDuration + time.Duration(2*(1+leaderelection.JitterFactor)*float64(retryPeriod))

	// slack absorbs a loaded 2-core machine: process scheduling, API
	// latency, this test's polling.
	slack = 10 * time.Second
)

// Scenario 9: two operator processes elect a leader through a Lease; the
// leader is paused (SIGSTOP) past its lease. The other must take over within
// takeoverBound and converge what changed meanwhile. Changes queued for the
// paused leader's watches (a spec edit, a deleted child) tempt it to write
// when it resumes: the API server's audit log, which names each process by
// its own user, must show no write of the old leader received after the
// new leader's acquireTime, and the old leader must exit.
func TestLeaderElectionFencesAPausedLeader(t *testing.T) {
	cp := startAuditedControlPlane(t)
	bin := buildOperator(t)
	c := cp.client
	leaseNS, ns := cp.namespace(t, "lease-"), cp.namespace(t, "db-")

	ops := make([]*operatorProcess, 0, 2)
	for i := range 2 {
		user := fmt.Sprintf("operator-%d", i)
		ops = append(ops, startOperatorProcess(t, bin, user, cp.kubeconfig(t, user),
			"--leader-elect",
			"--leader-elect-namespace="+leaseNS,
			"--leader-elect-lease-duration="+leaseDuration.String(),
			"--leader-elect-renew-deadline="+renewDeadline.String(),
			"--leader-elect-retry-period="+retryPeriod.String(),
			"--metrics-bind-address=0", "--health-probe-bind-address=0"))
	}

	leaseKey := client.ObjectKey{Namespace: leaseNS, Name: "myoperator.database.example.com"}
	var lease coordinationv1.Lease
	testenv.Eventually(t, 90*time.Second, "a leader", func() error {
		if err := c.Get(context.Background(), leaseKey, &lease); err != nil {
			return err
		}
		if ptr.Deref(lease.Spec.HolderIdentity, "") == "" {
			return errors.New("the Lease names no holder")
		}
		return nil
	})
	old := processHolding(t, ops, ptr.Deref(lease.Spec.HolderIdentity, ""))
	next := ops[0]
	if next == old {
		next = ops[1]
	}
	t.Logf("%s leads", old.user)

	db := &databasev1alpha1.MyDatabase{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg"},
		Spec: databasev1alpha1.MyDatabaseSpec{
			Replicas: ptr.To[int32](1), Parameters: map[string]string{"work_mem": "4MB"},
		},
	}
	if err := c.Create(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(db)
	waitConverged(t, c, key, 1, "4MB")

	// Pause the leader.
	paused := time.Now()
	if err := syscall.Kill(old.pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	old.stopped = true
	if err := c.Get(context.Background(), leaseKey, &lease); err != nil {
		t.Fatal(err)
	}
	lastRenewal := lease.Spec.RenewTime.Time
	edit(t, c, key, func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Replicas = ptr.To[int32](3)
		db.Spec.Parameters["work_mem"] = "8MB"
	})

	testenv.Eventually(t, takeoverBound+slack, "the follower to take over", func() error {
		if err := c.Get(context.Background(), leaseKey, &lease); err != nil {
			return err
		}
		if holder := ptr.Deref(lease.Spec.HolderIdentity, ""); holder != next.identity(t) {
			return fmt.Errorf("the Lease names %q", holder)
		}
		return nil
	})
	acquired := lease.Spec.AcquireTime.Time
	t.Logf("takeover: %s after the pause, %s after the last renewal (documented bound %s)",
		acquired.Sub(paused).Round(10*time.Millisecond), acquired.Sub(lastRenewal).Round(10*time.Millisecond), takeoverBound)
	if took := acquired.Sub(lastRenewal); took > takeoverBound+slack {
		t.Errorf("takeover took %s after the last renewal; documented bound %s", took, takeoverBound)
	}
	waitConverged(t, c, key, 3, "8MB")

	// Queue work for the paused leader's watches, then resume it.
	edit(t, c, key, func(db *databasev1alpha1.MyDatabase) { db.Spec.Parameters["work_mem"] = "16MB" })
	configMap := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: specs.ConfigMapName(db)}}
	if err := c.Delete(context.Background(), configMap); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	if err := syscall.Kill(old.pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	old.stopped = false

	// Its elector gives up at most a renew deadline after it resumes.
	testenv.Eventually(t, renewDeadline+slack, "the old leader to exit", func() error {
		if !old.exited() {
			return errors.New("still running")
		}
		return nil
	})
	t.Logf("the old leader exited %s after it resumed: %v", time.Since(resumed).Round(10*time.Millisecond), old.err)
	if old.err == nil || !strings.Contains(old.logText(t), "leader election lost") {
		t.Errorf("the old leader should exit non-zero, having logged \"leader election lost\"; exit: %v\n%s",
			old.err, tail(old.logText(t), 30))
	}
	waitConverged(t, c, key, 3, "16MB")
	if next.exited() {
		t.Fatalf("the new leader exited: %v\n%s", next.err, tail(next.logText(t), 30))
	}

	// Every mutating request, by user. The follower may only have tried to
	// take the Lease before it led (both processes race to create it at
	// start); its acquiring Update is received after the acquireTime it
	// stamps before sending.
	var before, after []string
	for _, e := range cp.auditedWrites(t) {
		switch {
		case e.user == old.user && e.received.After(acquired):
			after = append(after, e.String())
		case e.user == old.user:
			before = append(before, e.String())
		case e.user == next.user && e.received.Before(acquired) && !strings.HasPrefix(e.resource, "leases "):
			t.Errorf("the follower wrote before it led: %s", e)
		}
	}
	refused := strings.Count(old.logText(t), "refusing to write")
	t.Logf("the old leader made %d writes while it led; after it resumed, its guard refused %d", len(before), refused)
	if len(before) == 0 {
		t.Errorf("no write of the old leader in the audit log: the log does not tell the processes apart")
	}
	if refused == 0 {
		t.Errorf("the old leader tried no write after it resumed: the queued changes did not tempt it, so the check below proves nothing")
	}
	if len(after) > 0 {
		t.Errorf("the old leader wrote %d times after it lost the lease:\n%s\nits log:\n%s",
			len(after), strings.Join(after, "\n"), tail(old.logText(t), 40))
	}
}

// waitConverged waits until the MyDatabase's status reflects its generation
// and its StatefulSet and ConfigMap have the given replicas and work_mem.
func waitConverged(t *testing.T, c client.Client, key client.ObjectKey, replicas int32, workMem string) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, fmt.Sprintf("replicas %d and work_mem %s", replicas, workMem), func() error {
		ctx := context.Background()
		db := &databasev1alpha1.MyDatabase{}
		if err := c.Get(ctx, key, db); err != nil {
			return err
		}
		if err := actedOn(db); err != nil {
			return err
		}
		sts := &appsv1.StatefulSet{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: specs.StatefulSetName(db)}, sts); err != nil {
			return err
		}
		if got := ptr.Deref(sts.Spec.Replicas, 0); got != replicas {
			return fmt.Errorf("the StatefulSet has %d replicas", got)
		}
		cm := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: specs.ConfigMapName(db)}, cm); err != nil {
			return err
		}
		if want := "work_mem = '" + workMem + "'"; !strings.Contains(cm.Data[contract.PostgresConfFile], want) {
			return fmt.Errorf("the ConfigMap lacks %s", want)
		}
		return nil
	})
}

func edit(t *testing.T, c client.Client, key client.ObjectKey, mutate func(*databasev1alpha1.MyDatabase)) {
	t.Helper()
	db := &databasev1alpha1.MyDatabase{}
	if err := c.Get(context.Background(), key, db); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(db.DeepCopy())
	mutate(db)
	if err := c.Patch(context.Background(), db, patch); err != nil {
		t.Fatal(err)
	}
}

// auditedControlPlane is an API server of this test's own, which writes an
// audit log of every mutating request.
type auditedControlPlane struct {
	env      *envtest.Environment
	client   client.Client
	auditLog string
}

// The policy logs every request but reads, once, when it completes.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  verbs: ["get", "list", "watch"]
- level: Metadata
`

func startAuditedControlPlane(t *testing.T) *auditedControlPlane {
	t.Helper()
	assets, err := testenv.Assets()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	policy, auditLog := filepath.Join(dir, "audit-policy.yaml"), filepath.Join(dir, "audit.log")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(testenv.RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	env.ControlPlane.GetAPIServer().Configure().
		Append("audit-policy-file", policy).
		Append("audit-log-path", auditLog).
		Append("audit-log-mode", "blocking")
	cfg, err := env.Start()
	t.Cleanup(func() { _ = env.Stop() }) // also after a failed start, which leaves processes running
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return &auditedControlPlane{env: env, client: c, auditLog: auditLog}
}

func (cp *auditedControlPlane) namespace(t *testing.T, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := cp.client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// kubeconfig writes a kubeconfig of a new cluster-admin user.
func (cp *auditedControlPlane) kubeconfig(t *testing.T, user string) string {
	t.Helper()
	u, err := cp.env.AddUser(envtest.User{Name: user, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), user+".kubeconfig")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

type auditedWrite struct {
	user, verb, resource string
	code                 int
	received             time.Time
}

func (w auditedWrite) String() string {
	return fmt.Sprintf("%s %s %s %s -> %d", w.received.Format("15:04:05.000000"), w.user, w.verb, w.resource, w.code)
}

var mutatingVerbs = map[string]bool{"create": true, "update": true, "patch": true, "delete": true, "deletecollection": true}

// auditedWrites reads every mutating request from the audit log; nothing is
// excluded, events and the Lease included.
func (cp *auditedControlPlane) auditedWrites(t *testing.T) []auditedWrite {
	t.Helper()
	f, err := os.Open(cp.auditLog)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var out []auditedWrite
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		var e struct {
			Verb string `json:"verb"`
			User struct {
				Username string `json:"username"`
			} `json:"user"`
			ObjectRef *struct {
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
				Namespace   string `json:"namespace"`
				Name        string `json:"name"`
			} `json:"objectRef"`
			ResponseStatus *struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
			RequestReceivedTimestamp metav1.MicroTime `json:"requestReceivedTimestamp"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit log: %v", err)
		}
		if !mutatingVerbs[e.Verb] {
			continue
		}
		w := auditedWrite{user: e.User.Username, verb: e.Verb, received: e.RequestReceivedTimestamp.Time}
		if r := e.ObjectRef; r != nil {
			w.resource = strings.Trim(r.Resource+"/"+r.Subresource, "/") + " " + r.Namespace + "/" + r.Name
		}
		if e.ResponseStatus != nil {
			w.code = e.ResponseStatus.Code
		}
		out = append(out, w)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// buildOperator builds cmd/ once per test.
func buildOperator(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "manager")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd")
	cmd.Dir = testenv.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd: %v\n%s", err, out)
	}
	return bin
}

// operatorProcess is an operator process this test started; it is only
// ever signalled through its PID.
type operatorProcess struct {
	user, log string
	cmd       *exec.Cmd
	done      chan struct{}
	err       error
	stopped   bool // SIGSTOPped
}

func startOperatorProcess(t *testing.T, bin, user, kubeconfig string, args ...string) *operatorProcess {
	t.Helper()
	p := &operatorProcess{user: user, log: filepath.Join(t.TempDir(), user+".log"), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	// Dies with the test binary, should that be killed.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		_ = f.Close()
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		if p.exited() {
			return
		}
		if p.stopped {
			_ = syscall.Kill(p.pid(), syscall.SIGCONT)
		}
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("log of %s:\n%s", p.user, tail(p.logText(t), 40))
		}
	})
	return p
}

func (p *operatorProcess) pid() int { return p.cmd.Process.Pid }

func (p *operatorProcess) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *operatorProcess) logText(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

var identityInLog = regexp.MustCompile(`Leader election.*"identity": ?"([^"]+)"`)

// identity is the holder identity the process logged at start.
func (p *operatorProcess) identity(t *testing.T) string {
	t.Helper()
	m := identityInLog.FindStringSubmatch(p.logText(t))
	if m == nil {
		t.Fatalf("%s logged no leader election identity:\n%s", p.user, tail(p.logText(t), 20))
	}
	return m[1]
}

func processHolding(t *testing.T, ops []*operatorProcess, holder string) *operatorProcess {
	t.Helper()
	for _, p := range ops {
		if p.identity(t) == holder {
			return p
		}
	}
	t.Fatalf("no process has the identity %q", holder)
	return nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

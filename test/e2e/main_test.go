//go:build e2e

// Package e2e runs the operator, built from this checkout, as a local
// process against a whole simulated cluster: KWOK's binary runtime with a
// real etcd, kube-apiserver, kube-controller-manager (garbage collector,
// StatefulSet, EndpointSlice, PV binder and PDB controllers) and
// kube-scheduler, fake nodes on which pods are marked Running and Ready
// (no container runs), and cmd/dev-provisioner for volumes.
//
// TestMain creates the cluster (its own name, its own work directory
// bin/e2e, free ports on 127.0.0.1), builds the operator and the
// provisioner once, checks that the operator refuses to start before the CRD
// is installed, installs the CRD with `make install` and starts the
// operator. It tears everything down at the end, on failure, on Ctrl-C and
// shortly before `go test -timeout` would kill the process; a run that was
// killed anyway is cleaned up by the next one.
//
// Run with `make test-e2e`.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/testenv"
)

const clusterName = "myoperator-e2e"

// env is the cluster every test uses.
var env *harness

type harness struct {
	repo       string // checkout root
	bindir     string // Kubernetes binaries (hack/k8s-binaries.sh)
	work       string // bin/e2e: kwokctl work dir, kubeconfig, logs, volumes
	kubeconfig string

	managerBin     string
	provisionerBin string
	operator       *testenv.Proc
	operatorArgs   []string
	healthAddr     string
	metricsAddr    string
	provisioner    *testenv.Proc

	c    client.Client
	dyn  dynamic.Interface
	disc discovery.DiscoveryInterface

	// noCRD is what the operator did when started before the CRD existed.
	noCRD struct {
		ran     bool
		err     error
		output  string
		elapsed time.Duration
	}

	teardownOnce sync.Once
	started      time.Time

	mu         sync.Mutex
	atTeardown []func()
}

// onTeardown registers f to run at teardown (also after a Ctrl-C or a
// timeout, when the test's own cleanup does not run).
func (h *harness) onTeardown(f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.atTeardown = append(h.atTeardown, f)
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	h := &harness{started: time.Now()}
	defer h.teardown(false)

	// Ctrl-C and SIGTERM: tear the cluster down instead of leaking it.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		logf("received %s: tearing down", s)
		h.teardown(true)
		os.Exit(2)
	}()
	// go test -timeout kills the process without running deferred calls:
	// dump and tear down a little before that.
	if f := flag.Lookup("test.timeout"); f != nil {
		if d, err := time.ParseDuration(f.Value.String()); err == nil && d > time.Minute {
			time.AfterFunc(d-45*time.Second, func() {
				logf("the suite is about to exceed -timeout %s: dumping the cluster and tearing it down", d)
				h.dumpCluster(logf, "")
				h.teardown(true)
				os.Exit(1)
			})
		}
	}

	if err := h.setup(); err != nil {
		logf("SETUP FAILED: %v", err)
		if h.operator != nil {
			logf("operator log:\n%s", testenv.Tail(h.operator.Log, 60))
		}
		h.teardown(true)
		return 1
	}
	env = h
	logf("setup done in %s", time.Since(h.started).Round(time.Second))
	code := m.Run()
	logf("suite finished in %s (exit %d)", time.Since(h.started).Round(time.Second), code)
	if code != 0 {
		h.teardown(true)
	}
	return code
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "e2e %s: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func (h *harness) setup() error {
	var err error
	if h.repo, err = filepath.Abs("../.."); err != nil {
		return err
	}
	if h.bindir = os.Getenv("E2E_K8S_BINARIES"); h.bindir == "" {
		logf("building (once) the Kubernetes binaries with hack/k8s-binaries.sh")
		cmd := exec.Command(filepath.Join(h.repo, "hack/k8s-binaries.sh"))
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("hack/k8s-binaries.sh: %w", err)
		}
		h.bindir = strings.TrimSpace(string(out))
	}
	// Our kubectl (the cluster's version) first, for the tests and for make.
	if err := os.Setenv("PATH", h.bindir+string(os.PathListSeparator)+os.Getenv("PATH")); err != nil {
		return err
	}
	h.work = filepath.Join(h.repo, "bin", "e2e")
	h.kubeconfig = filepath.Join(h.work, "kubeconfig")
	h.managerBin = filepath.Join(h.work, "manager")
	h.provisionerBin = filepath.Join(h.work, "dev-provisioner")
	if err := os.Setenv("KWOK_WORKDIR", filepath.Join(h.work, "kwok")); err != nil {
		return err
	}
	if err := os.Setenv("KUBECONFIG", h.kubeconfig); err != nil {
		return err
	}
	h.cleanStale()
	if err := os.MkdirAll(h.work, 0o755); err != nil {
		return err
	}

	// The builds and the cluster are independent: overlap them.
	built := make(chan error, 1)
	go func() {
		start := time.Now()
		err := testenv.GoBuild(h.repo, h.managerBin, "./cmd/main.go")
		if err == nil {
			err = testenv.GoBuild(h.repo, h.provisionerBin, "./cmd/dev-provisioner")
		}
		logf("built the operator and the provisioner in %s", time.Since(start).Round(time.Second))
		built <- err
	}()
	if err := h.createCluster(); err != nil {
		<-built
		return err
	}
	if err := <-built; err != nil {
		return err
	}
	if err := h.clients(); err != nil {
		return err
	}

	h.provisioner, err = testenv.StartProc("provisioner",
		filepath.Join(h.work, "provisioner.log"), filepath.Join(h.work, "provisioner.pid"),
		h.provisionerBin, "--kubeconfig", h.kubeconfig, "--root", filepath.Join(h.work, "volumes"))
	if err != nil {
		return err
	}

	// Point 7 runs here, before the CRD exists; TestOperatorWithoutCRD
	// reports it.
	h.runWithoutCRD()

	start := time.Now()
	if out, err := testenv.Make(h.repo, "install"); err != nil {
		return fmt.Errorf("make install: %w\n%s", err, out)
	}
	if err := waitEstablished(60 * time.Second); err != nil {
		return err
	}
	logf("installed the CRD with make install in %s", time.Since(start).Round(time.Second))

	ports, err := testenv.FreePorts(2)
	if err != nil {
		return err
	}
	h.healthAddr = fmt.Sprintf("127.0.0.1:%d", ports[0])
	h.metricsAddr = fmt.Sprintf("127.0.0.1:%d", ports[1])
	h.operatorArgs = []string{"--health-probe-bind-address=" + h.healthAddr,
		"--metrics-bind-address=" + h.metricsAddr, "--metrics-secure=false"}
	return h.startOperator()
}

// cleanStale removes what a killed earlier run left: its processes (by the
// PIDs it recorded, if they still run our binaries) and its cluster.
func (h *harness) cleanStale() {
	for _, p := range []struct{ pidfile, bin string }{
		{filepath.Join(h.work, "operator.pid"), h.managerBin},
		{filepath.Join(h.work, "provisioner.pid"), h.provisionerBin},
	} {
		if pid, ok := testenv.RecordedPID(p.pidfile, p.bin); ok {
			logf("stopping pid %d left by an earlier run (%s)", pid, p.bin)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if _, err := os.Stat(filepath.Join(h.work, "kwok", "clusters", clusterName)); err == nil {
		logf("deleting the cluster an earlier run left")
		_ = h.kwokctl("delete", "cluster", "--name", clusterName, "--kubeconfig", h.kubeconfig)
	}
	_ = os.RemoveAll(h.work)
}

// createCluster starts the KWOK cluster: every component on 127.0.0.1, on
// ports the kernel just handed out, with the local binaries (kwokctl
// downloads nothing then), and three fake nodes.
func (h *harness) createCluster() error {
	start := time.Now()
	cfg, err := testenv.KwokctlConfig(h.bindir, "")
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(h.work, "kwokctl.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	if err := h.kwokctl("-c", cfgPath, "create", "cluster", "--name", clusterName,
		"--kubeconfig", h.kubeconfig, "--wait", "2m"); err != nil {
		return err
	}
	if err := h.kwokctl("scale", "node", "--replicas", "3", "--name", clusterName); err != nil {
		return err
	}
	logf("created KWOK cluster %s (3 nodes) in %s", clusterName, time.Since(start).Round(time.Second))
	return nil
}

func (h *harness) kwokctl(args ...string) error {
	logPath := filepath.Join(h.work, "kwokctl.log")
	_ = os.MkdirAll(h.work, 0o755)
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	cmd := exec.Command(filepath.Join(h.bindir, "kwokctl"), args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kwokctl %s: %w\n%s", strings.Join(args, " "), err, testenv.Tail(logPath, 30))
	}
	return nil
}

func (h *harness) clients() error {
	cfg, err := clientcmd.BuildConfigFromFlags("", h.kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 100, 200
	// instanceObjects lists every resource type, v1 Endpoints included.
	cfg.WarningHandler = rest.NoWarnings{}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := databasev1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	if h.c, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	if h.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return err
	}
	h.disc, err = discovery.NewDiscoveryClientForConfig(cfg)
	return err
}

// waitEstablished waits for the CRD to be served. kubectl wait fails at once
// (instead of waiting) while a new CRD's status.conditions is still null,
// hence the retries.
func waitEstablished(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		out, err := kubectlRun("", "wait", "--for=condition=Established",
			"crd/mydatabases.database.example.com", "--timeout=10s")
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the CRD was not established within %s: %w\n%s", timeout, err, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (h *harness) runWithoutCRD() {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.managerBin, "--health-probe-bind-address=0", "--metrics-bind-address=0")
	out, err := cmd.CombinedOutput()
	h.noCRD.ran, h.noCRD.err, h.noCRD.output, h.noCRD.elapsed = true, err, string(out), time.Since(start)
}

func (h *harness) startOperator() error {
	start := time.Now()
	p, err := testenv.StartProc("operator", filepath.Join(h.work, "operator.log"), filepath.Join(h.work, "operator.pid"),
		h.managerBin, h.operatorArgs...)
	if err != nil {
		return err
	}
	h.operator = p
	deadline := time.Now().Add(60 * time.Second)
	for {
		if p.Exited() {
			return fmt.Errorf("the operator exited at start: %v\n%s", p.Err(), testenv.Tail(p.Log, 40))
		}
		resp, err := http.Get("http://" + h.healthAddr + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
		}
		if err == nil && resp.StatusCode == http.StatusOK && strings.Contains(readFile(p.Log), "Starting workers") {
			logf("operator started (pid %d) in %s", p.Pid(), time.Since(start).Round(100*time.Millisecond))
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the operator did not become ready within 60s\n%s", testenv.Tail(p.Log, 40))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (h *harness) restartOperator() error {
	if err := h.operator.Stop(30 * time.Second); err != nil {
		return fmt.Errorf("stopping the operator: %w", err)
	}
	appendFile(h.operator.Log, "\n===== e2e: operator restarted =====\n\n")
	return h.startOperator()
}

// reconcileCount reads controller_runtime_reconcile_total of the MyDatabase
// controller from the operator's metrics endpoint.
func (h *harness) reconcileCount() (int, error) {
	resp, err := http.Get("http://" + h.metricsAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	total := 0
	for line := range strings.SplitSeq(string(body), "\n") {
		if strings.HasPrefix(line, "controller_runtime_reconcile_total{") &&
			strings.Contains(line, `controller="mydatabase"`) {
			f := strings.Fields(line)
			n, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				return 0, err
			}
			total += int(n)
		}
	}
	return total, nil
}

// teardown stops every process the suite started and deletes the cluster.
// The work directory (logs) is kept after a failure.
func (h *harness) teardown(keepLogs bool) {
	h.teardownOnce.Do(func() {
		if h.work == "" {
			return
		}
		start := time.Now()
		h.mu.Lock()
		for _, f := range h.atTeardown {
			f()
		}
		h.mu.Unlock()
		for _, p := range []*testenv.Proc{h.operator, h.provisioner} {
			if p != nil {
				_ = p.Stop(15 * time.Second)
			}
		}
		if err := h.kwokctl("delete", "cluster", "--name", clusterName, "--kubeconfig", h.kubeconfig); err != nil {
			logf("deleting the cluster: %v", err)
		}
		if keepLogs {
			_ = os.RemoveAll(filepath.Join(h.work, "kwok"))
			_ = os.RemoveAll(filepath.Join(h.work, "volumes"))
			logf("cluster deleted; logs kept in %s", h.work)
		} else {
			_ = os.RemoveAll(h.work)
			logf("cluster deleted in %s", time.Since(start).Round(100*time.Millisecond))
		}
	})
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

func appendFile(path, s string) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	_, _ = f.WriteString(s)
	_ = f.Close()
}

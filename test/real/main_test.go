//go:build real

// Package real runs the operator, built from this checkout, as a local
// process against a one-node cluster whose pods really run
// (hack/real-node.sh: a real kubelet, containerd, runc, CNI bridge,
// kube-proxy and CoreDNS, PostgreSQL images built from Debian's packages),
// and proves the life cycle by connecting to the databases it makes.
//
// TestMain starts the node, builds the operator and cmd/dev-provisioner,
// installs the CRD with `make install` and starts both. At the end it stops
// them and the node; `hack/real-node.sh down` then compares the machine
// with a snapshot taken before the node started (processes, mounts,
// interfaces, routes, iptables rules, sysctls, host paths), and the suite
// fails if anything of the run is left.
//
// It needs Linux and root. Run with `make test-real`.
package real

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/testenv"
)

// env is the node every test uses.
var env *harness

type harness struct {
	repo       string // checkout root
	work       string // bin/real: binaries and logs of this suite
	node       string // hack/real-node.sh
	kubeconfig string
	volumes    string // the provisioner's root, in the node's state directory

	operator    *testenv.Proc
	provisioner *testenv.Proc
	managerBin  string
	// instanceImage is the operator's image, built from this checkout and
	// imported into the node (hack/operator-image.sh), and instanceBinary
	// the instance manager in it, with which the operator replaces running
	// ones.
	instanceImage, instanceBinary string

	c  client.Client
	cs kubernetes.Interface

	nodeUp       bool
	teardownOnce sync.Once
	teardownErr  error
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	start := time.Now()
	h := &harness{}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		logf("received %s: tearing down", s)
		_ = h.teardown()
		os.Exit(2)
	}()
	if f := flag.Lookup("test.timeout"); f != nil {
		if d, err := time.ParseDuration(f.Value.String()); err == nil && d > time.Minute {
			time.AfterFunc(d-time.Minute, func() {
				logf("the suite is about to exceed -timeout %s: tearing down", d)
				_ = h.teardown()
				os.Exit(1)
			})
		}
	}

	if err := h.setup(); err != nil {
		logf("SETUP FAILED: %v", err)
		if h.operator != nil {
			logf("operator log:\n%s", testenv.Tail(h.operator.Log, 60))
		}
		_ = h.teardown()
		return 1
	}
	env = h
	logf("setup done in %s", time.Since(start).Round(time.Second))
	code := m.Run()
	if h.teardown() != nil {
		code = 1
	}
	logf("suite finished in %s (exit %d)", time.Since(start).Round(time.Second), code)
	return code
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "real %s: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func (h *harness) setup() error {
	if os.Geteuid() != 0 {
		return errors.New("real pods need root (a kubelet, containerd, network namespaces, iptables)")
	}
	var err error
	if h.repo, err = filepath.Abs("../.."); err != nil {
		return err
	}
	h.node = filepath.Join(h.repo, "hack", "real-node.sh")
	h.work = filepath.Join(h.repo, "bin", "real")
	// The operator's binaries, static as in its image.
	operatorDir := filepath.Join(h.work, "operator")
	managerBin := filepath.Join(operatorDir, "manager")
	provisionerBin := filepath.Join(h.work, "dev-provisioner")
	// A killed earlier run: its processes first, then its node.
	for _, p := range []struct{ pidfile, bin string }{
		{filepath.Join(h.work, "operator.pid"), managerBin},
		{filepath.Join(h.work, "provisioner.pid"), provisionerBin},
	} {
		if pid, ok := testenv.RecordedPID(p.pidfile, p.bin); ok {
			logf("stopping pid %d left by an earlier run (%s)", pid, p.bin)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	_ = os.RemoveAll(h.work)
	if err := os.MkdirAll(h.work, 0o755); err != nil {
		return err
	}

	// The builds and the node are independent: overlap them.
	built := make(chan error, 1)
	go func() {
		err := buildOperator(h.repo, operatorDir)
		if err == nil {
			err = testenv.GoBuild(h.repo, provisionerBin, "./cmd/dev-provisioner")
		}
		built <- err
	}()
	start := time.Now()
	h.nodeUp = true // from here on, teardown runs `down` even if `up` fails half way
	if err := h.script("up"); err != nil {
		<-built
		return err
	}
	logf("node up in %s", time.Since(start).Round(time.Second))
	if err := <-built; err != nil {
		return err
	}
	// The operator's image, for the instance manager the pods copy out of
	// it: imported into the node.
	if err := h.loadOperatorImage(operatorDir); err != nil {
		return err
	}
	out, err := exec.Command(h.node, "kubeconfig").Output()
	if err != nil {
		return fmt.Errorf("%s kubeconfig: %w", h.node, err)
	}
	h.kubeconfig = strings.TrimSpace(string(out))
	h.volumes = filepath.Join(filepath.Dir(h.kubeconfig), "volumes")
	if err := os.Setenv("KUBECONFIG", h.kubeconfig); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", h.kubeconfig)
	if err != nil {
		return err
	}
	if h.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}

	h.provisioner, err = testenv.StartProc("provisioner", filepath.Join(h.work, "provisioner.log"),
		filepath.Join(h.work, "provisioner.pid"), provisionerBin, "--kubeconfig", h.kubeconfig, "--root", h.volumes)
	if err != nil {
		return err
	}
	if out, err := testenv.Make(h.repo, "install"); err != nil {
		return fmt.Errorf("make install: %w\n%s", err, out)
	}
	if err := waitServed(h.cs, time.Minute); err != nil {
		return err
	}
	// Made once the CRD is served: its REST mapper then knows MyDatabase.
	// The suite's client has nothing to log (the operator logs to its own
	// file); without a logger controller-runtime prints a warning.
	crlog.SetLogger(logr.Discard())
	if h.c, err = client.New(cfg, client.Options{Scheme: testenv.Scheme()}); err != nil {
		return err
	}
	h.managerBin = managerBin
	return h.startOperator()
}

// buildOperator builds the operator's manager and instance manager into
// dir, static, as the Dockerfile does.
func buildOperator(repo, dir string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-o", dir+"/", "./cmd", "./cmd/instance")
	cmd.Dir, cmd.Env = repo, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the operator: %w\n%s", err, out)
	}
	return os.Rename(filepath.Join(dir, "cmd"), filepath.Join(dir, "manager"))
}

// loadOperatorImage makes the operator's image of the binaries in dir
// and imports it into the node; the operator started next uses it.
func (h *harness) loadOperatorImage(dir string) error {
	imageTar := filepath.Join(dir, "image.tar")
	out, err := exec.Command(filepath.Join(h.repo, "hack", "operator-image.sh"), imageTar, dir).Output()
	if err != nil {
		return fmt.Errorf("hack/operator-image.sh: %w", err)
	}
	if err := h.script("load", imageTar); err != nil {
		return err
	}
	h.instanceImage, h.instanceBinary = strings.TrimSpace(string(out)), filepath.Join(dir, "instance")
	return os.Remove(imageTar)
}

// nextOperatorVersion restarts the operator as a new version of itself:
// the same manager, an instance manager with bytes appended (which the
// loader ignores) so that its digest and the image's tag differ. It
// returns the new instance manager's digest.
func (h *harness) nextOperatorVersion(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(h.work, "operator-next")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"manager", "instance"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(h.managerBin), name))
		if err != nil {
			t.Fatal(err)
		}
		if name == "instance" {
			b = append(b, "\nthe next version\n"...)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.loadOperatorImage(dir); err != nil {
		t.Fatal(err)
	}
	if err := h.operator.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := h.startOperator(); err != nil {
		t.Fatal(err)
	}
	digest, err := contract.Digest(h.instanceBinary)
	if err != nil {
		t.Fatal(err)
	}
	return digest
}

// startOperator starts the operator as a process of this machine and waits
// until it is ready.
func (h *harness) startOperator() error {
	ports, err := testenv.FreePorts(2)
	if err != nil {
		return err
	}
	health := fmt.Sprintf("127.0.0.1:%d", ports[0])
	h.operator, err = testenv.StartProc("operator", filepath.Join(h.work, "operator.log"),
		filepath.Join(h.work, "operator.pid"), h.managerBin,
		"--health-probe-bind-address="+health, fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[1]),
		"--metrics-secure=false", "--instance-manager-image="+h.instanceImage, "--instance-manager-binary="+h.instanceBinary)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if h.operator.Exited() {
			return fmt.Errorf("the operator exited at start: %v", h.operator.Err())
		}
		if resp, err := http.Get("http://" + health + "/readyz"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New("the operator did not become ready within a minute")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// teardown stops the operator and the provisioner, then the node, whose
// `down` fails if anything of the run is left on the machine (logged, and
// returned).
func (h *harness) teardown() error {
	h.teardownOnce.Do(func() {
		for _, p := range []*testenv.Proc{h.operator, h.provisioner} {
			if p != nil {
				if err := p.Stop(30 * time.Second); err != nil {
					logf("%v", err)
				}
			}
		}
		if h.nodeUp {
			start := time.Now()
			if err := h.script("down"); err != nil {
				logf("TEARDOWN FAILED: %v", err)
				h.teardownErr = err
				return
			}
			logf("node down and the machine as before in %s; logs in %s", time.Since(start).Round(time.Second), h.work)
		}
	})
	return h.teardownErr
}

// script runs hack/real-node.sh with its output on the suite's.
func (h *harness) script(args ...string) error {
	cmd := exec.Command(h.node, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("hack/real-node.sh %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// waitServed waits until the API server serves MyDatabases.
func waitServed(cs kubernetes.Interface, timeout time.Duration) error {
	gv := databasev1alpha1.GroupVersion.String()
	deadline := time.Now().Add(timeout)
	for {
		list, err := cs.Discovery().ServerResourcesForGroupVersion(gv)
		if err == nil && slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "mydatabases" }) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s mydatabases not served within %s: %v", gv, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

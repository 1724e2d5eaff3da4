package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"example.com/myoperator/internal/testenv"
)

// ClusterLimits are the client limits of the KWOK cluster's own
// kube-controller-manager and kube-scheduler (their defaults, 20/30 and
// 50/100, would make them the bottleneck of the full tier), and how many
// StatefulSets the StatefulSet controller syncs at once (default 5).
type ClusterLimits struct {
	QPS              float64 `json:"kube_api_qps"`
	Burst            int     `json:"kube_api_burst"`
	StatefulSetSyncs int     `json:"concurrent_statefulset_syncs"`
}

func (l ClusterLimits) String() string {
	return fmt.Sprintf("--kube-api-qps=%g --kube-api-burst=%d, kube-controller-manager --concurrent-statefulset-syncs=%d",
		l.QPS, l.Burst, l.StatefulSetSyncs)
}

// kwokCluster is a simulated cluster of its own, made by kwokctl's binary
// runtime from the binaries of hack/k8s-binaries.sh: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and kwok-controller as detached
// processes on 127.0.0.1, fake nodes on which pods are marked Running and
// Ready, and cmd/dev-provisioner (a child of this process) for volumes.
type kwokCluster struct {
	name       string
	dir        string // work dir: kwokctl's KWOK_WORKDIR, kubeconfig, logs, volumes
	bindir     string
	kubeconfig string
	nodes      int
	env        *controlPlane // Config and Scheme for the harness's clients

	// provisionerLimits are the client limit flags given to the
	// provisioner: the cluster's.
	provisionerLimits string
	provisioner       *exec.Cmd
	provisionerLog    string
	provisionerDone   chan struct{}
}

// kwokRoot holds the work dirs of the clusters of every harness process on
// this machine, so that a run can delete what a killed one left.
func kwokRoot() string { return filepath.Join(os.TempDir(), "myoperator-bench-kwok") }

var clusterSeq atomic.Int64

// kwokBinaries returns the directory of the Kubernetes binaries, which must
// hold kwokctl and kwok besides the envtest ones.
func kwokBinaries() (string, error) {
	dir, err := testenv.Assets()
	if err != nil {
		return "", err
	}
	for _, b := range []string{"kwokctl", "kwok", "kube-controller-manager", "kube-scheduler", "etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("the full tier needs %s in KUBEBUILDER_ASSETS=%s (hack/k8s-binaries.sh builds it): %w", b, dir, err)
		}
	}
	return dir, nil
}

// buildProvisioner builds cmd/dev-provisioner into dir.
func buildProvisioner(dir string) (string, error) {
	bin := filepath.Join(dir, "dev-provisioner")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/dev-provisioner")
	cmd.Dir = testenv.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/dev-provisioner: %w\n%s", err, out)
	}
	return bin, nil
}

// startKWOK creates a cluster with the given number of nodes and limits,
// installs the CRD and starts the volume provisioner.
func startKWOK(bindir, provisionerBin string, nodes int, limits ClusterLimits) (kc *kwokCluster, err error) {
	cleanStaleClusters(bindir)
	name := fmt.Sprintf("bench-%d-%d", os.Getpid(), clusterSeq.Add(1))
	dir := filepath.Join(kwokRoot(), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	kc = &kwokCluster{name: name, dir: dir, bindir: bindir, kubeconfig: filepath.Join(dir, "kubeconfig"), nodes: nodes}
	// Who owns the cluster, for cleanStaleClusters.
	if err := os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, err
	}
	live.add(kc)
	defer func() {
		if err != nil {
			kc.stop(true)
		}
	}()
	if err := kc.create(limits); err != nil {
		return kc, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc.kubeconfig)
	if err != nil {
		return kc, err
	}
	cfg.WarningHandler = rest.NoWarnings{}
	kc.env = &controlPlane{Config: cfg, Scheme: testenv.Scheme()}
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join(testenv.RepoRoot(), "config", "crd", "bases")}, ErrorIfPathMissing: true,
	}); err != nil {
		return kc, fmt.Errorf("installing the CRD: %w", err)
	}
	kc.provisionerLimits = fmt.Sprintf("--kube-api-qps=%g --kube-api-burst=%d", limits.QPS, limits.Burst)
	if err := kc.startProvisioner(provisionerBin); err != nil {
		return kc, err
	}
	return kc, nil
}

// create runs kwokctl create cluster with every component on 127.0.0.1, on
// ports the kernel just handed out (two clusters at once cannot collide),
// with the local binaries (nothing is downloaded), then adds the nodes.
func (kc *kwokCluster) create(limits ClusterLimits) error {
	var extra strings.Builder
	arg := func(key string, value any) {
		fmt.Fprintf(&extra, "  - key: %s\n    value: %q\n", key, fmt.Sprint(value))
	}
	// A /16 of Service addresses: the default /24 runs out at about 120
	// MyDatabases of several servers (a primary and a read-only Service
	// each).
	extra.WriteString("componentsPatches:\n- name: kube-apiserver\n  extraArgs:\n")
	arg("service-cluster-ip-range", "10.0.0.0/16")
	extra.WriteString("- name: kube-controller-manager\n  extraArgs:\n")
	arg("kube-api-qps", limits.QPS)
	arg("kube-api-burst", limits.Burst)
	arg("concurrent-statefulset-syncs", limits.StatefulSetSyncs)
	extra.WriteString("- name: kube-scheduler\n  extraArgs:\n")
	arg("kube-api-qps", limits.QPS)
	arg("kube-api-burst", limits.Burst)
	cfg, err := testenv.KwokctlConfig(kc.bindir, extra.String())
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(kc.dir, "kwokctl.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	if err := kc.kwokctl("-c", cfgPath, "create", "cluster", "--name", kc.name, "--kubeconfig", kc.kubeconfig, "--wait", "2m"); err != nil {
		return err
	}
	return kc.kwokctl("scale", "node", "--replicas", strconv.Itoa(kc.nodes), "--name", kc.name)
}

func (kc *kwokCluster) kwokctl(args ...string) error {
	return runKwokctl(kc.bindir, filepath.Join(kc.dir, "kwok"), filepath.Join(kc.dir, "kwokctl.log"), args...)
}

func runKwokctl(bindir, workdir, logPath string, args ...string) error {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	cmd := exec.Command(filepath.Join(bindir, "kwokctl"), args...)
	cmd.Env = append(os.Environ(), "KWOK_WORKDIR="+workdir)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kwokctl %s: %w (log: %s)", strings.Join(args, " "), err, logPath)
	}
	return nil
}

// startProvisioner starts cmd/dev-provisioner at -v=3, so that its log
// shows every client-side throttling wait over 50 ms (throttleWait), and
// waits for its default StorageClass.
func (kc *kwokCluster) startProvisioner(bin string) error {
	kc.provisionerLog = filepath.Join(kc.dir, "provisioner.log")
	f, err := os.Create(kc.provisionerLog)
	if err != nil {
		return err
	}
	args := []string{"--kubeconfig", kc.kubeconfig, "--root", filepath.Join(kc.dir, "volumes"), "-v=3"}
	if kc.provisionerLimits != "" {
		args = append(args, strings.Fields(kc.provisionerLimits)...)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Stopped by its PID in stop; should this process die first, the
	// kernel sends it SIGTERM.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return fmt.Errorf("starting the provisioner: %w", err)
	}
	_ = os.WriteFile(filepath.Join(kc.dir, "provisioner.pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
	kc.provisioner, kc.provisionerDone = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = f.Close()
		close(kc.provisionerDone)
	}()
	c, err := client.New(kc.env.Config, client.Options{Scheme: kc.env.Scheme})
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		select {
		case <-kc.provisionerDone:
			return fmt.Errorf("the provisioner exited at start (log: %s)", kc.provisionerLog)
		default:
		}
		if err := c.Get(context.Background(), client.ObjectKey{Name: "standard"}, &storagev1.StorageClass{}); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the provisioner made no StorageClass within a minute (log: %s)", kc.provisionerLog)
		}
	}
}

// stop stops the provisioner (by its PID) and deletes the cluster. The work
// dir is removed unless keepLogs.
func (kc *kwokCluster) stop(keepLogs bool) {
	if p := kc.provisioner; p != nil {
		_ = p.Process.Signal(syscall.SIGTERM)
		select {
		case <-kc.provisionerDone:
		case <-time.After(10 * time.Second):
			_ = p.Process.Kill()
			<-kc.provisionerDone
		}
	}
	if _, err := os.Stat(filepath.Join(kc.dir, "kwok", "clusters", kc.name)); err == nil {
		if keepLogs { // kwokctl deletes them with the cluster
			copyDir(filepath.Join(kc.dir, "kwok", "clusters", kc.name, "logs"), filepath.Join(kc.dir, "logs"))
		}
		if err := kc.kwokctl("delete", "cluster", "--name", kc.name, "--kubeconfig", kc.kubeconfig); err != nil {
			logf(progress, "deleting KWOK cluster %s: %v", kc.name, err)
			keepLogs = true
		}
	}
	live.remove(kc)
	if keepLogs {
		logf(progress, "KWOK cluster %s: logs kept in %s", kc.name, kc.dir)
		return
	}
	_ = os.RemoveAll(kc.dir)
}

// copyDir copies the files of one directory into another.
func copyDir(from, to string) {
	entries, err := os.ReadDir(from)
	if err != nil || os.MkdirAll(to, 0o755) != nil {
		return
	}
	for _, e := range entries {
		if b, err := os.ReadFile(filepath.Join(from, e.Name())); err == nil && e.Type().IsRegular() {
			_ = os.WriteFile(filepath.Join(to, e.Name()), b, 0o644)
		}
	}
}

// componentCPU returns the CPU time used so far by each component of the
// cluster and by the provisioner.
func (kc *kwokCluster) componentCPU() map[string]time.Duration {
	out := map[string]time.Duration{}
	pids, _ := filepath.Glob(filepath.Join(kc.dir, "kwok", "clusters", kc.name, "pids", "*.pid"))
	for _, f := range pids {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			continue
		}
		if _, cpu, ok := procStat(pid); ok {
			out[strings.TrimSuffix(filepath.Base(f), ".pid")] = cpu
		}
	}
	if kc.provisioner != nil {
		if _, cpu, ok := procStat(kc.provisioner.Process.Pid); ok {
			out["dev-provisioner"] = cpu
		}
	}
	return out
}

// provisionerLogSize is where the provisioner's log ends now.
func (kc *kwokCluster) provisionerLogSize() int64 {
	fi, err := os.Stat(kc.provisionerLog)
	if err != nil {
		return 0
	}
	return fi.Size()
}

var waitedDelay = regexp.MustCompile(`"Waited before sending request" delay="([^"]+)"`)

// provisionerThrottle sums the client-side throttling waits over 50 ms that
// the provisioner logged after offset.
func (kc *kwokCluster) provisionerThrottle(offset int64) (waits int, seconds float64) {
	b, err := os.ReadFile(kc.provisionerLog)
	if err != nil || offset > int64(len(b)) {
		return 0, 0
	}
	last := ""
	for line := range strings.SplitSeq(string(b[offset:]), "\n") {
		m := waitedDelay.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		// client-go's throttled logger repeats a wait over 1 s at once,
		// from another line of request.go: the same message.
		_, msg, _ := strings.Cut(line, "] ")
		if msg == last {
			continue
		}
		last = msg
		if d, err := time.ParseDuration(m[1]); err == nil {
			waits++
			seconds += d.Seconds()
		}
	}
	return waits, seconds
}

// freePorts returns n distinct ports that were free on 127.0.0.1 a moment
// ago (all held open until the last is picked).

// cleanStaleClusters deletes the clusters of harness processes that no
// longer run (killed before they could clean up): kwokctl's components
// are detached and would run on.
func cleanStaleClusters(bindir string) {
	dirs, _ := filepath.Glob(filepath.Join(kwokRoot(), "bench-*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "owner.pid"))
		if err != nil {
			continue
		}
		owner, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || owner == os.Getpid() || processAlive(owner) {
			continue
		}
		name := filepath.Base(dir)
		if b, err := os.ReadFile(filepath.Join(dir, "provisioner.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil &&
					strings.Contains(string(cmdline), dir) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "kwok", "clusters", name)); err == nil {
			logf(progress, "deleting KWOK cluster %s, left by process %d", name, owner)
			if err := runKwokctl(bindir, filepath.Join(dir, "kwok"), filepath.Join(dir, "kwokctl.log"),
				"delete", "cluster", "--name", name, "--kubeconfig", filepath.Join(dir, "kubeconfig")); err != nil {
				logf(progress, "  %v", err)
				continue
			}
		}
		_ = os.RemoveAll(dir)
	}
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// live are the clusters this process runs: an interrupt deletes them
// before the process exits, since their components are not its children.
// The signals are caught only while there are any.
var live = &liveClusters{set: map[*kwokCluster]bool{}, sig: make(chan os.Signal, 1)}

type liveClusters struct {
	mu   sync.Mutex
	set  map[*kwokCluster]bool
	sig  chan os.Signal
	once sync.Once
}

func (l *liveClusters) add(kc *kwokCluster) {
	l.once.Do(func() { go l.onSignal() })
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.set) == 0 {
		signal.Notify(l.sig, os.Interrupt, syscall.SIGTERM)
	}
	l.set[kc] = true
}

func (l *liveClusters) remove(kc *kwokCluster) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.set, kc)
	if len(l.set) == 0 {
		signal.Stop(l.sig)
	}
}

func (l *liveClusters) onSignal() {
	s := <-l.sig
	logf(progress, "received %s: deleting the KWOK clusters", s)
	l.mu.Lock()
	clusters := make([]*kwokCluster, 0, len(l.set))
	for kc := range l.set {
		clusters = append(clusters, kc)
	}
	l.mu.Unlock()
	for _, kc := range clusters {
		kc.stop(false)
	}
	os.Exit(130)
}

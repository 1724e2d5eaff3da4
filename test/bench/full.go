package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"example.com/myoperator/internal/specs"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// The milestones of a MyDatabase on the way to Ready, as the full tier's
// watches see them: each PVC bound to a volume, each pod bound to a node
// and then Running and Ready, the StatefulSet with readyReplicas ==
// replicas, the MyDatabase with condition Ready=True.
const (
	milestonePVCBound     = "PVC Bound"
	milestonePodScheduled = "pod scheduled"
	milestonePodReady     = "pod Running and Ready"
	milestoneSTSReady     = "StatefulSet ready"
	milestoneDBReady      = "MyDatabase Ready"
)

var milestones = []string{milestonePVCBound, milestonePodScheduled, milestonePodReady, milestoneSTSReady, milestoneDBReady}

// FullRun is one timed run of the full tier (B7) on a KWOK cluster of its
// own: the operator, or the raw client with the StatefulSet controller
// alone, taking N MyDatabases to Ready.
type FullRun struct {
	Mode     string        `json:"mode"` // "operator" or "raw"
	Round    int           `json:"round"`
	N        int           `json:"n"`
	Replicas int           `json:"replicas"`
	Nodes    int           `json:"nodes"`
	Settings Settings      `json:"settings"` // the operator's; in raw runs only Workers (the raw client's goroutines)
	Limits   ClusterLimits `json:"cluster_limits"`
	Load     string        `json:"loadavg"`
	// SetupSeconds: cluster created, CRD installed, provisioner started,
	// one MyDatabase warmed up and, in operator runs, the operator started.
	SetupSeconds float64 `json:"setup_seconds"`
	// Seconds from the first create until the last MyDatabase was Ready
	// (operator) or the last StatefulSet ready (raw).
	Seconds float64 `json:"seconds"`
	Done    int     `json:"done"`
	// Milestones: seconds since the first create at which each object
	// reached each milestone (the last time, for the ones that can be
	// lost), sorted.
	Milestones map[string][]float64 `json:"milestones"`
	// ReadyLag: in operator runs, how long after its StatefulSet was
	// ready each MyDatabase was seen Ready (seconds, sorted): the latency
	// of the operator's status.
	ReadyLag []float64 `json:"ready_lag,omitempty"`
	// PodsReady: pods Running and Ready when the run was done.
	PodsReady int `json:"pods_ready"`
	// Requests of the operator (or of the raw client), from the first
	// create until the operator was quiet (until done, for raw runs).
	Requests   requestStats `json:"requests"`
	Reconciles float64      `json:"reconciles"`
	// ThrottleWaitSeconds: the operator's client-side throttling wait
	// (rest_client_rate_limiter_duration_seconds), in the same window.
	ThrottleWaitSeconds float64 `json:"throttle_wait_seconds"`
	// Mean seconds a request waited in the operator's queue, and a
	// reconcile took; reconcile errors.
	QueueWaitMean     float64 `json:"queue_wait_mean_seconds"`
	ReconcileTimeMean float64 `json:"reconcile_time_mean_seconds"`
	ReconcileErrors   float64 `json:"reconcile_errors"`
	// CPU seconds from the first create until done, by process: the
	// cluster's components, dev-provisioner and this process (the harness,
	// with the operator in operator runs).
	CPU map[string]float64 `json:"cpu_seconds"`
	// ProvisionerLimits are the client limit flags the provisioner was
	// given ("" when it takes none: client-go's default, 5 QPS, burst 10).
	ProvisionerLimits string `json:"provisioner_limits"`
	// The provisioner's client-side throttling waits over 50 ms.
	ProvisionerThrottleWaits   int     `json:"provisioner_throttle_waits"`
	ProvisionerThrottleSeconds float64 `json:"provisioner_throttle_wait_seconds"`
}

// target is the milestone that ends the run.
func (r *FullRun) target() string {
	if r.Mode == modeRaw {
		return milestoneSTSReady
	}
	return milestoneDBReady
}

// last is when the last object reached milestone m (0 if none did).
func (r *FullRun) last(m string) float64 {
	if c := r.Milestones[m]; len(c) > 0 {
		return c[len(c)-1]
	}
	return 0
}

// fullNodes is the number of fake nodes: one per 50 pods, at least 3
// (a KWOK node takes 110 pods).
func fullNodes(opts Options) int {
	if opts.FullNodes > 0 {
		return opts.FullNodes
	}
	return max(3, (opts.FullN*opts.fullReplicas()+49)/50)
}

// fullTier runs B7: FullRounds rounds of an operator run and a raw run, on
// a fresh KWOK cluster each, alternating their order between rounds.
func fullTier(opts Options) ([]*FullRun, error) {
	bindir, err := kwokBinaries()
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "bench-provisioner-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	provisioner, err := buildProvisioner(tmp)
	if err != nil {
		return nil, err
	}
	var runs []*FullRun
	for round := 1; round <= opts.FullRounds; round++ {
		modes := []string{modeOperator, modeRaw}
		if round%2 == 0 {
			modes = []string{modeRaw, modeOperator}
		}
		for _, mode := range modes {
			logf(opts.Log, "full tier, round %d/%d: %s, %d MyDatabases on %d KWOK nodes", round, opts.FullRounds, mode, opts.FullN, fullNodes(opts))
			run, err := fullRun(opts, bindir, provisioner, mode, round)
			if run != nil {
				runs = append(runs, run)
			}
			if err != nil {
				return runs, fmt.Errorf("full tier, round %d, %s: %w", round, mode, err)
			}
			logf(opts.Log, "  %d/%d %s in %.1fs (set-up %.0fs); last PVC bound %.1fs, pod Ready %.1fs, StatefulSet ready %.1fs; provisioner throttled %.1fs; CPU %s",
				run.Done, run.N, run.target(), run.Seconds, run.SetupSeconds, run.last(milestonePVCBound),
				run.last(milestonePodReady), run.last(milestoneSTSReady), run.ProvisionerThrottleSeconds, cpuString(run.CPU))
			if len(run.ReadyLag) > 0 {
				logf(opts.Log, "  MyDatabase Ready after its StatefulSet: p50 %.1fs, max %.1fs; %.0f reconciles (%.0f errors), mean queue wait %.0f ms, mean reconcile %.0f ms",
					percentile(run.ReadyLag, 50), percentile(run.ReadyLag, 100), run.Reconciles, run.ReconcileErrors, run.QueueWaitMean*1000, run.ReconcileTimeMean*1000)
			}
		}
	}
	return runs, nil
}

// fullRun starts a KWOK cluster, warms it up with one MyDatabase in another
// namespace, and times N MyDatabases to Ready: created by users and
// reconciled by the operator, or written by the raw client, from the same
// builders, with no operator running.
func fullRun(opts Options, bindir, provisioner, mode string, round int) (run *FullRun, err error) {
	ctx := context.Background()
	setup := time.Now()
	kc, err := startKWOK(bindir, provisioner, fullNodes(opts), opts.FullLimits)
	if err != nil {
		return nil, err
	}
	defer func() { kc.stop(err != nil || opts.FullKeepLogs) }()
	c, err := harnessClient(kc.env, nil)
	if err != nil {
		return nil, err
	}
	const ns = "bench"
	if err := createNamespace(ctx, c, ns); err != nil {
		return nil, err
	}
	if err := warmUp(ctx, c); err != nil {
		return nil, err
	}
	w, err := startReadiness(kc.env, ns)
	if err != nil {
		return nil, err
	}
	defer w.stop()

	s := opts.Defaults
	run = &FullRun{Mode: mode, Round: round, N: opts.FullN, Replicas: opts.fullReplicas(), Nodes: kc.nodes, Settings: s,
		Limits: opts.FullLimits, ProvisionerLimits: kc.provisionerLimits, Load: loadavg()}
	if mode == modeRaw {
		run.Settings = Settings{Workers: s.Workers}
	}
	var op *operator
	if mode == modeOperator {
		if op, err = startOperator(kc.env, s, 0); err != nil {
			return nil, err
		}
		defer op.stop()
		op.waitQuiet(opts.Settle, time.Minute) // it takes over the warm-up MyDatabase
	}
	run.SetupSeconds = time.Since(setup).Seconds()

	var mark opMark
	if op != nil {
		mark = op.mark()
	}
	rawHTTP := newHTTPCounter()
	provLog := kc.provisionerLogSize()
	comp0, self0 := kc.componentCPU(), readCPU().self
	t0 := time.Now()
	work := make(chan error, 1)
	go func() {
		if mode == modeOperator {
			work <- createDBs(ctx, c, ns, opts.FullN, s.Workers, int32(opts.FullReplicas))
			return
		}
		raw, err := harnessClient(kc.env, rawHTTP)
		if err != nil {
			work <- err
			return
		}
		work <- rawConverge(ctx, raw, ns, opts.FullN, s.Workers, int32(opts.FullReplicas))
	}()
	ok := w.wait(run.target(), opts.FullN, opts.Timeout, opts.Log)
	comp1, self1 := kc.componentCPU(), readCPU().self
	if err := <-work; err != nil {
		return run, err
	}
	run.CPU = map[string]float64{"harness": (self1 - self0).Seconds()}
	for k, v := range comp1 {
		run.CPU[k] = (v - comp0[k]).Seconds()
	}
	run.Milestones = w.curves(t0)
	run.Done = len(run.Milestones[run.target()])
	run.Seconds = run.last(run.target())
	run.PodsReady = len(run.Milestones[milestonePodReady])
	if mode == modeOperator {
		run.ReadyLag = w.lag(milestoneSTSReady, milestoneDBReady)
	}
	if !ok {
		return run, fmt.Errorf("%d of %d reached %q within %s (%s)", run.Done, opts.FullN, run.target(), opts.Timeout, w.summary())
	}
	if want := opts.FullN * opts.fullReplicas(); run.PodsReady < want {
		return run, fmt.Errorf("done, but only %d of %d pods are Running and Ready", run.PodsReady, want)
	}
	if op != nil {
		op.waitQuiet(opts.Settle, time.Minute)
		run.operatorFigures(op, mark)
	} else {
		run.Requests = diffRequests(nil, rawHTTP.snapshot())
	}
	run.ProvisionerThrottleWaits, run.ProvisionerThrottleSeconds = kc.provisionerThrottle(provLog)
	return run, nil
}

// warmUp takes one MyDatabase, in a namespace of its own, through the raw
// client's writes until its StatefulSet is ready: the first claim, volume,
// pod and StatefulSet of a fresh cluster are slow (informers, scheduler,
// provisioner starting), and both modes pay that here, not in the timed run.
func warmUp(ctx context.Context, c client.Client) error {
	const ns = "warmup"
	if err := createNamespace(ctx, c, ns); err != nil {
		return err
	}
	if err := rawConverge(ctx, c, ns, 1, 1, 0); err != nil {
		return fmt.Errorf("warming up: %w", err)
	}
	if err := waitStatefulSetReady(ctx, c, ns, dbName(0), 2*time.Minute); err != nil {
		return fmt.Errorf("warming up: %w", err)
	}
	return nil
}

// operatorFigures fills in the operator's requests, reconciles, queue and
// throttling since mark.
func (r *FullRun) operatorFigures(op *operator, mark opMark) {
	r.Requests, _, r.Reconciles = op.since(mark)
	cr := readCR()
	r.ThrottleWaitSeconds = cr.ThrottleSum - mark.cr.ThrottleSum
	r.QueueWaitMean = (cr.QueueWaitSum - mark.cr.QueueWaitSum) / float64(max(1, cr.QueueWaitCount-mark.cr.QueueWaitCount))
	r.ReconcileTimeMean = (cr.ReconcileTimeSum - mark.cr.ReconcileTimeSum) / float64(max(1, cr.ReconcileTimeCount-mark.cr.ReconcileTimeCount))
	r.ReconcileErrors = cr.ReconcileErrors - mark.cr.ReconcileErrors
}

// waitStatefulSetReady polls until the StatefulSet has all its replicas
// ready.
func waitStatefulSetReady(ctx context.Context, c client.Client, ns, name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		sts := &appsv1.StatefulSet{}
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sts)
		if err == nil && stsReady(sts) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("StatefulSet %s/%s not ready within %s (status %+v, err %v)", ns, name, timeout, sts.Status, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stsReady: the StatefulSet controller has seen the current spec and all
// of its replicas are ready.
func stsReady(sts *appsv1.StatefulSet) bool {
	want := int32(1)
	if sts.Spec.Replicas != nil {
		want = *sts.Spec.Replicas
	}
	s := sts.Status
	return s.ObservedGeneration >= sts.Generation && s.Replicas == want && s.ReadyReplicas == want
}

// readiness follows the MyDatabases, StatefulSets, pods and PVCs of one
// namespace with informers of its own and notes when each object reaches
// each milestone. Times are those at which the events arrive here.
type readiness struct {
	mu      sync.Mutex
	reached map[string]map[string]time.Time // milestone → object → when
	changed chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}
}

func startReadiness(env *controlPlane, ns string) (*readiness, error) {
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = -1, 0 // only the operator's client is rate-limited in this process
	ca, err := cache.New(cfg, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &readiness{reached: map[string]map[string]time.Time{}, changed: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	for _, m := range milestones {
		r.reached[m] = map[string]time.Time{}
	}
	handler := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.observe(obj) },
		UpdateFunc: func(_, obj any) { r.observe(obj) },
	}
	for _, obj := range []client.Object{&databasev1alpha1.MyDatabase{}, &appsv1.StatefulSet{}, &corev1.Pod{}, &corev1.PersistentVolumeClaim{}} {
		inf, err := ca.GetInformer(ctx, obj)
		if err == nil {
			_, err = inf.AddEventHandler(handler)
		}
		if err != nil {
			cancel()
			return nil, err
		}
	}
	go func() {
		defer close(r.done)
		_ = ca.Start(ctx)
	}()
	syncCtx, syncCancel := context.WithTimeout(ctx, time.Minute)
	defer syncCancel()
	if !ca.WaitForCacheSync(syncCtx) {
		r.stop()
		return nil, fmt.Errorf("the readiness informers did not sync")
	}
	return r, nil
}

func (r *readiness) observe(obj any) {
	now := time.Now()
	set := map[string]bool{}
	var name string
	switch o := obj.(type) {
	case *databasev1alpha1.MyDatabase:
		name = o.Name
		c := meta.FindStatusCondition(o.Status.Conditions, databasev1alpha1.ConditionReady)
		set[milestoneDBReady] = c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == o.Generation
	case *appsv1.StatefulSet:
		name = o.Name
		set[milestoneSTSReady] = stsReady(o)
	case *corev1.Pod:
		name = o.Name
		set[milestonePodScheduled] = o.Spec.NodeName != ""
		set[milestonePodReady] = o.Status.Phase == corev1.PodRunning && specs.PodReady(o)
	case *corev1.PersistentVolumeClaim:
		name = o.Name
		set[milestonePVCBound] = o.Status.Phase == corev1.ClaimBound
	default:
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for m, ok := range set {
		_, had := r.reached[m][name]
		switch {
		case ok && !had:
			r.reached[m][name] = now
		case !ok && had:
			delete(r.reached[m], name)
		}
	}
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// wait waits until n objects have reached milestone m, or the timeout,
// and says how far it got every 30 s.
func (r *readiness) wait(m string, n int, timeout time.Duration, log io.Writer) bool {
	deadline := time.After(timeout)
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	for {
		r.mu.Lock()
		done := len(r.reached[m]) >= n
		r.mu.Unlock()
		if done {
			return true
		}
		select {
		case <-r.changed:
		case <-tick.C:
			logf(log, "  %s", r.summary())
		case <-deadline:
			return false
		}
	}
}

// summary counts the objects at each milestone.
func (r *readiness) summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	parts := make([]string, 0, len(milestones))
	for _, m := range milestones {
		parts = append(parts, fmt.Sprintf("%s %d", m, len(r.reached[m])))
	}
	return strings.Join(parts, ", ")
}

// curves returns, for each milestone, the sorted seconds since t0 at which
// the objects reached it.
func (r *readiness) curves(t0 time.Time) map[string][]float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]float64{}
	for m, objs := range r.reached {
		c := make([]float64, 0, len(objs))
		for _, at := range objs {
			c = append(c, at.Sub(t0).Seconds())
		}
		slices.Sort(c)
		out[m] = c
	}
	return out
}

// lag returns, sorted, how long after reaching milestone from each object
// reached milestone to (for the objects that reached both).
func (r *readiness) lag(from, to string) []float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []float64
	for name, at := range r.reached[to] {
		if start, ok := r.reached[from][name]; ok {
			out = append(out, at.Sub(start).Seconds())
		}
	}
	slices.Sort(out)
	return out
}

func (r *readiness) stop() {
	r.cancel()
	<-r.done
}

func cpuString(cpu map[string]float64) string {
	parts := make([]string, 0, len(cpu))
	for _, k := range sortedKeys(cpu) {
		parts = append(parts, fmt.Sprintf("%s %.1fs", k, cpu[k]))
	}
	return strings.Join(parts, ", ")
}

package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/testenv"
)

// The two ways a convergence run gets its work done.
const (
	modeOperator = "operator"
	modeRaw      = "raw"
)

// Options size the benchmarks.
type Options struct {
	// N MyDatabases are created in each convergence run (B1, B2, B6).
	N int `json:"n"`
	// Rounds of the convergence runs; medians are reported.
	Rounds int `json:"rounds"`
	// Settings are the operator settings compared in the convergence runs;
	// each is measured against a raw client with as many workers.
	Settings []Settings `json:"settings"`
	// Defaults are cmd/main.go's flag defaults (CmdMainDefaults), to label
	// them in the report.
	Defaults Settings `json:"cmd_main_defaults"`
	// SteadyN MyDatabases are present for B3, B4 and B5, run with the
	// operator at SteadySettings and informer resync period Resync (0:
	// no resync window).
	SteadyN        int           `json:"steady_n"`
	SteadySettings Settings      `json:"steady_settings"`
	Resync         time.Duration `json:"resync"`
	// QuietWindow is how long a converged operator is watched for writes.
	QuietWindow time.Duration `json:"quiet_window"`
	// Unrelated Secrets and ConfigMaps (half each) of UnrelatedSize bytes
	// are created in other namespaces for B4.
	Unrelated     int `json:"unrelated"`
	UnrelatedSize int `json:"unrelated_size"`
	// Edits spec edits at EditRate per second for B5.
	Edits    int     `json:"edits"`
	EditRate float64 `json:"edit_rate"`
	// HeapSettings are further operator settings (experiments) whose heap
	// per MyDatabase is measured at SteadyN, each on a control plane of its
	// own.
	HeapSettings []Settings `json:"heap_settings,omitempty"`
	// HeapProfile, when set, is where a heap profile is written with the
	// SteadyN MyDatabases converged.
	HeapProfile string `json:"-"`
	// RestartProfile, when set, is where a CPU profile is written of the
	// restart's passes: from the caches synced until every MyDatabase was
	// reconciled.
	RestartProfile string `json:"-"`
	// SyncProfile, when set, is where a CPU profile is written of the
	// restart's start: from the new operator's start until its caches
	// synced.
	SyncProfile string `json:"-"`
	// APIServerProfiles, when set, is a directory where a CPU profile of
	// kube-apiserver is written for the first APIServerProfileSeconds of
	// every convergence run (B1), as MODE-roundR.prof.
	APIServerProfiles       string `json:"-"`
	APIServerProfileSeconds int    `json:"-"`
	// FullN MyDatabases of FullReplicas servers (0: the CRD's default, one)
	// are taken to Ready on a KWOK cluster in each run of the full tier
	// (B7, B9), by the operator and by the raw client with the StatefulSet
	// controller alone; 0 skips the tier.
	FullN        int `json:"full_n"`
	FullReplicas int `json:"full_replicas,omitempty"`
	FullRounds   int `json:"full_rounds"`
	// FullNodes fake nodes; 0: one per 50 pods, at least 3.
	FullNodes int `json:"full_nodes,omitempty"`
	// FullLimits of the KWOK cluster's kube-controller-manager and
	// kube-scheduler.
	FullLimits ClusterLimits `json:"full_cluster_limits"`
	// FullKeepLogs keeps the work dirs (logs) of the KWOK clusters.
	FullKeepLogs bool `json:"-"`
	// SkipSteady skips B3, B4 and B5.
	SkipSteady bool `json:"skip_steady"`
	// Settle is how long the operator must have been idle (no request, no
	// reconcile, empty queue) before a measurement that follows activity.
	Settle time.Duration `json:"settle"`
	// Timeout bounds every wait for convergence.
	Timeout time.Duration `json:"-"`
	// Log receives progress lines.
	Log io.Writer `json:"-"`
}

// DefaultOptions are the sizes of `make bench`.
func DefaultOptions() Options {
	defaults, err := CmdMainDefaults()
	if err != nil {
		defaults = DefaultSettings
	}
	return Options{
		N: 500, Rounds: 3, Settings: []Settings{defaults}, Defaults: defaults,
		SteadyN: 1000, SteadySettings: defaults, Resync: 20 * time.Second, QuietWindow: 10 * time.Second,
		Unrelated: 10000, UnrelatedSize: 32 << 10, Edits: 300, EditRate: 10,
		FullN: 100, FullRounds: 3, FullLimits: ClusterLimits{QPS: 1000, Burst: 2000, StatefulSetSyncs: 20},
		Settle: 3 * time.Second, Timeout: 15 * time.Minute, Log: os.Stderr, APIServerProfileSeconds: 20,
	}
}

// fullReplicas is the servers of each MyDatabase of the full tier.
func (o Options) fullReplicas() int { return max(1, o.FullReplicas) }

// Results are every figure of one invocation.
type Results struct {
	Options  Options   `json:"options"`
	Started  time.Time `json:"started"`
	Seconds  float64   `json:"seconds"`
	Machine  Machine   `json:"machine"`
	Converge []*Run    `json:"converge_runs"`
	Steady   *Steady   `json:"steady,omitempty"`
	// Full are the runs of the full tier (B7).
	Full []*FullRun `json:"full_runs,omitempty"`
	// TrackerRelists: how often a tracker found nothing moving for 45 s
	// before convergence and read the state with lists instead (0 when its
	// watches saw everything).
	TrackerRelists int64      `json:"tracker_relists"`
	Heap           []*HeapRun `json:"heap_runs,omitempty"`
	// Scale are the figures of the scale tiers (B8, B9: `make bench-scale`,
	// ScaleOptions), made by the Commands of each tier; `make bench` keeps
	// them.
	Scale    *Results     `json:"scale,omitempty"`
	Commands TierCommands `json:"scale_commands,omitzero"`
}

// TierCommands name the command that made each scale tier's figures: the
// tiers can be run apart, and each keeps its figures until run again.
type TierCommands struct {
	Converge string `json:"converge,omitempty"` // B8's convergence rounds
	Steady   string `json:"steady,omitempty"`   // B8's steady state
	Full     string `json:"full,omitempty"`     // B9
}

// HeapRun is the heap per MyDatabase with other operator settings.
type HeapRun struct {
	Settings        Settings `json:"settings"`
	N               int      `json:"n"`
	ConvergeSeconds float64  `json:"converge_seconds"`
	HeapEmpty       uint64   `json:"heap_empty_bytes"`
	HeapHalf        uint64   `json:"heap_half_bytes"`
	HeapConverged   uint64   `json:"heap_converged_bytes"`
	HeapPerDB       float64  `json:"heap_per_db_bytes"`
	// HeapPerDBMarginal is what each of the second half costs.
	HeapPerDBMarginal float64 `json:"heap_per_db_marginal_bytes"`
}

// Machine describes where the figures were taken.
type Machine struct {
	CPUs       int    `json:"cpus"`
	GoVersion  string `json:"go_version"`
	Assets     string `json:"kubebuilder_assets"`
	LoadBefore string `json:"loadavg_before"`
	LoadAfter  string `json:"loadavg_after"`
}

// Run is one timed convergence run: N MyDatabases created and converged,
// by the operator or by the raw client.
type Run struct {
	Mode     string   `json:"mode"` // "operator" or "raw"
	Settings Settings `json:"settings"`
	Round    int      `json:"round"`
	N        int      `json:"n"`
	Load     string   `json:"loadavg"`
	// Seconds from the first create until the last MyDatabase converged.
	Seconds   float64   `json:"seconds"`
	Converged int       `json:"converged"`
	Curve     []float64 `json:"converged_at"` // seconds, sorted
	// Requests of the operator (or of the raw client, MyDatabase creates
	// included), from first create until quiet.
	Requests requestStats `json:"requests"`
	// WritesByKind are the operator's client writes ("patch MyDatabase").
	WritesByKind map[string]int `json:"writes_by_kind,omitempty"`
	// Reconciles: until the last MyDatabase converged, and until quiet.
	ReconcilesAtConverged float64 `json:"reconciles_at_converged"`
	Reconciles            float64 `json:"reconciles"`
	ReconcilesPerDB       []int   `json:"reconciles_per_db_p50_p99_max"`
	ReconcileErrors       float64 `json:"reconcile_errors"`
	// Client-side throttling of the operator.
	ThrottleWaitSeconds float64 `json:"throttle_wait_seconds"`
	ThrottledOver25ms   uint64  `json:"throttled_requests_over_25ms"`
	ThrottleLogLines    int64   `json:"throttle_log_lines"`
	// ThrottleByRequest: seconds waited by request ("PATCH events"), from
	// the log lines (waits over 50 ms).
	ThrottleByRequest map[string]float64 `json:"throttle_wait_seconds_by_request,omitempty"`
	// ApplyLog counts the reconciler's "Applied"/"Spec changed"/"Drift"
	// messages by kind.
	ApplyLog map[string]int `json:"apply_log,omitempty"`
	// Stalled MyDatabases seen in phase Stalled; Regressions: converged,
	// then not.
	Stalled      int     `json:"stalled_seen"`
	Regressions  int     `json:"regressions"`
	QuietSeconds float64 `json:"quiet_after_converged_seconds"`
	// CPU seconds from the first create until the last MyDatabase
	// converged: of this process (operator, tracker, creating or raw
	// client) and of etcd and kube-apiserver together.
	ProcessCPU      float64 `json:"process_cpu_seconds"`
	ControlPlaneCPU float64 `json:"control_plane_cpu_seconds"`
	// OtherCPU is what every other process of the machine used meanwhile,
	// StolenCPU what the hypervisor gave to other machines while this
	// one's CPUs had work: both take from the run, and neither is the
	// operator's.
	OtherCPU  float64 `json:"other_cpu_seconds"`
	StolenCPU float64 `json:"stolen_cpu_seconds"`
	// TrackerRelists: see Results.TrackerRelists.
	TrackerRelists int64 `json:"tracker_relists,omitempty"`
}

// Run runs every benchmark.
func RunAll(opts Options) (*Results, error) {
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	installLogger(opts.Log)
	progress = opts.Log
	assets, err := testenv.Assets()
	if err != nil {
		return nil, err
	}
	_ = os.Setenv("KUBEBUILDER_ASSETS", assets)
	res := &Results{Options: opts, Started: time.Now(),
		Machine: Machine{CPUs: numCPU(), GoVersion: goVersion(), Assets: assets, LoadBefore: loadavg()}}
	for round := 1; round <= opts.Rounds; round++ {
		// One raw run per worker count and round; the order of operator and
		// raw runs alternates between rounds.
		var workers []int
		for _, s := range opts.Settings {
			if !slices.Contains(workers, s.Workers) {
				workers = append(workers, s.Workers)
			}
		}
		type job struct {
			mode string
			s    Settings
		}
		var ours, raws []job
		for _, s := range opts.Settings {
			ours = append(ours, job{modeOperator, s})
		}
		for _, w := range workers {
			raws = append(raws, job{modeRaw, Settings{Workers: w}})
		}
		jobs := append(ours, raws...)
		if round%2 == 0 {
			jobs = append(raws, ours...)
		}
		for _, j := range jobs {
			logf(opts.Log, "round %d/%d: %s, %d MyDatabases, settings %s", round, opts.Rounds, j.mode, opts.N, j.s)
			run, err := convergeRun(opts, j.mode, j.s, round)
			if err != nil {
				return res, fmt.Errorf("round %d, %s %s: %w", round, j.mode, j.s, err)
			}
			logf(opts.Log, "  converged %d/%d in %.1fs; writes %d (+%d events), reconciles %.0f, throttled %.1fs; CPU-s: etcd+apiserver %.1f, harness %.1f, other %.1f, stolen %.1f",
				run.Converged, run.N, run.Seconds, run.Requests.Writes, run.Requests.EventWrites, run.Reconciles, run.ThrottleWaitSeconds,
				run.ControlPlaneCPU, run.ProcessCPU, run.OtherCPU, run.StolenCPU)
			res.Converge = append(res.Converge, run)
		}
	}
	if opts.FullN > 0 && opts.FullRounds > 0 {
		runs, err := fullTier(opts)
		res.Full = runs
		if err != nil {
			return res, err
		}
	}
	if !opts.SkipSteady {
		st, err := steadyRun(opts)
		res.Steady = st
		if err != nil {
			return res, fmt.Errorf("steady state: %w", err)
		}
	}
	for _, s := range opts.HeapSettings {
		logf(opts.Log, "heap: %d MyDatabases, settings %s", opts.SteadyN, s)
		h, err := heapRun(opts, s)
		if err != nil {
			return res, fmt.Errorf("heap with %s: %w", s, err)
		}
		logf(opts.Log, "  converged in %.1fs; %.1f KiB per MyDatabase on average, %.1f KiB marginal", h.ConvergeSeconds,
			h.HeapPerDB/1024, h.HeapPerDBMarginal/1024)
		res.Heap = append(res.Heap, h)
	}
	res.TrackerRelists = trackerRelists.Load()
	res.Machine.LoadAfter = loadavg()
	res.Seconds = time.Since(res.Started).Seconds()
	return res, nil
}

// harnessClient is an uncounted client without client-side rate limit.
func harnessClient(env *controlPlane, count *httpCounter) (client.WithWatch, error) {
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = -1, 0
	if count != nil {
		cfg.WrapTransport = count.wrap
	}
	return client.NewWithWatch(cfg, client.Options{Scheme: env.Scheme})
}

func createNamespace(ctx context.Context, c client.Client, name string) error {
	return c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

// ns is the namespace of the measured MyDatabases.
const ns = "bench"

// startBenchPlane starts a fresh control plane with the harness's client
// and the namespace ns; the caller stops it.
func startBenchPlane() (*controlPlane, client.WithWatch, error) {
	env, err := startControlPlane()
	if err != nil {
		return nil, nil, err
	}
	c, err := harnessClient(env, nil)
	if err == nil {
		err = createNamespace(context.Background(), c, ns)
	}
	if err != nil {
		_ = env.Stop()
		return nil, nil, err
	}
	return env, c, nil
}

// convergeRun starts a fresh control plane, creates N MyDatabases and waits
// for them to converge, with the operator or the raw client doing the work.
func convergeRun(opts Options, mode string, s Settings, round int) (*Run, error) {
	ctx := context.Background()
	env, c, err := startBenchPlane()
	if err != nil {
		return nil, err
	}
	defer func() { _ = env.Stop() }()
	// A fresh API server is slow on its first request of each kind (type
	// converters for server-side apply, CEL programs): warm it up with one
	// MyDatabase in another namespace, so that both modes measure the
	// steady rate.
	if err := createNamespace(ctx, c, "warmup"); err != nil {
		return nil, err
	}
	if err := rawConverge(ctx, c, "warmup", 1, 1, 0); err != nil {
		return nil, fmt.Errorf("warming up: %w", err)
	}
	tr, err := startTracker(c, ns)
	if err != nil {
		return nil, err
	}
	defer tr.stop()

	run := &Run{Mode: mode, Settings: s, Round: round, N: opts.N, Load: loadavg()}
	var op *operator
	rawHTTP := newHTTPCounter()
	if mode == modeOperator {
		if op, err = startOperator(env, s, 0); err != nil {
			return nil, err
		}
		defer op.stop()
		op.waitQuiet(opts.Settle, time.Minute) // it takes over the warm-up MyDatabase
	}
	var httpBefore, writesBefore map[string]int
	var recsBefore map[types.NamespacedName]int
	if op != nil {
		httpBefore, writesBefore, recsBefore = op.http.snapshot(), op.writes.Writes(), op.recs.snapshot()
	}
	crBefore := readCR()
	throttleBefore, logBefore := theLog.snapshot()
	waitsBefore := theLog.waitSnapshot()

	relists0 := trackerRelists.Load()
	cpu0 := readCPU()
	t0 := time.Now()
	profiled := profileAPIServer(env, opts, fmt.Sprintf("%s-round%d.prof", mode, round))
	defer func() { <-profiled }()
	work := make(chan error, 1)
	go func() {
		if mode == modeOperator {
			work <- createDBs(ctx, c, ns, opts.N, s.Workers, 0)
			return
		}
		raw, err := harnessClient(env, rawHTTP)
		if err != nil {
			work <- err
			return
		}
		work <- rawConverge(ctx, raw, ns, opts.N, s.Workers, 0)
	}()
	ok := tr.waitConverged(opts.N, opts.Timeout)
	crConverged := readCR()
	run.TrackerRelists = trackerRelists.Load() - relists0
	cpu := readCPU().sub(cpu0)
	run.ProcessCPU, run.ControlPlaneCPU = cpu.self.Seconds(), cpu.children.Seconds()
	run.OtherCPU, run.StolenCPU = cpu.other().Seconds(), cpu.stolen.Seconds()
	if err := <-work; err != nil {
		return nil, err
	}
	run.Curve = tr.convergedTimes(t0)
	run.Converged = len(run.Curve)
	if run.Converged > 0 {
		run.Seconds = run.Curve[len(run.Curve)-1]
	}
	if !ok {
		return run, fmt.Errorf("%d of %d MyDatabases converged within %s; not: %s", run.Converged, opts.N, opts.Timeout, tr.pending(5))
	}
	if op == nil {
		run.Requests = diffRequests(nil, rawHTTP.snapshot())
		_, run.Stalled, run.Regressions = tr.counts()
		return run, nil
	}
	run.QuietSeconds = op.waitQuiet(opts.Settle, 2*time.Minute).Seconds()
	crAfter := readCR()
	throttleAfter, logAfter := theLog.snapshot()
	run.Requests = diffRequests(httpBefore, op.http.snapshot())
	run.WritesByKind = diffCounts(writesBefore, op.writes.Writes())
	run.ReconcilesAtConverged = crConverged.Reconciles - crBefore.Reconciles
	run.Reconciles = crAfter.Reconciles - crBefore.Reconciles
	run.ReconcileErrors = crAfter.ReconcileErrors - crBefore.ReconcileErrors
	d := op.recs.distribution(recsBefore)
	if len(d) > 0 {
		run.ReconcilesPerDB = []int{d[len(d)/2], d[len(d)*99/100], d[len(d)-1]}
	}
	run.ThrottleWaitSeconds = crAfter.ThrottleSum - crBefore.ThrottleSum
	run.ThrottledOver25ms = crAfter.ThrottleOver25 - crBefore.ThrottleOver25
	run.ThrottleLogLines = throttleAfter - throttleBefore
	run.ApplyLog = diffCounts(logBefore, logAfter)
	for k := range run.ApplyLog {
		if strings.HasPrefix(k, "throttled ") {
			delete(run.ApplyLog, k)
		}
	}
	run.ThrottleByRequest = map[string]float64{}
	for k, v := range theLog.waitSnapshot() {
		if d := v - waitsBefore[k]; d > 0 {
			run.ThrottleByRequest[strings.TrimPrefix(k, "throttled ")] = d
		}
	}
	_, run.Stalled, run.Regressions = tr.counts()
	return run, nil
}

// waitQuiet waits until the operator has made no request, started no
// reconcile and had an empty queue for quiet, and returns how long that
// took (at most max).
func (op *operator) waitQuiet(quiet, max time.Duration) time.Duration {
	start := time.Now()
	lastReq, lastRec := op.http.total.Load(), op.recs.total.Load()
	since := start
	for time.Since(start) < max {
		time.Sleep(100 * time.Millisecond)
		req, rec, cr := op.http.total.Load(), op.recs.total.Load(), readCR()
		if req != lastReq || rec != lastRec || cr.Depth > 0 || cr.Active > 0 {
			lastReq, lastRec, since = req, rec, time.Now()
			continue
		}
		if time.Since(since) >= quiet {
			return since.Sub(start)
		}
	}
	return max
}

// Steady is B3, B4 and B5: SteadyN converged MyDatabases.
type Steady struct {
	N               int           `json:"n"`
	Settings        Settings      `json:"settings"`
	Resync          time.Duration `json:"resync_period"`
	ConvergeSeconds float64       `json:"converge_seconds"`
	// The operator's requests, reconciles and client-side throttling wait
	// while converging.
	ConvergeRequests   requestStats `json:"converge_requests"`
	ConvergeReconciles float64      `json:"converge_reconciles"`
	ConvergeThrottle   float64      `json:"converge_throttle_wait_seconds"`
	// B4: live heap after GC with the operator synced and no MyDatabase,
	// and with N converged.
	HeapEmpty     uint64  `json:"heap_empty_bytes"`
	HeapHalf      uint64  `json:"heap_half_bytes"`
	HeapConverged uint64  `json:"heap_converged_bytes"`
	HeapPerDB     float64 `json:"heap_per_db_bytes"`
	// HeapPerDBMarginal: (heap with N - heap with N/2) / (N - N/2), what
	// one more MyDatabase costs; HeapPerDB also spreads what the operator
	// allocates once over the N.
	HeapPerDBMarginal float64 `json:"heap_per_db_marginal_bytes"`
	// B3: writes and requests (watches excluded) in QuietWindow seconds.
	QuietSeconds  float64      `json:"quiet_window_seconds"`
	QuietRequests requestStats `json:"quiet_requests"`
	QuietWrites   int          `json:"quiet_client_writes"`
	// B3: across at least one informer resync of every kind.
	ResyncSeconds    float64      `json:"resync_window_seconds"`
	ResyncReconciles float64      `json:"resync_reconciles"`
	ResyncRequests   requestStats `json:"resync_requests"`
	ResyncWrites     int          `json:"resync_client_writes"`
	// B4: unrelated objects in other namespaces.
	Unrelated        int          `json:"unrelated_objects"`
	UnrelatedBytes   int          `json:"unrelated_object_bytes"`
	UnrelatedSeconds float64      `json:"unrelated_create_seconds"`
	HeapBeforeUnrel  uint64       `json:"heap_before_unrelated_bytes"`
	HeapAfterUnrel   uint64       `json:"heap_after_unrelated_bytes"`
	UnrelatedGrowth  int64        `json:"heap_growth_unrelated_bytes"`
	UnrelatedReqs    requestStats `json:"unrelated_operator_requests"`
	// B3: restart. StartSeconds: manager start until informers synced;
	// ReverifySeconds: until every MyDatabase was reconciled and the queue
	// was empty.
	RestartStartSeconds    float64      `json:"restart_sync_seconds"`
	RestartReverifySeconds float64      `json:"restart_reverify_seconds"`
	RestartReconciled      int          `json:"restart_reconciled"`
	RestartReconciles      int64        `json:"restart_reconciles"`
	RestartRequests        requestStats `json:"restart_requests"`
	RestartWrites          int          `json:"restart_client_writes"`
	RestartSyncCPU         cpuSplit     `json:"restart_sync_cpu"`
	RestartPassesCPU       cpuSplit     `json:"restart_passes_cpu"`
	HeapAfterRestart       uint64       `json:"heap_after_restart_bytes"`
	HeapPerDBAfterRestart  float64      `json:"heap_per_db_after_restart_bytes"`
	// B5: spec edit until the status describes it (the generation on its Ready condition).
	Edits          int            `json:"edits"`
	EditRate       float64        `json:"edit_rate"`
	EditLatencyMs  []float64      `json:"edit_latency_ms"` // sorted
	EditMissed     int            `json:"edit_missed"`
	EditWrites     map[string]int `json:"edit_writes_by_kind"`
	EditThrottle   float64        `json:"edit_throttle_wait_seconds"`
	EditReconciles float64        `json:"edit_reconciles"`
}

// steadyRun measures B3, B4 and B5 on one control plane. The operator
// runs three times: the first converges SteadyN MyDatabases and is measured
// idle and against unrelated objects; the second is the restart, and takes
// the spec edits; the third runs with informer resync period Resync, for the
// resync window (a short period would otherwise keep every other
// measurement busy).
func steadyRun(opts Options) (*Steady, error) {
	ctx := context.Background()
	st := &Steady{N: opts.SteadyN, Settings: opts.SteadySettings, Resync: opts.Resync}
	log := opts.Log
	env, c, err := startBenchPlane()
	if err != nil {
		return nil, err
	}
	defer func() { _ = env.Stop() }()
	op, err := startOperator(env, opts.SteadySettings, 0)
	if err != nil {
		return nil, err
	}
	defer func() { op.stop() }()
	op.waitQuiet(time.Second, 10*time.Second)
	st.HeapEmpty = liveHeap()

	logf(log, "steady: creating %d MyDatabases, settings %s", opts.SteadyN, opts.SteadySettings)
	mark := op.mark()
	if st.ConvergeSeconds, st.HeapHalf, st.HeapConverged, err = fillAndMeasure(op, c, ns, opts.SteadyN, opts.SteadySettings.Workers, opts); err != nil {
		return st, err
	}
	st.ConvergeRequests, _, st.ConvergeReconciles = op.since(mark)
	st.ConvergeThrottle = readCR().ThrottleSum - mark.cr.ThrottleSum
	if opts.HeapProfile != "" {
		if err := writeHeapProfile(opts.HeapProfile); err != nil {
			return st, err
		}
	}
	st.HeapPerDB = float64(int64(st.HeapConverged)-int64(st.HeapEmpty)) / float64(opts.SteadyN)
	st.HeapPerDBMarginal = float64(int64(st.HeapConverged)-int64(st.HeapHalf)) / float64(opts.SteadyN-opts.SteadyN/2)
	logf(log, "  converged in %.1fs; heap %s empty, %s with %d, %s with %d: %.1f KiB each on average, %.1f KiB marginal",
		st.ConvergeSeconds, mib(st.HeapEmpty), mib(st.HeapHalf), opts.SteadyN/2, mib(st.HeapConverged), opts.SteadyN,
		st.HeapPerDB/1024, st.HeapPerDBMarginal/1024)

	// B3: nothing to do, nothing written.
	mark = op.mark()
	time.Sleep(opts.QuietWindow)
	st.QuietSeconds = opts.QuietWindow.Seconds()
	st.QuietRequests, st.QuietWrites, _ = op.since(mark)
	logf(log, "  idle %s: %d writes, %d event writes, %d reads", opts.QuietWindow, st.QuietRequests.Writes,
		st.QuietRequests.EventWrites, st.QuietRequests.LiveReads)

	// B4: unrelated objects in other namespaces.
	if opts.Unrelated > 0 {
		st.Unrelated, st.UnrelatedBytes = opts.Unrelated, opts.UnrelatedSize
		st.HeapBeforeUnrel = liveHeap()
		mark = op.mark()
		t := time.Now()
		if err := createUnrelated(ctx, env, opts.Unrelated, opts.UnrelatedSize); err != nil {
			return st, err
		}
		st.UnrelatedSeconds = time.Since(t).Seconds()
		op.waitQuiet(opts.Settle, time.Minute)
		st.UnrelatedReqs, _, _ = op.since(mark)
		st.HeapAfterUnrel = liveHeap()
		st.UnrelatedGrowth = int64(st.HeapAfterUnrel) - int64(st.HeapBeforeUnrel)
		logf(log, "  %d unrelated objects in %.0fs: heap %s -> %s", opts.Unrelated, st.UnrelatedSeconds,
			mib(st.HeapBeforeUnrel), mib(st.HeapAfterUnrel))
	}

	// B3: restart.
	op.stop()
	stopProfile := startCPUProfile(opts.SyncProfile, log)
	t, cpu0 := time.Now(), readCPU()
	if op, err = startOperator(env, opts.SteadySettings, 0); err != nil {
		return st, err
	}
	st.RestartStartSeconds = time.Since(t).Seconds()
	cpuSynced := readCPU()
	stopProfile()
	stopProfile = startCPUProfile(opts.RestartProfile, log)
	st.RestartReverifySeconds = op.waitReconciled(opts.SteadyN, t, 5*time.Minute).Seconds()
	cpuDone := readCPU()
	stopProfile()
	st.RestartSyncCPU, st.RestartPassesCPU = cpuSynced.sub(cpu0).split(), cpuDone.sub(cpuSynced).split()
	op.waitQuiet(opts.Settle, time.Minute)
	st.RestartReconciled = op.recs.keys()
	st.RestartReconciles = op.recs.total.Load()
	st.RestartRequests, st.RestartWrites, _ = op.since(opMark{})
	st.HeapAfterRestart = liveHeap()
	st.HeapPerDBAfterRestart = float64(int64(st.HeapAfterRestart)-int64(st.HeapEmpty)) / float64(opts.SteadyN)
	logf(log, "  restart: synced in %.1fs, %d reconciled in %.1fs, %d writes; heap %s",
		st.RestartStartSeconds, st.RestartReconciled, st.RestartReverifySeconds, st.RestartWrites, mib(st.HeapAfterRestart))

	// B5: spec edits.
	if opts.Edits > 0 {
		if err := edits(ctx, c, op, ns, opts, st); err != nil {
			return st, err
		}
	}

	if opts.Resync <= 0 {
		return st, nil
	}
	// B3: a resync of every informer (periods are jittered by ±10%).
	op.stop()
	t = time.Now()
	if op, err = startOperator(env, opts.SteadySettings, opts.Resync); err != nil {
		return st, err
	}
	op.waitReconciled(opts.SteadyN, t, 5*time.Minute)
	op.waitQuiet(opts.Settle, time.Minute)
	mark = op.mark()
	// Handlers are added to the informers a moment after these start, so
	// the first tick of an informer's resync timer (after 0.9 to 1.1
	// periods) can find no handler due yet; the second finds every one due.
	markedAt := time.Now()
	end := t.Add(opts.Resync * 23 / 10)
	if e := markedAt.Add(opts.Resync * 6 / 5); e.After(end) {
		end = e // the start-up took longer than the window
	}
	time.Sleep(time.Until(end))
	st.ResyncSeconds = time.Since(markedAt).Seconds()
	st.ResyncRequests, st.ResyncWrites, st.ResyncReconciles = op.since(mark)
	logf(log, "  resync window %.0fs: %.0f reconciles, %d writes", st.ResyncSeconds, st.ResyncReconciles, st.ResyncWrites)
	return st, nil
}

// fillAndMeasure creates n MyDatabases in two halves and measures the live
// heap after each, the operator idle: the second half costs only what each
// MyDatabase costs, the first also what the operator allocates once (type
// caches of the encoders, the first objects of each informer, ...). It
// returns the time both halves took to converge.
func fillAndMeasure(op *operator, c client.WithWatch, ns string, n, workers int, opts Options) (seconds float64, half, full uint64, err error) {
	for _, batch := range [][2]int{{0, n / 2}, {n / 2, n}} {
		t, err := createAndConverge(c, ns, batch[0], batch[1], workers, opts.Timeout)
		if err != nil {
			return seconds, half, full, err
		}
		seconds += t
		op.waitQuiet(opts.Settle, 5*time.Minute)
		if batch[0] == 0 {
			half = liveHeap()
		}
	}
	return seconds, half, liveHeap(), nil
}

// createAndConverge creates the MyDatabases [from, to) with workers
// goroutines and waits until every one of [0, to) converged, with a tracker
// that is gone when it returns.
func createAndConverge(c client.WithWatch, ns string, from, to, workers int, timeout time.Duration) (float64, error) {
	tr, err := startTracker(c, ns)
	if err != nil {
		return 0, err
	}
	defer tr.stop()
	t0 := time.Now()
	err = forEach(context.Background(), to-from, workers, func(ctx context.Context, i int) error {
		return retry(ctx, func() error { return c.Create(ctx, newDB(ns, dbName(from+i), 0)) })
	})
	if err != nil {
		return 0, err
	}
	if !tr.waitConverged(to, timeout) {
		got, _, _ := tr.counts()
		return 0, fmt.Errorf("%d of %d MyDatabases converged; not: %s", got, to, tr.pending(5))
	}
	times := tr.convergedTimes(t0)
	return times[len(times)-1], nil
}

// heapRun measures the heap per MyDatabase with settings s.
func heapRun(opts Options, s Settings) (*HeapRun, error) {
	env, c, err := startBenchPlane()
	if err != nil {
		return nil, err
	}
	defer func() { _ = env.Stop() }()
	op, err := startOperator(env, s, 0)
	if err != nil {
		return nil, err
	}
	defer op.stop()
	op.waitQuiet(time.Second, 10*time.Second)
	h := &HeapRun{Settings: s, N: opts.SteadyN, HeapEmpty: liveHeap()}
	if h.ConvergeSeconds, h.HeapHalf, h.HeapConverged, err = fillAndMeasure(op, c, ns, opts.SteadyN, s.Workers, opts); err != nil {
		return h, err
	}
	h.HeapPerDB = float64(int64(h.HeapConverged)-int64(h.HeapEmpty)) / float64(opts.SteadyN)
	h.HeapPerDBMarginal = float64(int64(h.HeapConverged)-int64(h.HeapHalf)) / float64(opts.SteadyN-opts.SteadyN/2)
	return h, nil
}

// waitReconciled waits until n MyDatabases were reconciled and the queue
// is empty, and returns the time since t.
func (op *operator) waitReconciled(n int, t time.Time, timeout time.Duration) time.Duration {
	for time.Since(t) < timeout {
		if op.recs.keys() >= n {
			if cr := readCR(); cr.Depth == 0 && cr.Active == 0 {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(t)
}

// opMark is a point in the operator's counters.
type opMark struct {
	http   map[string]int
	writes int
	byKind map[string]int
	cr     crSnapshot
}

func (op *operator) mark() opMark {
	return opMark{http: op.http.snapshot(), writes: op.writes.Total(), byKind: op.writes.Writes(), cr: readCR()}
}

// since returns the requests, client writes and reconciles since m.
func (op *operator) since(m opMark) (requestStats, int, float64) {
	cr := readCR()
	return diffRequests(m.http, op.http.snapshot()), op.writes.Total() - m.writes, cr.Reconciles - m.cr.Reconciles
}

// createUnrelated creates n Secrets and ConfigMaps (half each) of size
// bytes in ten namespaces of their own, without the operator's labels, with
// a client of its own that is dropped afterwards.
func createUnrelated(ctx context.Context, env *controlPlane, n, size int) error {
	c, err := harnessClient(env, nil)
	if err != nil {
		return err
	}
	const namespaces = 10
	for i := range namespaces {
		if err := createNamespace(ctx, c, fmt.Sprintf("unrelated-%d", i)); err != nil {
			return err
		}
	}
	return forEach(ctx, n, 8, func(ctx context.Context, i int) error {
		meta := metav1.ObjectMeta{Namespace: fmt.Sprintf("unrelated-%d", i%namespaces), Name: fmt.Sprintf("obj-%05d", i),
			Labels: map[string]string{"app.kubernetes.io/managed-by": "someone-else"}}
		data := make([]byte, size)
		_, _ = rand.Read(data)
		var obj client.Object
		if i%2 == 0 {
			obj = &corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"blob": data}}
		} else {
			const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
			for j := range data {
				data[j] = letters[int(data[j])%len(letters)]
			}
			obj = &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"blob": string(data)}}
		}
		return retry(ctx, func() error { return c.Create(ctx, obj) })
	})
}

// edits changes spec.parameters of Edits MyDatabases at EditRate per second
// and measures, for each, the time from sending the patch to the watch event
// in which the status describes the new generation (Ready condition).
func edits(ctx context.Context, c client.WithWatch, op *operator, ns string, opts Options, st *Steady) error {
	tr, err := startTracker(c, ns)
	if err != nil {
		return err
	}
	defer tr.stop()
	if !tr.waitConverged(opts.SteadyN, 5*time.Minute) { // a new tracker reads every object first
		return fmt.Errorf("the tracker did not see the %d MyDatabases converged", opts.SteadyN)
	}
	n := min(opts.Edits, opts.SteadyN)
	st.Edits, st.EditRate = n, opts.EditRate
	logf(opts.Log, "  %d spec edits at %.0f/s", n, opts.EditRate)
	mark := op.mark()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	tick := time.NewTicker(time.Duration(float64(time.Second) / opts.EditRate))
	defer tick.Stop()
	stride := max(1, opts.SteadyN/n)
	for i := range n {
		<-tick.C
		name := dbName((i * stride) % opts.SteadyN)
		wg.Go(func() {
			db := &databasev1alpha1.MyDatabase{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
			patch := client.RawPatch(types.MergePatchType,
				[]byte(fmt.Sprintf(`{"spec":{"parameters":{"work_mem":"%dMB"}}}`, 8+i%64)))
			sent := time.Now()
			if err := c.Patch(ctx, db, patch); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			at, ok := tr.waitObserved(name, db.Generation, 30*time.Second)
			mu.Lock()
			defer mu.Unlock()
			if !ok {
				st.EditMissed++
				return
			}
			st.EditLatencyMs = append(st.EditLatencyMs, float64(at.Sub(sent).Microseconds())/1000)
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("%d edits failed, first: %w", len(errs), errs[0])
	}
	op.waitQuiet(opts.Settle, time.Minute)
	cr := readCR()
	st.EditReconciles = cr.Reconciles - mark.cr.Reconciles
	st.EditThrottle = cr.ThrottleSum - mark.cr.ThrottleSum
	st.EditWrites = diffCounts(mark.byKind, op.writes.Writes())
	sortFloats(st.EditLatencyMs)
	logf(opts.Log, "  edits: p50 %.0f ms, p99 %.0f ms, max %.0f ms, %d missed", percentile(st.EditLatencyMs, 50),
		percentile(st.EditLatencyMs, 99), percentile(st.EditLatencyMs, 100), st.EditMissed)
	return nil
}

func diffCounts(before, after map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func sortFloats(v []float64) { slices.Sort(v) }

// percentile is the nearest-rank percentile of sorted v.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// startCPUProfile starts a CPU profile into path, if one is named, and
// returns what stops it; a profile that cannot start is logged and skipped.
func startCPUProfile(path string, log io.Writer) (stop func()) {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		if err = pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
		}
	}
	if err != nil {
		logf(log, "  no CPU profile: %v", err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}

// profileAPIServer fetches a CPU profile of kube-apiserver (its
// /debug/pprof, open to envtest's admin user) over the next
// opts.APIServerProfileSeconds into a file of opts.APIServerProfiles, if
// that is set; the channel closes when it is written or has failed (logged).
func profileAPIServer(env *controlPlane, opts Options, name string) <-chan struct{} {
	done := make(chan struct{})
	if opts.APIServerProfiles == "" {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		if err := fetchProfile(env, opts.APIServerProfileSeconds, filepath.Join(opts.APIServerProfiles, name)); err != nil {
			logf(opts.Log, "  no kube-apiserver profile: %v", err)
		}
	}()
	return done
}

func fetchProfile(env *controlPlane, seconds int, path string) error {
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		return err
	}
	resp, err := hc.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimSuffix(env.Config.Host, "/"), seconds))
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /debug/pprof/profile: %s", resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func numCPU() int { return runtime.NumCPU() }

func goVersion() string { return runtime.Version() }

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func logf(w io.Writer, format string, args ...any) {
	_, _ = fmt.Fprintf(w, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

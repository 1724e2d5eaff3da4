package bench

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/controller/mydatabase"
	"example.com/myoperator/internal/metrics"
	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
)

// Settings are the operator's tunables, as cmd/main.go's flags --workers,
// --kube-api-qps and --kube-api-burst.
type Settings struct {
	Workers int     `json:"workers"`
	QPS     float64 `json:"qps"` // <= 0: no client-side rate limit
	Burst   int     `json:"burst"`
	// CachedReads is an experiment, not a setting of cmd/main.go: the
	// reconciler's APIReader answers from the informer cache, which shows
	// what its reads around the cache cost. Never use it to decide
	// anything but "what if those reads were free".
	CachedReads bool `json:"cached_reads,omitempty"`
}

// DefaultSettings are cmd/main.go's flag defaults when this was written;
// ParseSettings("default") reads the current ones from its source.
var DefaultSettings = Settings{Workers: 4, QPS: 50, Burst: 100}

func (s Settings) String() string {
	v := fmt.Sprintf("%d/%g/%d", s.Workers, s.QPS, s.Burst)
	if s.QPS <= 0 {
		v = fmt.Sprintf("%d/off", s.Workers)
	}
	if s.CachedReads {
		v += "+cachedreads"
	}
	return v
}

// Flags renders the settings as cmd/main.go flags.
func (s Settings) Flags() string {
	qps := s.QPS
	if qps <= 0 {
		qps = -1
	}
	v := fmt.Sprintf("--workers=%d --kube-api-qps=%g --kube-api-burst=%d", s.Workers, qps, s.Burst)
	if s.CachedReads {
		v += " (experiment: APIReader reads the cache)"
	}
	return v
}

// ParseSettings reads "workers/qps/burst" (e.g. 4/50/100), "workers/off"
// or "default" (cmd/main.go's defaults), optionally followed by the
// experiment "+cachedreads".
func ParseSettings(v string) (Settings, error) {
	var s Settings
	v, experiments, _ := strings.Cut(strings.TrimSpace(v), "+")
	for e := range strings.SplitSeq(experiments, "+") {
		switch e {
		case "":
		case "cachedreads":
			s.CachedReads = true
		default:
			return s, fmt.Errorf("settings %q: unknown experiment %q", v, e)
		}
	}
	if v == "default" {
		d, err := CmdMainDefaults()
		d.CachedReads = s.CachedReads
		return d, err
	}
	parts := strings.Split(v, "/")
	var err error
	if s.Workers, err = strconv.Atoi(parts[0]); err != nil || s.Workers < 1 {
		return s, fmt.Errorf("settings %q: workers must be a positive integer", v)
	}
	switch {
	case len(parts) == 2 && parts[1] == "off":
		return s, nil
	case len(parts) == 3:
		if s.QPS, err = strconv.ParseFloat(parts[1], 64); err != nil {
			return s, fmt.Errorf("settings %q: %w", v, err)
		}
		if s.Burst, err = strconv.Atoi(parts[2]); err != nil {
			return s, fmt.Errorf("settings %q: %w", v, err)
		}
		return s, nil
	}
	return s, fmt.Errorf("settings %q: want workers/qps/burst (4/50/100) or workers/off", v)
}

// operator is the reconciler running in a manager in this process, wired as
// in cmd/main.go, with probes: its writes by verb and kind, every HTTP
// request it makes, and the reconciles it starts.
type operator struct {
	settings Settings
	writes   *testenv.CountingClient
	http     *httpCounter
	recs     *reconcileLog
	mgr      ctrl.Manager
	cancel   context.CancelFunc
	done     chan error
}

// startOperator starts the operator and returns once its informers are
// synced. syncPeriod 0 keeps controller-runtime's default (10 h).
func startOperator(env *controlPlane, s Settings, syncPeriod time.Duration) (*operator, error) {
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = -1, 0
	cfg.DisableCompression = true // cmd/main.go's default, --kube-api-compression=false
	if s.QPS > 0 {
		cfg.QPS, cfg.Burst = float32(s.QPS), s.Burst
	}
	op := &operator{settings: s, http: newHTTPCounter(), recs: newReconcileLog(), done: make(chan error, 1)}
	cfg.WrapTransport = op.http.wrap

	cacheOpts := mydatabase.CacheOptions(cfg)
	if syncPeriod > 0 {
		cacheOpts.SyncPeriod = &syncPeriod
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 env.Scheme,
		Cache:                  cacheOpts,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// The same controller name is registered again on every restart.
		Controller: config.Controller{SkipNameValidation: new(true)},
	})
	if err != nil {
		return nil, err
	}
	op.mgr = mgr
	op.writes = testenv.NewCountingClient(mgr.GetClient())
	apiReader := mgr.GetAPIReader()
	if s.CachedReads {
		apiReader = mgr.GetClient()
	}
	r := &mydatabase.Reconciler{
		Client:      &probeClient{CountingClient: op.writes, recs: op.recs},
		APIReader:   apiReader,
		Recorder:    mgr.GetEventRecorder("mydatabase-controller"),
		NewPassword: specs.RandomPassword,
		Clock:       clock.RealClock{},
		// A registry of its own: the gauge is registered once per start.
		Metrics: metrics.New(prometheus.NewRegistry()),
	}
	if err := r.SetupWithManager(mgr, s.Workers); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	op.cancel = cancel
	go func() { op.done <- mgr.Start(ctx) }()

	syncCtx, syncCancel := context.WithTimeout(ctx, 2*time.Minute)
	defer syncCancel()
	for _, obj := range []client.Object{&databasev1alpha1.MyDatabase{}, &appsv1.StatefulSet{}, &corev1.Service{},
		&corev1.ConfigMap{}, &policyv1.PodDisruptionBudget{}, &corev1.Secret{}, &corev1.Pod{}} {
		if _, err := mgr.GetCache().GetInformer(syncCtx, obj); err != nil {
			op.stop()
			return nil, fmt.Errorf("waiting for the %T informer: %w", obj, err)
		}
	}
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		op.stop()
		return nil, fmt.Errorf("the operator's cache did not sync")
	}
	return op, nil
}

// stop stops the manager and waits for it.
func (op *operator) stop() {
	op.cancel()
	select {
	case <-op.done:
	case <-time.After(time.Minute):
	}
}

// probeClient counts the operator's writes (testenv.CountingClient) and
// notes every reconcile: each one starts by reading its MyDatabase from the
// cache (and may read it again), under the reconcile ID controller-runtime
// gives it.
type probeClient struct {
	*testenv.CountingClient
	recs *reconcileLog
}

func (c *probeClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*databasev1alpha1.MyDatabase); ok {
		c.recs.add(key, controller.ReconcileIDFromContext(ctx))
	}
	return c.CountingClient.Get(ctx, key, obj, opts...)
}

// reconcileLog counts reconciles per MyDatabase: the reconcile IDs its
// reads were made under. controller-runtime never reconciles one key in
// two workers at once, so a read under an ID other than the key's last is
// a new reconcile.
type reconcileLog struct {
	mu     sync.Mutex
	perKey map[types.NamespacedName]int
	last   map[types.NamespacedName]types.UID
	total  atomic.Int64
}

func newReconcileLog() *reconcileLog {
	return &reconcileLog{perKey: map[types.NamespacedName]int{}, last: map[types.NamespacedName]types.UID{}}
}

func (l *reconcileLog) add(key types.NamespacedName, id types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if id != "" && l.last[key] == id {
		return
	}
	l.last[key] = id
	l.perKey[key]++
	l.total.Add(1)
}

// keys is how many distinct MyDatabases were reconciled.
func (l *reconcileLog) keys() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.perKey)
}

// distribution returns the per-MyDatabase reconcile counts since before,
// sorted.
func (l *reconcileLog) distribution(before map[types.NamespacedName]int) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]int, 0, len(l.perKey))
	for k, n := range l.perKey {
		if n -= before[k]; n > 0 {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

func (l *reconcileLog) snapshot() map[types.NamespacedName]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.perKey)
}

// httpCounter counts every request of the operator at the HTTP level, by
// verb, resource and response code ("PATCH mydatabases/status 409").
type httpCounter struct {
	mu     sync.Mutex
	counts map[string]int
	total  atomic.Int64 // requests other than watches
}

func newHTTPCounter() *httpCounter { return &httpCounter{counts: map[string]int{}} }

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (h *httpCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		verb, resource := classify(req)
		if verb != verbWatch {
			h.total.Add(1)
		}
		resp, err := rt.RoundTrip(req)
		code := "error"
		if err == nil {
			code = strconv.Itoa(resp.StatusCode)
		}
		h.mu.Lock()
		h.counts[verb+" "+resource+" "+code]++
		h.mu.Unlock()
		return resp, err
	})
}

func (h *httpCounter) snapshot() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.counts)
}

// classify names an API request: its verb (GET, LIST, WATCH, CREATE, APPLY,
// PATCH, UPDATE, DELETE) and resource (with subresource).
func classify(req *http.Request) (verb, resource string) {
	segs := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	var tail []string // after the group and version
	switch {
	case len(segs) >= 2 && segs[0] == "api":
		tail = segs[2:]
	case len(segs) >= 3 && segs[0] == "apis":
		tail = segs[3:]
	}
	if len(tail) >= 3 && tail[0] == "namespaces" {
		tail = tail[2:]
	}
	named := len(tail) >= 2
	switch {
	case len(tail) == 0:
		resource = "discovery"
	case len(tail) >= 3:
		resource = tail[0] + "/" + tail[2]
	default:
		resource = tail[0]
	}
	switch req.Method {
	case http.MethodGet:
		switch {
		case req.URL.Query().Get("watch") == "true":
			verb = verbWatch
		case named || len(tail) == 0:
			verb = "GET"
		default:
			verb = "LIST"
		}
	case http.MethodPost:
		verb = "CREATE"
	case http.MethodPut:
		verb = "UPDATE"
	case http.MethodPatch:
		verb = "PATCH"
		if strings.HasPrefix(req.Header.Get("Content-Type"), "application/apply-patch") {
			verb = "APPLY"
		}
	case http.MethodDelete:
		verb = "DELETE"
	default:
		verb = req.Method
	}
	return verb, resource
}

const verbWatch = "WATCH"

// isWrite is true for the verbs that change an object.
func isWrite(verb string) bool {
	switch verb {
	case "CREATE", "UPDATE", "PATCH", "APPLY", "DELETE":
		return true
	}
	return false
}

// requestStats sums an HTTP count delta.
type requestStats struct {
	Writes        int            `json:"writes"`         // object writes, events excluded
	EventWrites   int            `json:"event_writes"`   // events.k8s.io creates and patches
	LiveReads     int            `json:"live_reads"`     // GET/LIST around the cache
	Conflicts     int            `json:"conflicts"`      // 409 responses to writes
	OtherErrors   int            `json:"other_errors"`   // non-2xx, non-409 responses and transport errors
	ByRequest     map[string]int `json:"by_request"`     // "VERB resource code"
	WritesByVerb  map[string]int `json:"writes_by_verb"` // "VERB resource", events excluded
	ThrottleWaits float64        `json:"-"`
}

func diffRequests(before, after map[string]int) requestStats {
	st := requestStats{ByRequest: map[string]int{}, WritesByVerb: map[string]int{}}
	for k, v := range after {
		n := v - before[k]
		if n == 0 {
			continue
		}
		st.ByRequest[k] = n
		f := strings.Fields(k)
		verb, resource, code := f[0], f[1], f[2]
		switch {
		case verb == verbWatch || resource == "discovery":
		case isWrite(verb) && resource == "events":
			st.EventWrites += n
		case isWrite(verb):
			st.Writes += n
			st.WritesByVerb[verb+" "+resource] += n
			if code == "409" {
				st.Conflicts += n
			}
		default:
			st.LiveReads += n
		}
		if code != "409" && (code == "error" || code[0] != '2') {
			st.OtherErrors += n
		}
	}
	return st
}

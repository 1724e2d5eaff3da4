package bench

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

const controllerName = "mydatabase"

// crSnapshot is what controller-runtime's metrics registry says about the
// mydatabase controller and the client-side rate limiter.
type crSnapshot struct {
	Reconciles      float64 // controller_runtime_reconcile_total, all results
	ReconcileErrors float64 // controller_runtime_reconcile_errors_total
	Depth           float64 // workqueue_depth
	Active          float64 // controller_runtime_active_workers
	// rest_client_rate_limiter_duration_seconds: only rate-limited clients
	// observe it, and the operator's is the only one in this process.
	ThrottleCount  uint64
	ThrottleSum    float64
	ThrottleOver25 uint64 // waits longer than 25 ms
	// workqueue_queue_duration_seconds and
	// controller_runtime_reconcile_time_seconds of the mydatabase
	// controller: how long requests waited in the queue, and reconciles took.
	QueueWaitSum, ReconcileTimeSum     float64
	QueueWaitCount, ReconcileTimeCount uint64
}

var enableRateLimiterMetric sync.Once

func readCR() crSnapshot {
	enableRateLimiterMetric.Do(func() { crmetrics.RegisterRESTClientMetrics(crmetrics.MetricRateLimiterLatency) })
	fams, err := crmetrics.Registry.Gather()
	if err != nil {
		panic(err)
	}
	var s crSnapshot
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "controller_runtime_reconcile_total":
				if label(m, "controller") == controllerName {
					s.Reconciles += m.GetCounter().GetValue()
				}
			case "controller_runtime_reconcile_errors_total":
				if label(m, "controller") == controllerName {
					s.ReconcileErrors += m.GetCounter().GetValue()
				}
			case "workqueue_depth":
				if label(m, "name") == controllerName {
					s.Depth += m.GetGauge().GetValue()
				}
			case "controller_runtime_active_workers":
				if label(m, "controller") == controllerName {
					s.Active += m.GetGauge().GetValue()
				}
			case "workqueue_queue_duration_seconds":
				if label(m, "name") == controllerName {
					s.QueueWaitSum += m.GetHistogram().GetSampleSum()
					s.QueueWaitCount += m.GetHistogram().GetSampleCount()
				}
			case "controller_runtime_reconcile_time_seconds":
				if label(m, "controller") == controllerName {
					s.ReconcileTimeSum += m.GetHistogram().GetSampleSum()
					s.ReconcileTimeCount += m.GetHistogram().GetSampleCount()
				}
			case "rest_client_rate_limiter_duration_seconds":
				h := m.GetHistogram()
				s.ThrottleCount += h.GetSampleCount()
				s.ThrottleSum += h.GetSampleSum()
				var under uint64
				for _, b := range h.GetBucket() {
					if b.GetUpperBound() == 0.025 {
						under = b.GetCumulativeCount()
					}
				}
				s.ThrottleOver25 += h.GetSampleCount() - under
			}
		}
	}
	return s
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// liveHeap is the live heap after two full collections
// (runtime/metrics /gc/heap/live:bytes).
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// logCounter is the logger of the operator (controller-runtime) and of
// client-go (klog, at -v=3): it counts client-side throttling messages
// ("Waited before sending request", logged for waits over 50 ms), reconcile
// errors and the reconciler's apply messages, and prints errors.
type logCounter struct {
	mu       sync.Mutex
	counts   map[string]int
	waits    map[string]float64 // seconds waited, by request, waits over 50 ms
	throttle atomic.Int64
	errors   atomic.Int64
	out      io.Writer
	printed  int
}

var theLog = &logCounter{counts: map[string]int{}, waits: map[string]float64{}, out: io.Discard}

var installLogOnce sync.Once

// installLogger routes controller-runtime's and klog's logs to theLog.
func installLogger(out io.Writer) {
	theLog.mu.Lock()
	theLog.out = out
	theLog.mu.Unlock()
	installLogOnce.Do(func() {
		l := logr.New(theLog)
		ctrl.SetLogger(l)
		klog.SetLogger(l)
		fs := flag.NewFlagSet("klog", flag.ContinueOnError)
		klog.InitFlags(fs)
		_ = fs.Set("v", "3")
	})
}

func (l *logCounter) snapshot() (throttle int64, counts map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.throttle.Load(), maps.Clone(l.counts)
}

func (l *logCounter) waitSnapshot() map[string]float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.waits)
}

func (l *logCounter) Init(logr.RuntimeInfo)  {}
func (l *logCounter) Enabled(level int) bool { return level <= 3 }
func (l *logCounter) Info(level int, msg string, kv ...any) {
	switch msg {
	case "Waited before sending request":
		if level != 3 {
			return // the throttled logger's repeat of a wait over 1 s
		}
		l.throttle.Add(1)
		var delay time.Duration
		req := &http.Request{URL: &url.URL{}}
		for i := 0; i+1 < len(kv); i += 2 {
			switch kv[i] {
			case "delay":
				delay, _ = kv[i+1].(time.Duration)
			case "verb":
				req.Method, _ = kv[i+1].(string)
			case "URL":
				if u, ok := kv[i+1].(*url.URL); ok {
					req.URL = u
				}
			}
		}
		verb, resource := classify(req)
		l.mu.Lock()
		l.waits["throttled "+verb+" "+resource] += delay.Seconds()
		l.counts["throttled "+verb+" "+resource]++
		l.mu.Unlock()
	case "Applied", "Spec changed", "Drift":
		var key strings.Builder
		key.WriteString(msg)
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == "kind" || kv[i] == "field" {
				fmt.Fprintf(&key, " %v", kv[i+1])
			}
		}
		l.mu.Lock()
		l.counts[key.String()]++
		l.mu.Unlock()
	}
}

func (l *logCounter) Error(err error, msg string, kv ...any) {
	l.errors.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts["error: "+msg]++
	if l.printed < 20 {
		l.printed++
		_, _ = fmt.Fprintf(l.out, "operator error: %s: %v %s\n", msg, err, kvString(kv))
	}
}

func kvString(kv []any) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		fmt.Fprintf(&b, "%v=%v ", kv[i], kv[i+1])
	}
	return b.String()
}

func (l *logCounter) WithValues(...any) logr.LogSink { return l }
func (l *logCounter) WithName(string) logr.LogSink   { return l }

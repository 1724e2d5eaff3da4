package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// The children every MyDatabase with one server has, by kind and name
// suffix: two Secrets, the ConfigMap, two Services and the StatefulSet.
var childSuffixes = map[string][]string{
	kindSecret:      {"-credentials", "-replication-tls"},
	kindConfigMap:   {"-config"},
	kindService:     {"-headless", "-rw"},
	kindStatefulSet: {""},
}

const (
	kindSecret      = "Secret"
	kindConfigMap   = "ConfigMap"
	kindService     = "Service"
	kindStatefulSet = "StatefulSet"
)

const allChildren = 1<<6 - 1

func childBit(kind, name string) (db string, bit uint8, ok bool) {
	i := 0
	for _, k := range []string{kindSecret, kindConfigMap, kindService, kindStatefulSet} {
		for _, suffix := range childSuffixes[k] {
			if k == kind && strings.HasSuffix(name, suffix) {
				return strings.TrimSuffix(name, suffix), 1 << i, true
			}
			i++
		}
	}
	return "", 0, false
}

// tracker follows the MyDatabases of one namespace and their children
// through watches of its own (children as metadata only) and notes when
// each MyDatabase converges: every child exists and the status (its Ready condition)
// equals metadata.generation, in a phase other than Stalled. Times are
// those at which the watch events arrive here.
type tracker struct {
	mu          sync.Mutex
	t0          time.Time
	dbs         map[string]*dbState
	converged   int
	stalled     map[string]bool // ever seen Stalled
	regressions int             // converged, then not any more
	changed     chan struct{}
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	// relist reads the current state with lists, in case a watch event
	// was lost.
	relist func() error
}

type dbState struct {
	gen, obsGen int64
	phase       databasev1alpha1.Phase
	children    uint8
	conv        bool
	convAt      time.Time
	// observed notes when the status first described each generation.
	observed []genSeen
}

type genSeen struct {
	gen int64
	at  time.Time
}

func (t *tracker) state(name string) *dbState {
	s := t.dbs[name]
	if s == nil {
		s = &dbState{}
		t.dbs[name] = s
	}
	return s
}

// startTracker starts following namespace ns. Like a reflector, it lists
// each kind, then watches from the list's resource version: the events a
// watch begins with when given none are the current objects in no order,
// so their resource versions are no place to resume a watch from (a watch
// closed among them and resumed from the last would skip the objects not
// yet sent). It returns once every watch is established, so nothing that
// happens afterwards is missed.
func startTracker(c client.WithWatch, ns string) (*tracker, error) {
	ctx, cancel := context.WithCancel(context.Background())
	t := &tracker{t0: time.Now(), dbs: map[string]*dbState{}, stalled: map[string]bool{},
		changed: make(chan struct{}, 1), cancel: cancel}
	managed := client.MatchingLabels{databasev1alpha1.LabelManagedBy: databasev1alpha1.ManagedBy}
	children := []schema.GroupVersionKind{
		{Version: "v1", Kind: kindSecret}, {Version: "v1", Kind: kindConfigMap},
		{Version: "v1", Kind: kindService}, {Group: "apps", Version: "v1", Kind: kindStatefulSet},
	}
	kinds := make([]*trackedKind, 0, 1+len(children))
	kinds = append(kinds, &trackedKind{name: "MyDatabase", opts: []client.ListOption{client.InNamespace(ns)},
		newList: func() client.ObjectList { return &databasev1alpha1.MyDatabaseList{} }})
	for _, gvk := range children {
		kinds = append(kinds, &trackedKind{name: gvk.Kind, opts: []client.ListOption{client.InNamespace(ns), managed},
			newList: func() client.ObjectList {
				l := &metav1.PartialObjectMetadataList{}
				l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
				return l
			}})
	}
	t.relist = func() error {
		for _, k := range kinds {
			if _, err := t.list(ctx, c, k); err != nil {
				return err
			}
		}
		return nil
	}
	for _, k := range kinds {
		rv, err := t.list(ctx, c, k)
		if err != nil {
			cancel()
			return nil, err
		}
		w, err := k.watch(ctx, c, rv)
		if err != nil {
			cancel()
			return nil, err
		}
		t.wg.Add(1)
		go t.follow(ctx, c, k, w, rv)
	}
	return t, nil
}

// trackedKind is one kind a tracker lists and watches.
type trackedKind struct {
	name    string
	opts    []client.ListOption
	newList func() client.ObjectList
}

func (k *trackedKind) watch(ctx context.Context, c client.WithWatch, rv string) (watch.Interface, error) {
	return c.Watch(ctx, k.newList(), append(slices.Clone(k.opts), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})...)
}

// list observes every object of kind k and returns the list's resource
// version, from which a watch misses nothing.
func (t *tracker) list(ctx context.Context, c client.WithWatch, k *trackedKind) (string, error) {
	list := k.newList()
	if err := c.List(ctx, list, k.opts...); err != nil {
		return "", err
	}
	err := meta.EachListItem(list, func(o runtime.Object) error {
		t.observe(k.name, o.(client.Object))
		return nil
	})
	return list.GetResourceVersion(), err
}

// follow consumes the watch of kind k, resuming it from the last event's
// resource version when the server ends it, and from a new list when that
// version has expired.
func (t *tracker) follow(ctx context.Context, c client.WithWatch, k *trackedKind, w watch.Interface, rv string) {
	defer t.wg.Done()
	for {
		expired := false
		for ev := range w.ResultChan() {
			switch ev.Type {
			case watch.Added, watch.Modified:
				obj := ev.Object.(client.Object)
				rv = obj.GetResourceVersion()
				t.observe(k.name, obj)
			case watch.Error:
				expired = true
			}
		}
		w.Stop()
		for ctx.Err() == nil {
			var err error
			if expired {
				if rv, err = t.list(ctx, c, k); err != nil {
					time.Sleep(100 * time.Millisecond)
					continue
				}
			}
			if w, err = k.watch(ctx, c, rv); err == nil {
				break
			}
			expired = true
			time.Sleep(100 * time.Millisecond)
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// passedGeneration is the generation the operator's last pass described:
// every condition carries it. status.observedGeneration moves only once a
// generation is Ready or Stalled, which no MyDatabase reaches on a control
// plane without a StatefulSet controller.
func passedGeneration(db *databasev1alpha1.MyDatabase) int64 {
	if c := meta.FindStatusCondition(db.Status.Conditions, databasev1alpha1.ConditionReady); c != nil {
		return c.ObservedGeneration
	}
	return 0
}

func (t *tracker) observe(kind string, obj client.Object) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	var s *dbState
	switch o := obj.(type) {
	case *databasev1alpha1.MyDatabase:
		s = t.state(o.Name)
		s.gen, s.obsGen, s.phase = o.Generation, passedGeneration(o), o.Status.Phase
		if n := len(s.observed); n == 0 || s.observed[n-1].gen < s.obsGen {
			s.observed = append(s.observed, genSeen{s.obsGen, now})
		}
		if s.phase == databasev1alpha1.PhaseStalled {
			t.stalled[o.Name] = true
		}
	case *metav1.PartialObjectMetadata:
		db, bit, ok := childBit(kind, o.Name)
		if !ok {
			return
		}
		s = t.state(db)
		s.children |= bit
	default:
		return
	}
	conv := s.children == allChildren && s.gen > 0 && s.obsGen == s.gen && s.phase != databasev1alpha1.PhaseStalled
	switch {
	case conv && !s.conv:
		s.conv, s.convAt = true, now
		t.converged++
	case !conv && s.conv:
		s.conv = false
		t.converged--
		t.regressions++
	}
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

// waitConverged waits until n MyDatabases are converged, or the timeout.
// When nothing changes for a while although some have not converged, it
// reads the state with lists once, in case the watches missed an event.
func (t *tracker) waitConverged(n int, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for {
		t.mu.Lock()
		done := t.converged >= n
		t.mu.Unlock()
		if done {
			return true
		}
		select {
		case <-t.changed:
		case <-time.After(stuckAfter):
			trackerRelists.Add(1)
			logf(progress, "tracker: no watch event for %s with %d of %d converged (not: %s); listing", stuckAfter,
				t.convergedCount(), n, t.pending(3))
			_ = t.relist()
		case <-deadline:
			return false
		}
	}
}

// trackerRelists counts the relists of every tracker: the report says so
// when there were any.
var trackerRelists atomic.Int64

// stuckAfter is how long waitConverged waits without any watch event
// before it lists. While MyDatabases converge, events arrive many times a
// second.
const stuckAfter = 15 * time.Second

// progress receives the harness's progress lines (Options.Log).
var progress io.Writer = io.Discard

func (t *tracker) convergedCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.converged
}

// convergedTimes returns, sorted, how long after since each converged
// MyDatabase took to converge (for the last time).
func (t *tracker) convergedTimes(since time.Time) []float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []float64
	for _, s := range t.dbs {
		if s.conv {
			out = append(out, s.convAt.Sub(since).Seconds())
		}
	}
	sortFloats(out)
	return out
}

// pending describes up to max MyDatabases that are not converged.
func (t *tracker) pending(limit int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for name, s := range t.dbs {
		if !s.conv && len(out) < limit {
			out = append(out, fmt.Sprintf("%s (children %06b, generation %d, observed %d, phase %q)", name, s.children, s.gen, s.obsGen, s.phase))
		}
	}
	return strings.Join(out, "; ")
}

func (t *tracker) counts() (converged, stalled, regressions int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.converged, len(t.stalled), t.regressions
}

// observedAt returns when the status of db was first seen describing
// gen or above.
func (t *tracker) observedAt(db string, gen int64) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.dbs[db]
	if s == nil {
		return time.Time{}, false
	}
	for _, o := range s.observed {
		if o.gen >= gen {
			return o.at, true
		}
	}
	return time.Time{}, false
}

// waitObserved waits until observedAt(db, gen) is known, or the timeout.
func (t *tracker) waitObserved(db string, gen int64, timeout time.Duration) (time.Time, bool) {
	deadline := time.After(timeout)
	for {
		if at, ok := t.observedAt(db, gen); ok {
			return at, true
		}
		select {
		case <-t.changed:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			return time.Time{}, false
		}
	}
}

func (t *tracker) stop() {
	t.cancel()
	t.wg.Wait()
}

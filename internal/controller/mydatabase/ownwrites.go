package mydatabase

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// ownWrites remembers, per MyDatabase, the object as this process last
// wrote it (its finalizer, its status), with the resourceVersion that
// write produced and the resourceVersions older than it that the cache may
// still show, until the informer cache shows another object. The watch
// event of a child a pass applied often wakes the next pass before the
// MyDatabase's own write reaches the cache: that pass must start from
// what was written, not from the cache. Entries live only while the cache
// lags, and a little longer (caughtUp), so the map stays small.
type ownWrites struct {
	mu sync.Mutex
	m  map[types.NamespacedName]ownWrite
	// grace is how long an entry outlives the cache catching up with it
	// (defaultWriteGrace when zero).
	grace time.Duration
}

// defaultWriteGrace is far longer than a pass takes from reading the
// MyDatabase to calling baseline (no request lies between), which is all
// it must cover, even on a machine whose CPUs are saturated.
const defaultWriteGrace = 10 * time.Second

type ownWrite struct {
	over    []string // resourceVersions older than the write, which the cache may still show
	version string   // resourceVersion the write produced
	object  *databasev1alpha1.MyDatabase
}

// baseline returns what the server holds of db as far as this process
// knows: db itself, or, while the cache still shows an object this process
// has since written over, the object that write returned.
func (w *ownWrites) baseline(key types.NamespacedName, db *databasev1alpha1.MyDatabase) *databasev1alpha1.MyDatabase {
	w.mu.Lock()
	defer w.mu.Unlock()
	last, ok := w.m[key]
	switch {
	case !ok:
	case slices.Contains(last.over, db.ResourceVersion):
		return last.object.DeepCopy()
	default:
		delete(w.m, key) // the cache has moved on
	}
	return db.DeepCopy()
}

// caughtUp is told each resourceVersion of key the cache shows. Once that
// is not one the last write was made over, the cache shows the write, and
// the entry is forgotten after the grace period: the last status write of
// a converged MyDatabase wakes no pass (status changes pass no predicate),
// so no baseline would ever forget it, and every converged MyDatabase
// would keep a copy of itself. Not at once: a pass that read the object
// just before the cache moved on must still find the write when it calls
// baseline.
func (w *ownWrites) caughtUp(key types.NamespacedName, resourceVersion string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	last, ok := w.m[key]
	if !ok || slices.Contains(last.over, resourceVersion) {
		return
	}
	grace := w.grace
	if grace == 0 {
		grace = defaultWriteGrace
	}
	time.AfterFunc(grace, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if now, ok := w.m[key]; ok && now.version == last.version {
			delete(w.m, key)
		}
	})
}

// remember records a write over the object at resourceVersion base, in a
// pass that read resourceVersion cached from the cache; written is the
// object as the write returned it. A chain of writes the cache has not
// caught up with keeps every version of it: the cache may show any of
// them next.
func (w *ownWrites) remember(key types.NamespacedName, cached, base string, written *databasev1alpha1.MyDatabase) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[types.NamespacedName]ownWrite{}
	}
	over := []string{cached}
	if last, ok := w.m[key]; ok && slices.Contains(last.over, cached) {
		over = append(last.over, last.version)
	}
	if !slices.Contains(over, base) {
		over = append(over, base)
	}
	object := written.DeepCopy()
	object.ManagedFields = nil // as the cache holds it
	w.m[key] = ownWrite{over: over, version: written.ResourceVersion, object: object}
}

func (w *ownWrites) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, key)
}

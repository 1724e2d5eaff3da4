package instance

import (
	"context"
	"maps"
	"sync/atomic"
	"time"

	"example.com/myoperator/internal/contract"
)

// What the MyDatabase declares inside PostgreSQL (spec.roles,
// spec.databases): on the primary, a worker of the instance manager's own
// applies what the Lease declares (contract.Declared), roles first (a
// database's owner must exist), then databases and their extensions. It
// runs beside the HA loop, never in it: a statement of the user's making
// may wait (a DROP DATABASE for its sessions, an ALTER for a lock, any
// commit for the fence), and the Lease's renewal must not wait with it.
// The turn hands it the declaration and puts its last outcome in the
// report. Every step is idempotent: a declaration is applied at once when
// it changes, and again once per Lease duration (what someone changed by
// hand is put back, a password Secret's change applied).

// declaredWork is what a turn hands the worker.
type declaredWork struct {
	primary    bool   // this instance is the ready primary
	annotation string // contract.AnnotationDeclared, as written
}

// declaredOutcome is the worker's last pass.
type declaredOutcome struct {
	of      string            // contract.DeclaredDigest of the declaration applied
	outcome map[string]string // contract.Report.Declared
}

// declaredKeeper is where the turn and the worker meet, and the worker
// (keepDeclared), which reaches the server through the pgServer.
type declaredKeeper struct {
	c    Config
	t    timing
	log  Logger
	kube *kube
	pg   *pgServer

	work chan declaredWork // the latest, capacity 1
	last atomic.Pointer[declaredOutcome]
	// workers is what the worker, alone, remembers of each subscription's
	// apply worker between passes (subscriptions.go).
	workers map[string]workerErrors
	// pooled is when each database was last found holding the poolers'
	// lookup (pooler.go), by the worker alone.
	pooled map[string]time.Time
}

func newDeclaredKeeper() *declaredKeeper {
	return &declaredKeeper{work: make(chan declaredWork, 1), workers: map[string]workerErrors{}, pooled: map[string]time.Time{}}
}

// offer hands the worker w, in place of one it has not taken yet. The
// turn is the only sender.
func (k *declaredKeeper) offer(w declaredWork) {
	select {
	case <-k.work:
	default:
	}
	k.work <- w
}

// outcome is what the report says: the worker's last outcome and the
// declaration it is of; nothing unless this instance is the primary.
func (k *declaredKeeper) outcome(primary bool) (map[string]string, string) {
	last := k.last.Load()
	if !primary || last == nil {
		return nil, ""
	}
	return maps.Clone(last.outcome), last.of
}

// keepDeclared is the worker; it returns when ctx ends.
func (k *declaredKeeper) keepDeclared(ctx context.Context) {
	var applied string // the annotation last applied, and when
	var at time.Time
	for {
		var w declaredWork
		select {
		case <-ctx.Done():
			return
		case w = <-k.work:
		}
		if !w.primary || w.annotation == "" {
			k.last.Store(nil)
			clear(k.pooled)
			applied = ""
			continue
		}
		if w.annotation == applied && time.Since(at) < k.t.lease {
			continue
		}
		d, err := contract.ParseDeclared(w.annotation)
		if err != nil {
			k.log("%v", err)
			continue
		}
		outcome, err := k.applyDeclared(ctx, d)
		if err != nil {
			k.log("applying the declared roles and databases: %v (again at the next turn)", err)
			continue
		}
		var before map[string]string
		if last := k.last.Load(); last != nil {
			before = last.outcome
		}
		for key, why := range outcome {
			if why != "" && why != before[key] {
				k.log("%s: %s", key, why)
			}
		}
		k.last.Store(&declaredOutcome{of: contract.DeclaredDigest(w.annotation), outcome: outcome})
		applied, at = w.annotation, time.Now()
	}
}

// applyDeclared applies d, each step bounded by a minute, and returns
// each item's outcome.
func (k *declaredKeeper) applyDeclared(ctx context.Context, d contract.Declared) (map[string]string, error) {
	outcome := map[string]string{}
	if err := k.applyRoles(ctx, d.Roles, outcome); err != nil {
		return nil, err
	}
	if err := k.applyDatabases(ctx, d.Databases, outcome); err != nil {
		return nil, err
	}
	if d.Pooler {
		outcome[contract.PoolerKey] = k.keepPoolerLookup(ctx, k.pooled)
	}
	return outcome, nil
}

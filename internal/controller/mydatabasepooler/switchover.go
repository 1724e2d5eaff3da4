package mydatabasepooler

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// A read-write pooler in transaction mode pauses PgBouncer through each
// switchover of its MyDatabase (internal/contract, pooler.go). The primary
// counts the pods of each pooler that paused before it stopped, the
// MyDatabase's reconciler names them in status.switchover.poolers, and the
// pooler reports its own part in status.lastSwitchover and an event.

// switchoverEvent is the event of a switchover the pooler reports.
type switchoverEvent struct{ eventType, reason string }

// followSwitchover sets p's status.lastSwitchover from db's last
// switchover, if it succeeded after p was made, p pauses through
// switchovers, and p has not reported it yet; it then returns the event
// to emit.
func followSwitchover(p *databasev1alpha1.MyDatabasePooler, db *databasev1alpha1.MyDatabase) *switchoverEvent {
	if db == nil || !specs.PoolerPausesOnSwitchover(p) {
		return nil
	}
	sw := db.Status.Switchover
	if sw == nil || sw.Phase != databasev1alpha1.SwitchoverSucceeded || sw.FinishedAt == nil || sw.FinishedAt.Before(&p.CreationTimestamp) {
		return nil
	}
	if last := p.Status.LastSwitchover; last != nil && last.FinishedAt != nil && !last.FinishedAt.Before(sw.FinishedAt) {
		return nil
	}
	last := &databasev1alpha1.PoolerSwitchoverStatus{From: sw.From, To: sw.To, FinishedAt: sw.FinishedAt.DeepCopy()}
	for _, paused := range sw.Poolers {
		if paused.Name == p.Name {
			last.PausedPods = paused.PausedPods
		}
	}
	p.Status.LastSwitchover = last
	if last.PausedPods == 0 {
		last.Message = fmt.Sprintf("switchover from %s to %s: the primary counted no pod of this pooler paused before it stopped, "+
			"so any transaction running through it then failed; the pooler pods' logs say why (a pause waits 10 s at most for running transactions)",
			sw.From, sw.To)
		return &switchoverEvent{corev1.EventTypeWarning, "NotPausedThroughSwitchover"}
	}
	last.Message = fmt.Sprintf("switchover from %s to %s: %d of %d PgBouncer pods paused before %s stopped; their clients' transactions waited for %s",
		sw.From, sw.To, last.PausedPods, specs.PoolerInstances(p), sw.From, sw.To)
	return &switchoverEvent{corev1.EventTypeNormal, "PausedThroughSwitchover"}
}

// switchoverFinished passes a MyDatabase update that ends a switchover.
var switchoverFinished = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	before, after := e.ObjectOld.(*databasev1alpha1.MyDatabase), e.ObjectNew.(*databasev1alpha1.MyDatabase)
	finished := func(db *databasev1alpha1.MyDatabase) string {
		if sw := db.Status.Switchover; sw != nil && sw.FinishedAt != nil {
			return sw.FinishedAt.String()
		}
		return ""
	}
	return finished(before) != finished(after)
}}

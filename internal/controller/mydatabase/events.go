package mydatabase

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/metrics"
)

// recordTransitions emits an event when the MyDatabase becomes Ready, and
// a Warning for each distinct failure (a reason or message the Ready
// condition did not already carry): a failure retried a hundred times is
// one event, not a hundred.
// A new failure is also logged once, at Info; its retries only at V(1).
func (r *kit) recordTransitions(ctx context.Context, before, after *databasev1alpha1.MyDatabase) {
	if was, is := before.Status.CurrentPrimary, after.Status.CurrentPrimary; was != "" && is != was {
		r.event(after, corev1.EventTypeNormal, "PrimaryChanged", "The primary is now %s (was %s): it holds the primary Lease", is, was)
		r.Metrics.PrimaryChanged(client.ObjectKeyFromObject(after), primaryChangeKind(before, after))
		log(ctx).Info("Primary changed", "from", was, "to", is)
	}
	ready := meta.FindStatusCondition(after.Status.Conditions, databasev1alpha1.ConditionReady)
	if ready == nil {
		return
	}
	old := meta.FindStatusCondition(before.Status.Conditions, databasev1alpha1.ConditionReady)
	switch {
	case ready.Status == metav1.ConditionTrue:
		if old == nil || old.Status != metav1.ConditionTrue {
			r.event(after, corev1.EventTypeNormal, "Ready", "%s", ready.Message)
		}
	case failing(after) && (old == nil || old.Reason != ready.Reason || old.Message != ready.Message):
		r.event(after, corev1.EventTypeWarning, ready.Reason, "%s", ready.Message)
		log(ctx).Info("Cannot converge", "reason", ready.Reason, "message", ready.Message)
	}
}

// failing reports whether the status reports a failure rather than
// progress: Stalled, or Reconciling on a retried API error.
func failing(db *databasev1alpha1.MyDatabase) bool {
	if meta.IsStatusConditionTrue(db.Status.Conditions, databasev1alpha1.ConditionStalled) {
		return true
	}
	rec := meta.FindStatusCondition(db.Status.Conditions, databasev1alpha1.ConditionReconciling)
	return rec != nil && rec.Reason == databasev1alpha1.ReasonAPIError
}

// primaryChangeKind tells a switchover, a change of primary towards the
// target of a switchover under way (or one this very status write reports
// done), from a failover.
func primaryChangeKind(before, after *databasev1alpha1.MyDatabase) string {
	was, is := before.Status.Switchover, after.Status.Switchover
	switch {
	case was != nil && was.Phase == databasev1alpha1.SwitchoverRunning && was.To == after.Status.CurrentPrimary,
		is != nil && is.Phase == databasev1alpha1.SwitchoverRunning && is.To == after.Status.CurrentPrimary,
		is != nil && is.Phase == databasev1alpha1.SwitchoverSucceeded && is.To == after.Status.CurrentPrimary &&
			(was == nil || was.Phase != databasev1alpha1.SwitchoverSucceeded || !was.RequestedAt.Equal(is.RequestedAt)):
		return metrics.Switchover
	}
	return metrics.Failover
}

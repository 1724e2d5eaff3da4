package mydatabase

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// event records an event on the MyDatabase. Messages never carry a secret
// value: only names of objects and of keys.
func (r *MyDatabaseReconciler) event(db *databasev1alpha1.MyDatabase, eventType, reason, format string, args ...any) {
	r.Recorder.Eventf(db, nil, eventType, reason, "Reconcile", format, args...)
}

// recordCreated emits one event for every child a pass created: a new
// MyDatabase gets one "Created" event naming all of them, rather than one
// per child, which the event API would fold into a series and lose.
func (r *MyDatabaseReconciler) recordCreated(db *databasev1alpha1.MyDatabase, obs *observation) {
	if len(obs.created) > 0 {
		r.event(db, corev1.EventTypeNormal, "Created", "Created %s", strings.Join(obs.created, ", "))
	}
}

// recordTransitions emits an event when the MyDatabase becomes Ready or
// Stalled, once per transition.
func (r *MyDatabaseReconciler) recordTransitions(before, after *databasev1alpha1.MyDatabase) {
	if ready := meta.FindStatusCondition(after.Status.Conditions, databasev1alpha1.ConditionReady); ready != nil &&
		ready.Status == "True" && !meta.IsStatusConditionTrue(before.Status.Conditions, databasev1alpha1.ConditionReady) {
		r.event(after, corev1.EventTypeNormal, "Ready", "%s", ready.Message)
	}
	stalled := meta.FindStatusCondition(after.Status.Conditions, databasev1alpha1.ConditionStalled)
	old := meta.FindStatusCondition(before.Status.Conditions, databasev1alpha1.ConditionStalled)
	if stalled != nil && (old == nil || old.Reason != stalled.Reason) {
		r.event(after, corev1.EventTypeWarning, stalled.Reason, "%s", stalled.Message)
	}
}

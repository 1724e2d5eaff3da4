package controller

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// event records an event on the MyDatabase. Messages never carry a secret
// value: only names of objects and of keys.
func (r *MyDatabaseReconciler) event(db *databasev1alpha1.MyDatabase, eventType, reason, format string, args ...any) {
	r.Recorder.Eventf(db, nil, eventType, reason, "Reconcile", format, args...)
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

package mydatabase

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/apply"
	"example.com/myoperator/internal/specs"
)

// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=podmonitors,verbs=get;create;patch;delete

// podMonitor is the component of the PodMonitor.
type podMonitor struct {
	*kit
	*scope
}

// reconcile keeps the PodMonitor while spec.monitoring.podMonitor
// asks for one, and reports it in the MonitoringReady condition. The
// PodMonitor's CRD is the Prometheus Operator's and may be absent: then
// the condition says so and the pass goes on; the pass looks again after
// stallRetry, as no watch tells when the CRD arrives. The PodMonitor is
// read from the API server, not the cache (an informer on a kind that may
// not exist would keep the operator from starting), so only a spec change
// or another child's event brings back a PodMonitor edited by hand.
func (r *podMonitor) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	var desired *specs.PodMonitorConfiguration
	if db.Spec.Monitoring.PodMonitor {
		desired = specs.PodMonitor(db)
	} else if meta.FindStatusCondition(db.Status.Conditions, databasev1alpha1.ConditionMonitoringReady) == nil {
		// Only a MyDatabase that asked for one may have one: the others
		// cost no request (with the CRD absent, each would be a discovery).
		return nil
	}
	kept, err := r.children(db).PodMonitor(ctx, client.ObjectKey{Namespace: db.Namespace, Name: specs.PodMonitorName(db)}, desired)
	if kept.Deleted {
		r.event(db, corev1.EventTypeNormal, "Deleted", "Deleted %s %s", apply.KindOf(kept.Live), specs.PodMonitorName(db))
	}
	if desired == nil {
		obs.monitoring = &blocker{}
		return err
	}
	if kept.CRDMissing {
		obs.monitoring = &blocker{Reason: databasev1alpha1.ReasonPodMonitorCRDMissing, Message: "spec.monitoring.podMonitor asks for a PodMonitor, " +
			"but the cluster has no PodMonitor CRD (monitoring.coreos.com/v1): install the Prometheus Operator, " +
			"or set spec.monitoring.podMonitor to false; the servers' metrics are served on port metrics (9187) either way"}
		obs.recheck(r.StallRetry)
		return nil
	}
	switch err := applied(obs, kept.Live, kept.Outcome, err); {
	case err != nil:
		return err
	case !metav1.IsControlledBy(kept.Live, db):
		return nil // another MyDatabase's of the same name, being deleted: obs.waiting says so
	}
	obs.monitoring = &blocker{Reason: databasev1alpha1.ReasonPodMonitorApplied,
		Message: "PodMonitor " + specs.PodMonitorName(db) + " scrapes every server"}
	return nil
}

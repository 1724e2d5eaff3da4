package mydatabase

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"

	"example.com/myoperator/internal/specs"
)

// serverConfig is the component of the PostgreSQL configuration ConfigMap.
type serverConfig struct {
	*kit
	*scope
}

func (r *serverConfig) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	return r.applyChild(ctx, obs, specs.ConfigMap(db), &corev1.ConfigMap{})
}

// services is the component of the Services.
type services struct {
	*kit
	*scope
}

// reconcile keeps the headless and read-write Services, and the
// read-only one while there are replicas to read from.
func (r *services) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	if err := r.applyChild(ctx, obs, specs.HeadlessService(db), &corev1.Service{}); err != nil {
		return err
	}
	if err := r.applyChild(ctx, obs, specs.ReadWriteService(db), &corev1.Service{}); err != nil {
		return err
	}
	if specs.Replicas(db) > 1 {
		return r.applyChild(ctx, obs, specs.ReadOnlyService(db), &corev1.Service{})
	}
	return r.deleteChild(ctx, db, &corev1.Service{}, specs.ReadOnlyServiceName(db))
}

// disruptionBudget is the component of the PodDisruptionBudget.
type disruptionBudget struct {
	*kit
	*scope
}

func (r *disruptionBudget) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	if specs.Replicas(db) > 1 {
		return r.applyChild(ctx, obs, specs.PodDisruptionBudget(db), &policyv1.PodDisruptionBudget{})
	}
	return r.deleteChild(ctx, db, &policyv1.PodDisruptionBudget{}, specs.PodDisruptionBudgetName(db))
}

// networkPolicy is the component of the NetworkPolicy.
type networkPolicy struct {
	*kit
	*scope
}

// reconcile keeps the NetworkPolicy while spec.networkPolicy
// asks for one.
func (r *networkPolicy) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	if specs.NetworkPolicyEnabled(db) {
		return r.applyChild(ctx, obs, specs.NetworkPolicy(db), &networkingv1.NetworkPolicy{})
	}
	return r.deleteChild(ctx, db, &networkingv1.NetworkPolicy{}, specs.NetworkPolicyName(db))
}

// +kubebuilder:rbac:groups=core,resources=events,verbs=list

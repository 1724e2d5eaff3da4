package mydatabase

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/utils/ptr"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// The instance managers decide who is primary among themselves, through
// the primary Lease (internal/instance). The operator gives them what they
// need (an identity, a Role, the Lease), then follows: the Lease's holder
// is status.currentPrimary and gets the primary role label, and each pod's
// report becomes its entry in status.instances.

// +kubebuilder:rbac:groups=core,resources=serviceaccounts,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete

// instanceAccess is the component of the instance managers' identity, Role and primary
// Lease.
type instanceAccess struct {
	*kit
	*scope
}

// reconcile keeps the instance managers' ServiceAccount,
// Role and RoleBinding, and the primary Lease. The operator may grant the
// Role only what it holds itself (RBAC refuses an escalation): get, list
// and patch on pods, get, watch and update on Leases.
func (r *instanceAccess) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	if err := r.applyChild(ctx, obs, specs.InstanceServiceAccount(db), &corev1.ServiceAccount{}); err != nil {
		return err
	}
	if err := r.applyChild(ctx, obs, specs.InstanceRole(db), &rbacv1.Role{}); err != nil {
		return err
	}
	if err := r.applyChild(ctx, obs, specs.InstanceRoleBinding(db), &rbacv1.RoleBinding{}); err != nil {
		return err
	}
	return r.applyChild(ctx, obs, specs.Lease(db, upgradedAlone(db, r.lease), r.mode.pooled), &coordinationv1.Lease{})
}

// upgradedAlone is the pod whose data a major upgrade left as the only
// data (the replicas' volumes deleted, to clone it afresh), from when the
// data was upgraded until the Lease changes hands; "" otherwise.
func upgradedAlone(db *databasev1alpha1.MyDatabase, lease *coordinationv1.Lease) string {
	up := db.Status.MajorUpgrade
	if up == nil || up.LeaseTransitions == nil || lease == nil ||
		(up.Phase != databasev1alpha1.MajorUpgradeRecloning && up.Phase != databasev1alpha1.MajorUpgradeSucceeded) ||
		ptr.Deref(lease.Spec.LeaseTransitions, 0) != *up.LeaseTransitions {
		return ""
	}
	return up.Primary
}

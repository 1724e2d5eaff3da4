package mydatabase

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
)

// roles is the component of the declared roles (spec.roles): the Secrets
// it generates for the roles that log in without a passwordSecret. The
// roles themselves reach the primary's instance manager on the Lease
// (specs.Lease, instanceAccess), which applies them and reports each
// one's outcome; setRolesStatus reads it.
type roles struct {
	*kit
	*scope
}

// reconcile creates each generated role Secret that does not exist, with
// a new password: once, as the credentials Secret is made. A Secret that
// exists is never rewritten; the primary sets the role's password from
// it, and from any change a person makes to it.
func (r *roles) reconcile(ctx context.Context, obs *observation) error {
	for _, role := range specs.GeneratedRoles(r.db) {
		name := specs.GeneratedRoleSecretName(r.db, role.Name)
		// Read around the cache: a stale cache must not make a second
		// password (the create would conflict anyway).
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: r.db.Namespace, Name: name}, &corev1.Secret{})
		if err == nil {
			continue
		}
		if !apierrors.IsNotFound(err) {
			return objectError("get", &corev1.Secret{}, name, err)
		}
		password, err := r.NewPassword()
		if err != nil {
			return err
		}
		secret := specs.RoleSecret(r.db, role.Name, password)
		if err := r.Create(ctx, secret, client.FieldOwner(FieldOwner)); err != nil && !apierrors.IsAlreadyExists(err) {
			return objectError("create", secret, name, err)
		}
		obs.created = append(obs.created, "Secret "+name)
	}
	return nil
}

// setRolesStatus writes status.roles and the RolesApplied condition from
// the primary's report: a role is applied once the primary reports it so
// for the declaration as it is now.
func setRolesStatus(db *databasev1alpha1.MyDatabase, primary *contract.Report, now time.Time) {
	st := &db.Status
	if len(db.Spec.Roles) == 0 {
		st.Roles = nil
		meta.RemoveStatusCondition(&st.Conditions, databasev1alpha1.ConditionRolesApplied)
		return
	}
	current := primary != nil && primary.RolesOf == contract.RolesDigest(specs.RolesOf(db).String())
	st.Roles = make([]databasev1alpha1.RoleStatus, 0, len(db.Spec.Roles))
	var failed, pending []string
	for _, r := range db.Spec.Roles {
		rs := databasev1alpha1.RoleStatus{Name: r.Name, PasswordSecret: specs.RolePasswordSecretName(db, r)}
		why, reported := "", false
		if current {
			why, reported = primary.Roles[r.Name]
		}
		switch {
		case !reported:
			pending = append(pending, r.Name)
		case why != "":
			rs.Message = why
			failed = append(failed, fmt.Sprintf("%s: %s", r.Name, why))
		default:
			rs.Applied = true
		}
		st.Roles = append(st.Roles, rs)
	}
	cond := metav1.Condition{Type: databasev1alpha1.ConditionRolesApplied, Status: metav1.ConditionTrue,
		Reason: databasev1alpha1.ReasonRolesApplied, Message: fmt.Sprintf("the primary applied the %d declared roles", len(db.Spec.Roles)),
		ObservedGeneration: db.Generation, LastTransitionTime: metav1.NewTime(now)}
	switch {
	case len(failed) > 0:
		slices.Sort(failed)
		cond.Status, cond.Reason = metav1.ConditionFalse, databasev1alpha1.ReasonRoleNotApplied
		cond.Message = "the primary could not apply " + strings.Join(failed, "; ") + "; change spec.roles or the database, and it tries again"
	case len(pending) > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, databasev1alpha1.ReasonRolesPending
		cond.Message = "waiting for the primary to apply " + strings.Join(pending, ", ")
	}
	meta.SetStatusCondition(&st.Conditions, cond)
}

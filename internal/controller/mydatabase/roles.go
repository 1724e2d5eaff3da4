package mydatabase

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// roles is the component of the declared roles (spec.roles): the Secrets
// it generates for the roles that log in without a passwordSecret. The
// roles themselves, and the declared databases, reach the primary's
// instance manager on the Lease (specs.Lease, instanceAccess), which
// applies them and reports each one's outcome; setDeclaredStatus reads it.
type roles struct {
	*kit
	*scope
}

// reconcile aligns the owner of every generated role Secret with the
// deletion policy, and creates each one that does not exist, with a new
// password: once, as the credentials Secret is made. A Secret's data is
// never rewritten; the primary sets the role's password from it, and from
// any change a person makes to it. A converged pass reads the cache only.
func (r *roles) reconcile(ctx context.Context, obs *observation) error {
	// Every generated role Secret of this MyDatabase's name, its role
	// declared now or not (a role removed from the list stays in the data,
	// so does its password), made by this MyDatabase or retained with the
	// data by a deleted one of the name: owned as the deletion policy says,
	// so that Delete takes them with the data and Retain keeps them.
	secrets := &corev1.SecretList{}
	if err := r.List(ctx, secrets, client.InNamespace(r.db.Namespace), client.MatchingLabels{
		databasev1alpha1.LabelInstance: r.db.Name, databasev1alpha1.LabelComponent: specs.ComponentRole,
		databasev1alpha1.LabelManagedBy: databasev1alpha1.ManagedBy}); err != nil {
		return err
	}
	cached := map[string]bool{}
	for i := range secrets.Items {
		cached[secrets.Items[i].Name] = true
		if err := r.alignMetadata(ctx, &secrets.Items[i], specs.Labels(r.db, specs.ComponentRole), nil, specs.SecretOwnerReferences(r.db), r.db); err != nil {
			return err
		}
	}
	for _, role := range specs.GeneratedRoles(r.db) {
		name := specs.GeneratedRoleSecretName(r.db, role.Name)
		if cached[name] {
			continue
		}
		// Not in the cache: ask the API server, since a cache behind it
		// must not make a second password (the create would conflict
		// anyway).
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

package mydatabase

import (
	"bytes"
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	tls input[tlsResult] // the CA the generated Secrets carry
}

// reconcile aligns the owner of every generated role Secret with the
// deletion policy, and creates each one that does not exist, with a new
// password: once, as the credentials Secret is made. A Secret's password
// is never rewritten (only its ca.crt is kept current, alignCA); the
// primary sets the role's password from it, and from any change a person
// makes to it. A converged pass reads the cache only.
func (r *roles) reconcile(ctx context.Context, obs *observation) error {
	// Every generated role Secret of this MyDatabase's name, its role
	// declared now or not (a role removed from the list stays in the data,
	// so does its password), made by this MyDatabase or retained with the
	// data by a deleted one of the name: owned as the deletion policy says,
	// so that Delete takes them with the data and Retain keeps them.
	secrets, err := r.roleSecrets(ctx, r.db)
	if err != nil {
		return err
	}
	cached := map[string]bool{}
	for i := range secrets {
		secret := &secrets[i]
		cached[secret.Name] = true
		if err := r.alignMetadata(ctx, secret, specs.Labels(r.db, specs.ComponentRole), nil, specs.SecretOwnerReferences(r.db), r.db); err != nil {
			return err
		}
		if err := r.alignCA(ctx, secret); err != nil {
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
		secret := specs.RoleSecret(r.db, role.Name, password, r.tls.get().caCert)
		if err := r.Create(ctx, secret, client.FieldOwner(FieldOwner)); err != nil && !apierrors.IsAlreadyExists(err) {
			return objectError("create", secret, name, err)
		}
		obs.created = append(obs.created, "Secret "+name)
	}
	return nil
}

// alignCA gives a generated role Secret the CA that verifies the servers
// (one made before it carried one, or since a change of CA): a
// subscription of another MyDatabase verifies this one's with it. The
// password is never touched here.
func (r *roles) alignCA(ctx context.Context, secret *corev1.Secret) error {
	if bytes.Equal(secret.Data[specs.CACertKey], r.tls.get().caCert) {
		return nil
	}
	before := secret.DeepCopy()
	if secret.Data == nil {
		secret.Data = map[string][]byte{}
	}
	secret.Data[specs.CACertKey] = r.tls.get().caCert
	if err := r.Patch(ctx, secret, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return objectError("patch", secret, secret.Name, err)
	}
	return nil
}

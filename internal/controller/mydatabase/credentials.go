package mydatabase

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// credentials is the component of the application's password Secret and the connection
// Secret.
type credentials struct {
	*kit
	*scope
	tls input[tlsResult] // the CA the connection Secret carries
	// dataVolume is the primary's data volume as read from the API server
	// ("" when there is none), nil until dataExists asks.
	dataVolume *string
}

// reconcile makes sure the application's password Secret
// exists and is usable; the generated credentials Secret carries the CA
// tlsCerts hands over (it runs first). A password is generated only when no
// data exists yet; once a Secret exists it is never rewritten, and if it
// vanishes while the data remains, the MyDatabase stalls instead of
// minting a password the data does not know.
func (r *credentials) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	if specs.UserSuppliedCredentials(db) {
		obs.stalled = r.checkUserSecret(ctx, db)
		return nil
	}
	caCert := r.tls.get().caCert
	withCA := func(db *databasev1alpha1.MyDatabase, password string) *corev1.Secret {
		s := specs.CredentialsSecret(db, password)
		s.Data[specs.CACertKey] = caCert
		return s
	}
	if err := r.ensureGeneratedSecret(ctx, db, obs, specs.GeneratedCredentialsSecretName(db), withCA); err != nil || obs.blocked() {
		return err
	}
	return r.alignConnectionSecret(ctx, db, caCert)
}

// replicationPassword is the component of the retirement of the replication password
// Secret.
type replicationPassword struct {
	*kit
	*scope
	servers input[serversResult] // the applied StatefulSet
}

// reconcile deletes the replication password Secret of a
// MyDatabase made before replicas authenticated by certificate (and its
// rotation's staging Secret), once no pod can need it: every pod runs a
// template that mounts the client certificate. Until then a replica of
// the new template falls back to the password against a primary of the
// old one (internal/instance, replication.go).
func (r *replicationPassword) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	if !everyPodMountsReplicationCert(db, r.servers.get().applied, r.pods) {
		return nil
	}
	legacy := specs.LegacyReplicationSecretName(db)
	for _, name := range []string{legacy, specs.StagingSecretName(legacy)} {
		secret := &corev1.Secret{}
		if err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, secret); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return objectError("get", secret, name, err)
		}
		if err := r.deleteExact(ctx, secret); err != nil {
			return err
		}
		r.event(db, corev1.EventTypeNormal, "ReplicationPasswordRetired",
			"Deleted Secret %s: every instance now replicates with the client certificate of Secret %s", name, specs.ReplicationCertSecretName(db))
	}
	return nil
}

// everyPodMountsReplicationCert: the StatefulSet's template, as its
// controller last observed it, gives the pods the replication client
// certificate, and every pod runs that template.
func everyPodMountsReplicationCert(db *databasev1alpha1.MyDatabase, sts *appsv1.StatefulSet, pods []corev1.Pod) bool {
	if sts == nil || sts.Status.ObservedGeneration < sts.Generation || sts.Status.UpdateRevision == "" ||
		int32(len(pods)) != specs.Replicas(db) {
		return false
	}
	mounted := false
	for _, v := range sts.Spec.Template.Spec.Volumes {
		mounted = mounted || v.Secret != nil && v.Secret.SecretName == specs.ReplicationCertSecretName(db)
	}
	for i := range pods {
		if pods[i].Labels[appsv1.ControllerRevisionHashLabelKey] != sts.Status.UpdateRevision {
			return false
		}
	}
	return mounted
}

// checkUserSecret validates the Secret named in spec.credentials. It is read
// around the cache (it carries none of our labels) and never written.
func (r *credentials) checkUserSecret(ctx context.Context, db *databasev1alpha1.MyDatabase) *blocker {
	name := db.Spec.Credentials.SecretName
	secret := &corev1.Secret{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, secret)
	switch {
	case apierrors.IsNotFound(err):
		return &blocker{Reason: databasev1alpha1.ReasonCredentialsNotFound, Message: fmt.Sprintf(
			"Secret %q named in spec.credentials.secretName does not exist in namespace %q: create it with the key %q (and optionally %q = %q)",
			name, db.Namespace, specs.SecretPasswordKey, specs.SecretUsernameKey, db.Spec.User)}
	case err != nil:
		return &blocker{Reason: databasev1alpha1.ReasonCredentialsNotFound, Message: fmt.Sprintf("reading Secret %q: %v", name, err)}
	}
	if len(secret.Data[specs.SecretPasswordKey]) == 0 {
		return &blocker{Reason: databasev1alpha1.ReasonCredentialsInvalid, Message: fmt.Sprintf(
			"Secret %q has no non-empty key %q: add the password under that key", name, specs.SecretPasswordKey)}
	}
	if u, ok := secret.Data[specs.SecretUsernameKey]; ok && string(u) != db.Spec.User {
		return &blocker{Reason: databasev1alpha1.ReasonCredentialsInvalid, Message: fmt.Sprintf(
			"Secret %q has %s %q but spec.user is %q: make them match", name, specs.SecretUsernameKey, u, db.Spec.User)}
	}
	return nil
}

// ensureGeneratedSecret creates the named Secret once, adopts it when a
// MyDatabase of the same name left it behind, and keeps its labels and
// owner references in line with the deletion policy. Its data is never
// touched after creation.
func (r *credentials) ensureGeneratedSecret(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation,
	name string, build func(*databasev1alpha1.MyDatabase, string) *corev1.Secret) error {
	secret := &corev1.Secret{}
	err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, secret)
	if apierrors.IsNotFound(err) {
		return r.createSecret(ctx, db, obs, name, build)
	}
	if err != nil {
		return objectError("get", secret, name, err)
	}
	if ownedByAnother(secret, db, obs) {
		return nil
	}
	password := secret.Data[specs.SecretPasswordKey]
	if len(password) == 0 {
		obs.stalled = &blocker{Reason: databasev1alpha1.ReasonCredentialsInvalid, Message: fmt.Sprintf(
			"Secret %q has lost its %q key; the operator will not generate a new password for existing data: restore the key from a backup",
			name, specs.SecretPasswordKey)}
		return nil
	}
	// The digest of the original password tells an edited Secret apart. Its
	// absence means the user accepted the current password (or the Secret
	// predates the digest): record it.
	annotations := map[string]string{databasev1alpha1.AnnotationPasswordDigest: specs.PasswordDigest(password)}
	if recorded, ok := secret.Annotations[databasev1alpha1.AnnotationPasswordDigest]; ok && recorded != annotations[databasev1alpha1.AnnotationPasswordDigest] {
		obs.stalled = &blocker{Reason: databasev1alpha1.ReasonCredentialsChanged, Message: fmt.Sprintf(
			"the password in Secret %q was changed by hand, but the database still accepts only its previous password: "+
				"restore it, and set spec.passwordRotation to have the operator change it safely; or, if you also changed it in PostgreSQL (ALTER ROLE), "+
				"remove the annotation %s from the Secret to accept the new one",
			name, databasev1alpha1.AnnotationPasswordDigest)}
		return nil
	}
	return r.alignMetadata(ctx, secret, specs.Labels(db, specs.ComponentCredentials), annotations, specs.SecretOwnerReferences(db), db)
}

func (r *credentials) createSecret(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation,
	name string, build func(*databasev1alpha1.MyDatabase, string) *corev1.Secret) error {
	if pvc, err := r.dataExists(ctx, db); err != nil || pvc != "" {
		if err == nil {
			obs.stalled = &blocker{Reason: databasev1alpha1.ReasonCredentialsLost, Message: fmt.Sprintf(
				"Secret %q is gone but the data volume %q still exists, and the data only accepts the password it was created with; "+
					"restore the Secret from a backup (keys %q, %q): the operator will not generate a new password",
				name, pvc, specs.SecretUsernameKey, specs.SecretPasswordKey)}
		}
		return err
	}
	password, err := r.NewPassword()
	if err != nil {
		return err
	}
	secret := build(db, password)
	err = r.Create(ctx, secret, client.FieldOwner(FieldOwner))
	if apierrors.IsAlreadyExists(err) {
		return r.explainExistingSecret(ctx, db, obs, name)
	}
	if err != nil {
		return objectError("create", secret, name, err)
	}
	obs.created = append(obs.created, "Secret "+name)
	return nil
}

// dataExists returns the name of the primary's data volume if it exists,
// read from the API server itself: a stale cache must never be the reason a
// new password is minted for old data. It asks once per pass.
func (r *credentials) dataExists(ctx context.Context, db *databasev1alpha1.MyDatabase) (string, error) {
	if r.dataVolume != nil {
		return *r.dataVolume, nil
	}
	name := fmt.Sprintf("%s-%s-0", specs.DataVolumeName, specs.StatefulSetName(db))
	pvc := &corev1.PersistentVolumeClaim{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, pvc)
	switch {
	case apierrors.IsNotFound(err):
		name = ""
	case err != nil:
		return "", objectError("get", pvc, name, err)
	}
	r.dataVolume = &name
	return name, nil
}

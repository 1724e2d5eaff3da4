package mydatabase

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/controller/children"
	"example.com/myoperator/internal/pki"
	"example.com/myoperator/internal/specs"
)

// Every server offers TLS, and the replicas authenticate to the primary
// with a client certificate. The operator keeps:
//   - <name>-ca, a CA of this MyDatabase, made once and never made again
//     while it exists: clients trust it, and the servers check the
//     replicas' certificates with it. Like the password Secrets it follows
//     the deletion policy, and if it vanishes while a server certificate
//     it issued is still in use the MyDatabase stalls rather than mint a
//     CA no client trusts. Only a rotation (carotation.go) replaces it,
//     trusted beside the old one first: its ca.crt is then a bundle of
//     two, the first of which issues (specs.CAPhase);
//   - <name>-replication-tls, the replicas' client certificate for the
//     replication role (which has no password), with the CA's certificate;
//   - <name>-server-tls, the server certificate (a kubernetes.io/tls
//     Secret with ca.crt) for every name clients use
//     (specs.ServerDNSNames), unless spec.tls.serverCertSecret names the
//     user's.
//
// An issued certificate is issued again, into the same Secret, when a third
// of its lifetime is left, when it no longer verifies against the CA that
// issues, or (the server's) when the names change (scaling); a Secret
// whose certificate is good but whose ca.crt is not the CA Secret's
// bundle gets the bundle alone. Both follow the deletion policy with the
// CA. The instance managers reload them without a restart.
//
// The generated credentials Secret carries ca.crt, and its uri asks for
// sslmode=verify-full.

// tlsState is the TLS part of the status a pass computes.
type tlsState struct {
	status  *databasev1alpha1.TLSStatus
	reason  string // of the CertificateValid condition
	message string
}

// tlsCerts is the component of the CA, the server certificate and the replication client
// certificate: issued, or the user's, checked.
type tlsCerts struct {
	*kit
	*scope
	out *result[tlsResult]
}

// tlsResult is what tlsCerts hands over to credentials, roles and
// caRotation.
type tlsResult struct {
	// caCert is the CA clients verify the servers with (a bundle of two
	// during a rotation of the operator's CA), nil when the pass found
	// none.
	caCert []byte
	// ca is the CA Secret as the pass left it, nil when the pass found
	// none or stopped before it.
	ca *corev1.Secret
	// server and replication are the data of the server certificate
	// Secret (the user's, with serverCertSecret) and of the replication
	// client certificate Secret as the pass left them, nil when it did
	// not get to them.
	server, replication map[string][]byte
}

// reconcile keeps the certificates, and leaves in its result the CA
// clients verify the servers with, for the credentials and role Secrets.
func (r *tlsCerts) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	out := r.out.produce()
	caSecret, err := r.ensureCA(ctx, db, obs)
	if err != nil || obs.blocked() {
		return err
	}
	out.ca = caSecret
	// Certificates are checked against, and issued by, the CA that issues
	// alone; the Secrets' ca.crt is the whole bundle.
	ca, bundle := specs.IssuingCA(caSecret.Data), caSecret.Data[specs.CACertKey]
	now := r.Clock.Now()
	out.replication, err = r.keepIssued(ctx, db, obs, specs.ReplicationCertSecretName(db), ca, bundle, nil, func() (*corev1.Secret, error) {
		client, err := pki.NewClient(ca, contract.ReplicationRole, now)
		return specs.ReplicationCertSecret(db, client, bundle), err
	}, func(data map[string][]byte, seal pki.Seal) pki.Check {
		return r.certs.Client(data[specs.TLSCertKey], data[specs.TLSKeyKey], ca.Cert, contract.ReplicationRole, now, seal)
	})
	if err != nil || obs.blocked() {
		return err
	}
	if specs.UserSuppliedServerCert(db) {
		out.caCert, out.server = r.checkUserCertificate(ctx, db, obs)
		r.observeCA(obs, ca)
		return nil
	}
	name, names := specs.IssuedServerCertSecretName(db), specs.ServerDNSNames(db)
	data, err := r.keepIssued(ctx, db, obs, name, ca, bundle, names, func() (*corev1.Secret, error) {
		server, err := pki.NewServer(ca, specs.ServerCommonName(db), names, now)
		return specs.ServerCertSecret(db, server, bundle), err
	}, func(data map[string][]byte, seal pki.Seal) pki.Check {
		return r.certs.Server(data[specs.TLSCertKey], data[specs.TLSKeyKey], ca.Cert, names, now, seal)
	})
	if err != nil || data == nil {
		return err
	}
	r.observeCertificate(db, obs, name, specs.CASecretName(db), data, true)
	r.observeCA(obs, ca)
	out.caCert, out.server = bundle, data
	return nil
}

// observeCA puts the expiry of the CA that issues into status.tls.
func (r *tlsCerts) observeCA(obs *observation, ca pki.KeyPair) {
	if obs.tls == nil {
		return
	}
	if cert, err := pki.ParseCert(ca.Cert); err == nil {
		obs.tls.status.CANotAfter = &metav1.Time{Time: cert.NotAfter}
	}
}

// checkUserCertificate reads the Secret spec.tls names (around the cache:
// it carries none of our labels) and reports on its certificate. It
// returns the CA clients verify with and the Secret's data, nil when the
// Secret is unusable.
func (r *tlsCerts) checkUserCertificate(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation) ([]byte, map[string][]byte) {
	name := db.Spec.TLS.ServerCertSecret
	secret := &corev1.Secret{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, secret)
	if err != nil {
		message := fmt.Sprintf("reading Secret %q named in spec.tls.serverCertSecret: %v", name, err)
		if apierrors.IsNotFound(err) {
			message = fmt.Sprintf("Secret %q named in spec.tls.serverCertSecret does not exist in namespace %q: create it with the keys %s, %s and %s "+
				"(a cert-manager Certificate's Secret has them), or remove spec.tls.serverCertSecret to have the operator issue one",
				name, db.Namespace, specs.TLSCertKey, specs.TLSKeyKey, specs.CACertKey)
		}
		obs.stalled = &blocker{Reason: databasev1alpha1.ReasonTLSSecretNotFound, Message: message}
		return nil, nil
	}
	var missing []string
	for _, k := range []string{specs.TLSCertKey, specs.TLSKeyKey, specs.CACertKey} {
		if len(secret.Data[k]) == 0 {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		obs.stalled = &blocker{Reason: databasev1alpha1.ReasonTLSSecretNotFound, Message: fmt.Sprintf(
			"Secret %q named in spec.tls.serverCertSecret lacks the keys %s: the servers need the certificate, its key and the CA that signed it",
			name, strings.Join(missing, ", "))}
		return nil, nil
	}
	r.observeCertificate(db, obs, name, "", secret.Data, false)
	return secret.Data[specs.CACertKey], secret.Data
}

// keepIssued keeps the certificate Secret name, issued by ca for names
// (nil: a client certificate) with bundle as its ca.crt: created by issue
// when missing, issued again when its check (against ca alone) says it is
// due, given bundle alone when only its ca.crt differs, its metadata
// aligned with the deletion policy. The check's seal goes into the Secret with every
// certificate issued, so that a restarted operator does not verify the
// certificate again (pki.Seal). It returns the Secret's data, nil when
// blocked.
func (r *tlsCerts) keepIssued(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation, name string,
	ca pki.KeyPair, bundle []byte, names []string, issue func() (*corev1.Secret, error),
	check func(data map[string][]byte, seal pki.Seal) pki.Check) (map[string][]byte, error) {
	issueSealed := func() (*corev1.Secret, pki.Check, error) {
		secret, err := issue()
		if err != nil {
			return nil, pki.Check{}, err
		}
		c := check(secret.Data, pki.Seal{Key: ca.Key})
		setSeal(secret, c.Seal)
		return secret, c, nil
	}
	secret := &corev1.Secret{}
	err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, secret)
	switch {
	case apierrors.IsNotFound(err):
		if secret, _, err = issueSealed(); err != nil {
			return nil, err
		}
		if err := r.Create(ctx, secret, client.FieldOwner(FieldOwner)); apierrors.IsAlreadyExists(err) {
			return nil, r.explainExistingSecret(ctx, db, obs, name)
		} else if err != nil {
			return nil, objectError("create", secret, name, err)
		}
		obs.created = append(obs.created, "Secret "+name)
		return secret.Data, nil
	case err != nil:
		return nil, objectError("get", secret, name, err)
	case ownedByAnother(secret, db, obs):
		return nil, nil
	}
	c := check(secret.Data, pki.Seal{Key: ca.Key, Value: secret.Annotations[databasev1alpha1.AnnotationCertificateSeal]})
	if why := children.Renewal(c, names); why != "" {
		fresh, freshCheck, err := issueSealed()
		if err != nil {
			return nil, err
		}
		// A patch over the version read: a concurrent change conflicts.
		before := secret.DeepCopy()
		secret.Data, c = fresh.Data, freshCheck
		setSeal(secret, c.Seal)
		if err := r.Patch(ctx, secret, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return nil, objectError("patch", secret, name, err)
		}
		r.event(db, corev1.EventTypeNormal, "CertificateRenewed", "Issued a new certificate in Secret %s: %s", name, why)
	} else if _, err := children.Trust(ctx, r.Client, secret, map[string][]byte{specs.CACertKey: bundle}); err != nil {
		return nil, err // a good certificate whose CAs to trust changed: a rotation of the CA, or a Secret written before it
	}
	var seal map[string]string // a Secret issued before seals gets its own
	if c.Seal != "" {
		seal = map[string]string{databasev1alpha1.AnnotationCertificateSeal: c.Seal}
	}
	return secret.Data, r.alignMetadata(ctx, secret, specs.Labels(db, specs.ComponentTLS), seal, specs.SecretOwnerReferences(db), db)
}

// setSeal puts seal into the annotation of secret, or removes it when
// there is none.
func setSeal(secret *corev1.Secret, seal string) {
	if seal == "" {
		delete(secret.Annotations, databasev1alpha1.AnnotationCertificateSeal)
		return
	}
	if secret.Annotations == nil {
		secret.Annotations = map[string]string{}
	}
	secret.Annotations[databasev1alpha1.AnnotationCertificateSeal] = seal
}

// ensureCA creates the CA once and returns its Secret. A CA Secret that
// vanished while the server certificate it issued remains stalls the
// MyDatabase.
func (r *tlsCerts) ensureCA(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation) (*corev1.Secret, error) {
	name := specs.CASecretName(db)
	secret := &corev1.Secret{}
	err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, secret)
	switch {
	case apierrors.IsNotFound(err):
		return r.createCA(ctx, db, obs)
	case err != nil:
		return nil, objectError("get", secret, name, err)
	}
	if ownedByAnother(secret, db, obs) {
		return nil, nil
	}
	if err := r.certs.Valid(specs.IssuingCA(secret.Data), r.Clock.Now()); err != nil {
		obs.stalled = &blocker{Reason: databasev1alpha1.ReasonCALost, Message: fmt.Sprintf(
			"Secret %q does not hold a usable CA (%v); the operator will not replace a CA clients may trust: restore its keys %s and %s from a backup",
			name, err, specs.CACertKey, specs.CAKeyKey)}
		return nil, nil
	}
	return secret, r.alignMetadata(ctx, secret, specs.Labels(db, specs.ComponentTLS), nil, specs.SecretOwnerReferences(db), db)
}

// ownedByAnother reports, as a wait, a Secret that still belongs to a
// deleted MyDatabase of the same name.
func ownedByAnother(secret *corev1.Secret, db *databasev1alpha1.MyDatabase, obs *observation) bool {
	ref := metav1.GetControllerOf(secret)
	if ref == nil || ref.UID == db.UID {
		return false
	}
	obs.waiting = &blocker{Reason: databasev1alpha1.ReasonWaitingForOldInstance, Message: fmt.Sprintf(
		"Secret %q still belongs to a deleted MyDatabase of the same name (uid %s); waiting for the garbage collector", secret.Name, ref.UID)}
	return true
}

// createCA makes the CA, unless a server certificate it would have
// issued exists: then the CA was lost, and is not silently replaced. The
// cache lacks the CA here, but may lag behind both Secrets (this process
// made them a moment ago), so only the API server can say whether the
// server certificate exists, and, when it does, whether the CA is really
// gone. A new MyDatabase costs one read; the create itself never replaces
// a CA the cache does not show (explainExistingSecret).
func (r *tlsCerts) createCA(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation) (*corev1.Secret, error) {
	name, server := specs.CASecretName(db), specs.IssuedServerCertSecretName(db)
	existing := &corev1.Secret{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: server}, existing)
	switch {
	case err == nil:
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, existing)
		if err == nil {
			return nil, explainSecret(db, obs, existing)
		}
		if !apierrors.IsNotFound(err) {
			return nil, objectError("get", existing, name, err)
		}
		obs.stalled = &blocker{Reason: databasev1alpha1.ReasonCALost, Message: fmt.Sprintf(
			"Secret %q (the CA) is gone, but the server certificate it issued (Secret %q) is still in use and clients may trust that CA: "+
				"restore Secret %q from a backup; or, to start over with a new CA (every client must then be given the new %s), delete Secret %q too",
			name, server, name, specs.CACertKey, server)}
		return nil, nil
	case !apierrors.IsNotFound(err):
		return nil, objectError("get", existing, server, err)
	}
	ca, err := pki.NewCA(specs.CACommonName(db), r.Clock.Now())
	if err != nil {
		return nil, err
	}
	secret := specs.CASecret(db, ca)
	if err := r.Create(ctx, secret, client.FieldOwner(FieldOwner)); apierrors.IsAlreadyExists(err) {
		return nil, r.explainExistingSecret(ctx, db, obs, name)
	} else if err != nil {
		return nil, objectError("create", secret, name, err)
	}
	obs.created = append(obs.created, "Secret "+name)
	return secret, nil
}

// observeCertificate reports on the server certificate in data: status.tls,
// and the CertificateValid condition with what a verifying client would
// trip over. The pass looks again when the certificate is due for
// renewal, or expires.
func (r *tlsCerts) observeCertificate(db *databasev1alpha1.MyDatabase, obs *observation, secret, caSecret string, data map[string][]byte, issued bool) {
	now := r.Clock.Now()
	names := specs.ServerDNSNames(db)
	check := r.certs.Server(data[specs.TLSCertKey], data[specs.TLSKeyKey], data[specs.CACertKey], names, now, pki.Seal{})
	st := &tlsState{status: &databasev1alpha1.TLSStatus{ServerCertSecret: secret, CASecret: caSecret}, reason: databasev1alpha1.ReasonCertificateValid}
	obs.tls = st
	if check.Cert == nil {
		st.reason, st.message = databasev1alpha1.ReasonCertificateInvalid, fmt.Sprintf("Secret %q: %s", secret, strings.Join(check.Problems, "; "))
		return
	}
	st.status.NotAfter, st.status.DNSNames = &metav1.Time{Time: check.Cert.NotAfter}, check.Cert.DNSNames
	renewAt := check.Cert.RenewAt()
	if issued {
		st.status.RenewAt = &metav1.Time{Time: renewAt}
	}
	switch {
	case len(check.Problems) > 0:
		st.reason, st.message = databasev1alpha1.ReasonCertificateInvalid, fmt.Sprintf(
			"the certificate in Secret %q cannot be verified by a client with sslmode=verify-full: %s", secret, strings.Join(check.Problems, "; "))
	case !issued && !now.Before(renewAt):
		st.reason, st.message = databasev1alpha1.ReasonCertificateExpiring, fmt.Sprintf(
			"the certificate in Secret %q expires at %s: renew it (the servers reload it when the Secret changes)", secret, check.Cert.NotAfter.UTC().Format("2006-01-02T15:04:05Z"))
		obs.recheck(check.Cert.NotAfter.Sub(now))
	default:
		st.message = fmt.Sprintf("the certificate in Secret %q covers every name clients use and is valid until %s",
			secret, check.Cert.NotAfter.UTC().Format("2006-01-02T15:04:05Z"))
		obs.recheck(renewAt.Sub(now))
	}
	if !issued {
		// No watch brings a change to the user's Secret (the cache holds
		// only ours): status follows it within userCertRecheck.
		obs.recheck(userCertRecheck)
	}
}

// userCertRecheck is how often a user's certificate is read again.
const userCertRecheck = 10 * time.Minute

// alignConnectionSecret gives the generated credentials Secret the CA
// clients verify the servers with, and makes its uri ask for verify-full:
// a Secret made before TLS, or since a change of CA. The password is never
// touched here. A Secret the cache does not show yet was just made, with
// both.
func (r *credentials) alignConnectionSecret(ctx context.Context, db *databasev1alpha1.MyDatabase, caCert []byte) error {
	secret := &corev1.Secret{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: specs.GeneratedCredentialsSecretName(db)}, secret); err != nil {
		return objectError("get", secret, specs.GeneratedCredentialsSecretName(db), client.IgnoreNotFound(err))
	}
	uri := specs.WithVerifyFull(secret.Data[specs.SecretURIKey])
	if bytes.Equal(secret.Data[specs.CACertKey], caCert) && bytes.Equal(secret.Data[specs.SecretURIKey], uri) {
		return nil
	}
	before := secret.DeepCopy()
	secret.Data[specs.CACertKey] = caCert
	secret.Data[specs.SecretURIKey] = uri
	if err := r.Patch(ctx, secret, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return objectError("patch", secret, secret.Name, err)
	}
	return nil
}

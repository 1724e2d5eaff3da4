package mydatabase

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/pki"
	"example.com/myoperator/internal/specs"
)

// Rotation of the operator's CA without downtime (docs/security.md, CA
// rotation). The CA Secret holds the rotation (specs.CAPhase); tlsCerts,
// credentials, roles and the pooler controller write whatever it says into
// their Secrets, and this component moves it on, one step a pass, each
// step only once everything the last one changed is in use:
//
//  1. a request (spec.tls.caRotation.requestedAt, a value the CA Secret
//     does not record) or a CA older than maxAge makes a new CA, trusted
//     beside the old one, which still issues (Trusting): every ca.crt the
//     operator writes carries both;
//  2. once every Secret carries both, every ready server reports the
//     files loaded (contract.Report.Certificates) and the phase has lasted
//     its trust period, the new CA issues and the old key is deleted
//     (Reissuing): every certificate is issued again, the bundles still
//     carry both;
//  3. once every certificate in the Secrets comes from the new CA, every
//     ready server reports them loaded and the phase has lasted its trust
//     period again, ca.crt becomes the new CA alone (Succeeded).
//
// A client that verifies with a ca.crt it read during the rotation always
// has the CA of the certificate the server presents: the servers present
// the new CA's certificate only once the bundles carry it, and the old CA
// leaves the bundles only once no server presents its certificates. The
// servers check the replicas' and poolers' client certificates with the
// same bundle (the replication Secret's ca.crt), so replication and the
// poolers' logins hold through every phase too.

// caRotation is the component that moves a rotation of the operator's CA
// on; it runs after every component that writes a ca.crt, and reads what
// tlsCerts left.
type caRotation struct {
	*kit
	*scope
	tls input[tlsResult]
}

// caStep is what a pass does to the rotation.
type caStep int

const (
	caStay    caStep = iota // nothing to do, or wait
	caStart                 // make the new CA, trusted beside the old
	caReissue               // the new CA issues, the old key goes
	caFinish                // the old CA leaves the bundles
)

// caFacts is what the next step of a rotation depends on.
type caFacts struct {
	phase databasev1alpha1.CARotationPhase
	// requested: the spec asks for a rotation the CA Secret does not
	// record; aged: the CA is older than spec.tls.caRotation.maxAge.
	requested, aged bool
	// pending names what does not carry the phase's certificates yet
	// (Secrets), unloaded the ready servers whose reports do not show
	// them loaded.
	pending, unloaded []string
	// since is when the phase began, settle how long it lasts at least.
	since  time.Time
	settle time.Duration
	now    time.Time
}

// nextCAStep decides the step of a pass from the facts, and says in words
// what a rotation under way waits for.
func nextCAStep(f caFacts) (caStep, string) {
	if f.phase == "" {
		if f.requested || f.aged {
			return caStart, ""
		}
		return caStay, ""
	}
	what := "both CAs"
	if f.phase == databasev1alpha1.CARotationReissuing {
		what = "certificates from the new CA"
	}
	switch until := f.since.Add(f.settle); {
	case len(f.pending) > 0:
		return caStay, fmt.Sprintf("%s: waiting for %s to carry %s", f.phase, strings.Join(f.pending, ", "), what)
	case len(f.unloaded) > 0:
		return caStay, fmt.Sprintf("%s: waiting for the servers %s to report %s loaded", f.phase, strings.Join(f.unloaded, ", "), what)
	case f.now.Before(until):
		return caStay, fmt.Sprintf("%s: every Secret and server has %s; the trust period lasts until %s",
			f.phase, what, until.UTC().Format(time.RFC3339))
	case f.phase == databasev1alpha1.CARotationTrusting:
		return caReissue, ""
	}
	return caFinish, ""
}

// reconcile takes the rotation's step of the pass and reports it in
// status.tls.caRotation; a rotation under way keeps the MyDatabase
// Reconciling (RotatingCA).
func (r *caRotation) reconcile(ctx context.Context, obs *observation) error {
	t := r.tls.get()
	if t.ca == nil || t.replication == nil {
		return nil
	}
	secret, now := t.ca, r.Clock.Now()
	f := caFacts{phase: specs.CAPhase(secret.Data), now: now, settle: max(specs.CATrustPeriod(r.db), r.SecretSync)}
	request := specs.CARotationRequest(r.db)
	f.requested = request != "" && request != secret.Annotations[databasev1alpha1.AnnotationCARotationRequest]
	if maxAge := specs.CAMaxAge(r.db); maxAge > 0 {
		if cert, err := pki.ParseCert(specs.IssuingCA(secret.Data).Cert); err == nil {
			f.aged = !now.Before(cert.NotBefore.Add(maxAge))
		}
	}
	if f.phase != "" {
		f.since = annotationTime(secret, databasev1alpha1.AnnotationCARotationPhaseSince)
		pending, err := r.pending(ctx, secret.Data, t, f.phase)
		if err != nil {
			return err
		}
		f.pending, f.unloaded = pending, unloaded(r.pods, podReports(r.pods), t)
	}
	step, message := nextCAStep(f)
	var err error
	switch step {
	case caStart:
		err = r.start(ctx, secret, request, f.requested)
	case caReissue:
		err = r.advance(ctx, secret, specs.ReissuingCAData(secret.Data), nil, "CAReissuing",
			"The new CA of Secret %s issues from now on and the old CA's key is deleted; both CAs stay trusted while every certificate is issued again")
	case caFinish:
		err = r.advance(ctx, secret, specs.RotatedCAData(secret.Data), map[string]string{
			databasev1alpha1.AnnotationCARotationFinished: now.UTC().Format(time.RFC3339)}, "CARotated",
			"Every certificate in use comes from the new CA of Secret %s: the old CA is no longer trusted")
	}
	if err != nil {
		return err
	}
	obs.caRotation = caRotationStatus(secret, message)
	if st := obs.caRotation; st != nil && st.Phase != databasev1alpha1.CARotationSucceeded && obs.waiting == nil {
		obs.waiting = &blocker{Reason: databasev1alpha1.ReasonRotatingCA, Message: "rotating the CA: " + st.Message}
	}
	return nil
}

// start makes the new CA and trusts it beside the old one, recording the
// request it fulfils (the spec's, also when the CA's age started it).
func (r *caRotation) start(ctx context.Context, secret *corev1.Secret, request string, requested bool) error {
	next, err := pki.NewCA(specs.CACommonName(r.db), r.Clock.Now())
	if err != nil {
		return err
	}
	by := specs.CARotationByAge
	if requested {
		by = request
	}
	stamp := r.Clock.Now().UTC().Format(time.RFC3339)
	return r.advance(ctx, secret, specs.TrustingCAData(secret.Data, next), map[string]string{
		databasev1alpha1.AnnotationCARotationRequest: request,
		databasev1alpha1.AnnotationCARotationBy:      by,
		databasev1alpha1.AnnotationCARotationStarted: stamp,
	}, "CARotationStarted", "A new CA in Secret %s is trusted beside the old one: every ca.crt the operator writes carries both")
}

// advance writes the CA Secret's data for the next phase, with the
// phase's start and the annotations given, in one write over the version
// read: a pass that read an older CA Secret conflicts instead of taking
// a step twice.
func (r *caRotation) advance(ctx context.Context, secret *corev1.Secret, data map[string][]byte, annotations map[string]string,
	reason, format string) error {
	before := secret.DeepCopy()
	secret.Data = data
	add := map[string]string{databasev1alpha1.AnnotationCARotationPhaseSince: r.Clock.Now().UTC().Format(time.RFC3339)}
	maps.Copy(add, annotations)
	secret.Annotations = withEntries(secret.Annotations, add)
	if _, ok := annotations[databasev1alpha1.AnnotationCARotationStarted]; ok {
		delete(secret.Annotations, databasev1alpha1.AnnotationCARotationFinished)
	}
	if err := r.Patch(ctx, secret, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return objectError("patch", secret, secret.Name, err)
	}
	r.event(r.db, corev1.EventTypeNormal, reason, format, secret.Name)
	return nil
}

// pending names the Secrets that do not carry what the phase asks for yet:
// the CA Secret's bundle as ca.crt (the clients' CA in the connection and
// role Secrets, which is the user's with serverCertSecret), and in
// Reissuing certificates issued by the CA that issues. A pooler's Secret
// (written by the pooler controller) is among them.
func (r *caRotation) pending(ctx context.Context, ca map[string][]byte, t tlsResult, phase databasev1alpha1.CARotationPhase) ([]string, error) {
	bundle, issuer, now := ca[specs.CACertKey], specs.IssuingCA(ca).Cert, r.Clock.Now()
	reissuing := phase == databasev1alpha1.CARotationReissuing
	var out []string
	// issued is whether a certificate of data verifies against the CA
	// that issues alone (what every certificate must in Reissuing).
	issued := func(data map[string][]byte, certKey, keyKey string, server bool, names []string, role string) bool {
		if !reissuing {
			return true
		}
		if server {
			return len(r.certs.Server(data[certKey], data[keyKey], issuer, names, now, pki.Seal{}).Problems) == 0
		}
		return len(r.certs.Client(data[certKey], data[keyKey], issuer, role, now, pki.Seal{}).Problems) == 0
	}
	if d := t.replication; !bytes.Equal(d[specs.CACertKey], bundle) ||
		!issued(d, specs.TLSCertKey, specs.TLSKeyKey, false, nil, contract.ReplicationRole) {
		out = append(out, "Secret "+specs.ReplicationCertSecretName(r.db))
	}
	if !specs.UserSuppliedServerCert(r.db) {
		if d := t.server; !bytes.Equal(d[specs.CACertKey], bundle) ||
			!issued(d, specs.TLSCertKey, specs.TLSKeyKey, true, specs.ServerDNSNames(r.db), "") {
			out = append(out, "Secret "+specs.IssuedServerCertSecretName(r.db))
		}
	}
	clientSecrets, err := r.roleSecrets(ctx, r.db)
	if err != nil {
		return nil, err
	}
	if !specs.UserSuppliedCredentials(r.db) {
		creds := &corev1.Secret{}
		if err := r.Get(ctx, client.ObjectKey{Namespace: r.db.Namespace, Name: specs.GeneratedCredentialsSecretName(r.db)}, creds); err == nil {
			clientSecrets = append(clientSecrets, *creds)
		}
	}
	for _, s := range clientSecrets {
		if !bytes.Equal(s.Data[specs.CACertKey], t.caCert) {
			out = append(out, "Secret "+s.Name)
		}
	}
	poolers, err := r.poolerSecrets(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range poolers {
		d := p.secret.Data
		if p.secret.Name == "" || !bytes.Equal(d[specs.CACertKey], bundle) || !bytes.Equal(d[contract.PoolerServerCAKey], t.server[specs.CACertKey]) ||
			!issued(d, specs.TLSCertKey, specs.TLSKeyKey, true, specs.PoolerDNSNames(p.pooler), "") ||
			!issued(d, contract.PoolerClientCertKey, contract.PoolerClientKeyKey, false, nil, contract.PoolerRole) {
			out = append(out, fmt.Sprintf("Secret %s (pooler %s)", specs.PoolerSecretName(p.pooler), p.pooler.Name))
		}
	}
	slices.Sort(out)
	return out, nil
}

// poolerSecret is a pooler of the MyDatabase and its Secret (empty when it
// has none yet).
type poolerSecret struct {
	pooler *databasev1alpha1.MyDatabasePooler
	secret corev1.Secret
}

// poolerSecrets are the poolers that lead to the MyDatabase, with their
// Secrets; none when the pooler CRD is not installed. No watch brings a
// change of a pooler's Secret to the MyDatabase: a rotation under way is
// looked at again every few seconds (RotatingCA waits).
func (r *caRotation) poolerSecrets(ctx context.Context) ([]poolerSecret, error) {
	if !r.poolers {
		return nil, nil
	}
	list := &databasev1alpha1.MyDatabasePoolerList{}
	if err := r.List(ctx, list, client.InNamespace(r.db.Namespace)); err != nil {
		return nil, objectError("list", &databasev1alpha1.MyDatabasePooler{}, "", err)
	}
	var out []poolerSecret
	for i := range list.Items {
		p := &list.Items[i]
		if p.Spec.Database != r.db.Name || !p.DeletionTimestamp.IsZero() {
			continue
		}
		ps := poolerSecret{pooler: p}
		if err := r.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: specs.PoolerSecretName(p)}, &ps.secret); client.IgnoreNotFound(err) != nil {
			return nil, objectError("get", &ps.secret, specs.PoolerSecretName(p), err)
		}
		out = append(out, ps)
	}
	return out, nil
}

// unloaded names the ready servers whose last report shows certificate
// files other than the Secrets' (contract.CertificatesDigest). A server
// that is not ready reads the files when it starts; an instance manager
// that reports no digest (older than the report) is covered by the trust
// period alone.
func unloaded(pods []corev1.Pod, reports map[string]*contract.Report, t tlsResult) []string {
	want := contract.CertificatesDigest(t.server[specs.TLSCertKey], t.server[specs.CACertKey],
		t.replication[specs.TLSCertKey], t.replication[specs.CACertKey])
	var out []string
	for _, p := range pods {
		rep := reports[p.Name]
		if rep == nil || !rep.Ready || rep.Certificates == "" || rep.Certificates == want {
			continue
		}
		out = append(out, p.Name)
	}
	return out
}

// caRotationStatus is status.tls.caRotation from the CA Secret (as this
// pass left it) and what the phase waits for; nil when the CA was never
// rotated.
func caRotationStatus(secret *corev1.Secret, waiting string) *databasev1alpha1.CARotationStatus {
	a := secret.Annotations
	if a[databasev1alpha1.AnnotationCARotationStarted] == "" {
		return nil
	}
	st := &databasev1alpha1.CARotationStatus{
		Phase:      specs.CAPhase(secret.Data),
		Request:    a[databasev1alpha1.AnnotationCARotationBy],
		StartedAt:  timeOf(annotationTime(secret, databasev1alpha1.AnnotationCARotationStarted)),
		PhaseSince: timeOf(annotationTime(secret, databasev1alpha1.AnnotationCARotationPhaseSince)),
		Message:    waiting,
	}
	newCA := specs.IssuingCA(secret.Data).Cert
	switch st.Phase {
	case databasev1alpha1.CARotationTrusting:
		newCA = secret.Data[specs.NextCACertKey]
		st.Message = cmp.Or(st.Message, "Trusting: every ca.crt the operator writes now carries both CAs")
	case databasev1alpha1.CARotationReissuing:
		st.Message = cmp.Or(st.Message, "Reissuing: the new CA issues every certificate again; both CAs stay trusted")
	default:
		st.Phase = databasev1alpha1.CARotationSucceeded
		st.FinishedAt = timeOf(annotationTime(secret, databasev1alpha1.AnnotationCARotationFinished))
		st.Message = "every certificate in use comes from the new CA, which every ca.crt carries alone; the old CA's key is deleted"
	}
	if cert, err := pki.ParseCert(newCA); err == nil {
		st.NewCANotAfter = &metav1.Time{Time: cert.NotAfter}
	}
	return st
}

// annotationTime reads an RFC 3339 annotation, the zero time when absent.
func annotationTime(o metav1.Object, key string) time.Time {
	t, _ := time.Parse(time.RFC3339, o.GetAnnotations()[key])
	return t
}

// timeOf is t for the status, nil when zero.
func timeOf(t time.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	return &metav1.Time{Time: t}
}

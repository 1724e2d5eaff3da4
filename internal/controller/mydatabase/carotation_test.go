package mydatabase

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/pki"
	"example.com/myoperator/internal/specs"
)

// TestNextCAStep: the pure decision of a pass. A rotation starts on a new
// request or an aged CA; a phase moves on only once nothing is pending,
// every ready server has loaded the files, and the trust period has
// passed, in that order of what the message names.
func TestNextCAStep(t *testing.T) {
	now := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	trusting, reissuing := databasev1alpha1.CARotationTrusting, databasev1alpha1.CARotationReissuing
	for name, tc := range map[string]struct {
		f       caFacts
		step    caStep
		message string
	}{
		"idle":                  {caFacts{now: now}, caStay, ""},
		"requested":             {caFacts{requested: true, now: now}, caStart, ""},
		"aged":                  {caFacts{aged: true, now: now}, caStart, ""},
		"requested during one":  {caFacts{phase: trusting, requested: true, since: now, settle: time.Minute, now: now}, caStay, "trust period"},
		"a Secret behind":       {caFacts{phase: trusting, pending: []string{"Secret x-credentials"}, unloaded: []string{"x-0"}, now: now}, caStay, "waiting for Secret x-credentials to carry both CAs"},
		"a server behind":       {caFacts{phase: trusting, unloaded: []string{"x-0", "x-1"}, now: now}, caStay, "waiting for the servers x-0, x-1 to report both CAs loaded"},
		"within the period":     {caFacts{phase: trusting, since: now, settle: 10 * time.Minute, now: now.Add(9 * time.Minute)}, caStay, "until 2026-12-06T00:10:00Z"},
		"trusted long enough":   {caFacts{phase: trusting, since: now, settle: 10 * time.Minute, now: now.Add(10 * time.Minute)}, caReissue, ""},
		"a certificate behind":  {caFacts{phase: reissuing, pending: []string{"Secret x-server-tls"}, now: now}, caStay, "waiting for Secret x-server-tls to carry certificates from the new CA"},
		"reissued, loading":     {caFacts{phase: reissuing, unloaded: []string{"x-1"}, now: now}, caStay, "x-1 to report certificates from the new CA loaded"},
		"reissued long enough":  {caFacts{phase: reissuing, since: now, now: now}, caFinish, ""},
		"reissued, not settled": {caFacts{phase: reissuing, since: now, settle: time.Minute, now: now}, caStay, "Reissuing: every Secret and server has certificates from the new CA"},
	} {
		t.Run(name, func(t *testing.T) {
			step, message := nextCAStep(tc.f)
			if step != tc.step || !strings.Contains(message, tc.message) || (tc.message == "" && message != "") {
				t.Errorf("step %d %q, want %d with %q", step, message, tc.step, tc.message)
			}
		})
	}
}

// caSecrets are the Secrets of a MyDatabase that carry a trust bundle or
// a certificate, as they are now.
type caSecrets struct {
	ca, server, replication, credentials, role map[string][]byte
}

func readCASecrets(t *testing.T, db *databasev1alpha1.MyDatabase, role string) caSecrets {
	t.Helper()
	return caSecrets{
		ca:          secretData(t, db.Namespace, specs.CASecretName(db)),
		server:      secretData(t, db.Namespace, specs.IssuedServerCertSecretName(db)),
		replication: secretData(t, db.Namespace, specs.ReplicationCertSecretName(db)),
		credentials: secretData(t, db.Namespace, specs.GeneratedCredentialsSecretName(db)),
		role:        secretData(t, db.Namespace, specs.GeneratedRoleSecretName(db, role)),
	}
}

// everyBundleVerifiesEveryLeaf is the invariant of a rotation: a client
// (or a server checking a replica) that verifies with any ca.crt the
// operator wrote accepts every certificate the Secrets hold.
func everyBundleVerifiesEveryLeaf(db *databasev1alpha1.MyDatabase, s caSecrets) error {
	now := reconciler.Clock.Now()
	bundles := map[string][]byte{"the CA Secret": s.ca[specs.CACertKey], "the server Secret": s.server[specs.CACertKey],
		"the replication Secret": s.replication[specs.CACertKey], "the credentials Secret": s.credentials[specs.CACertKey],
		"the role Secret": s.role[specs.CACertKey]}
	for what, bundle := range bundles {
		if c := pki.CheckServer(s.server[specs.TLSCertKey], s.server[specs.TLSKeyKey], bundle, specs.ServerDNSNames(db), now); len(c.Problems) > 0 {
			return fmt.Errorf("ca.crt of %s does not verify the server certificate: %v", what, c.Problems)
		}
		if c := pki.CheckClient(s.replication[specs.TLSCertKey], s.replication[specs.TLSKeyKey], bundle, contract.ReplicationRole, now); len(c.Problems) > 0 {
			return fmt.Errorf("ca.crt of %s does not verify the replication certificate: %v", what, c.Problems)
		}
	}
	return nil
}

// reportLoaded plays the instance managers of the pods: ready reports
// that show the certificate files of the Secrets as they are now loaded.
func reportLoaded(t *testing.T, db *databasev1alpha1.MyDatabase, role string) {
	t.Helper()
	s := readCASecrets(t, db, role)
	digest := contract.CertificatesDigest(s.server[specs.TLSCertKey], s.server[specs.CACertKey],
		s.replication[specs.TLSCertKey], s.replication[specs.CACertKey])
	for i, r := range []string{databasev1alpha1.RolePrimary, databasev1alpha1.RoleReplica} {
		publishReport(t, db.Namespace, fmt.Sprintf("%s-%d", db.Name, i), contract.Report{Role: r, Ready: true, Certificates: digest, Time: time.Now().UTC()})
	}
}

func caRotationIs(phase databasev1alpha1.CARotationPhase, message string) func(*databasev1alpha1.MyDatabase) error {
	return func(db *databasev1alpha1.MyDatabase) error {
		if db.Status.TLS == nil || db.Status.TLS.CARotation == nil {
			return fmt.Errorf("no status.tls.caRotation: %+v", db.Status.TLS)
		}
		st := db.Status.TLS.CARotation
		if st.Phase != phase || !strings.Contains(st.Message, message) {
			return fmt.Errorf("caRotation %s %q, want %s with %q", st.Phase, st.Message, phase, message)
		}
		return nil
	}
}

// settledTo waits until every bundle is the CA Secret's and both servers'
// certificates come from the CA that issues, checking the invariant on
// the way.
func settledTo(t *testing.T, db *databasev1alpha1.MyDatabase, role string, wantCerts int) caSecrets {
	t.Helper()
	var s caSecrets
	eventually(t, "every Secret following the CA Secret", func() error {
		s = readCASecrets(t, db, role)
		if err := everyBundleVerifiesEveryLeaf(db, s); err != nil {
			t.Fatal(err) // never, at any point
		}
		bundle := s.ca[specs.CACertKey]
		if n := len(pki.Split(bundle)); n != wantCerts {
			return fmt.Errorf("the CA Secret's ca.crt holds %d certificates, want %d", n, wantCerts)
		}
		for what, d := range map[string]map[string][]byte{"server": s.server, "replication": s.replication, "credentials": s.credentials, "role": s.role} {
			if !bytes.Equal(d[specs.CACertKey], bundle) {
				return fmt.Errorf("the %s Secret's ca.crt is not the CA Secret's", what)
			}
		}
		issuer := specs.IssuingCA(s.ca).Cert
		if c := pki.CheckServer(s.server[specs.TLSCertKey], s.server[specs.TLSKeyKey], issuer, specs.ServerDNSNames(db), reconciler.Clock.Now()); len(c.Problems) > 0 {
			return fmt.Errorf("the server certificate is not from the CA that issues: %v", c.Problems)
		}
		if c := pki.CheckClient(s.replication[specs.TLSCertKey], s.replication[specs.TLSKeyKey], issuer, contract.ReplicationRole, reconciler.Clock.Now()); len(c.Problems) > 0 {
			return fmt.Errorf("the replication certificate is not from the CA that issues: %v", c.Problems)
		}
		return nil
	})
	return s
}

// noSecretHolds fails when a Secret of the namespace holds key.
func noSecretHolds(t *testing.T, ns string, key []byte) {
	t.Helper()
	secrets := &corev1.SecretList{}
	if err := k8s.List(context.Background(), secrets, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		for k, v := range s.Data {
			if bytes.Contains(v, bytes.TrimSpace(key)) {
				t.Fatalf("Secret %s still holds the old CA's key under %s", s.Name, k)
			}
		}
	}
}

// TestCARotation: a request walks the operator's CA through Trusting
// (both CAs in every bundle, certificates still from the old one, until
// both servers report the bundle loaded), Reissuing (the new CA issues,
// the old key is gone, until both servers report the new certificates
// loaded) and Succeeded (the new CA alone). At every look every bundle
// verifies every certificate. A second request rotates again; the same
// request does not.
func TestCARotation(t *testing.T) {
	ns := namespace(t)
	db := newDB(ns, "car", func(db *databasev1alpha1.MyDatabase) { db.Spec.Replicas = ptr.To[int32](2) })
	db.Spec.Roles = []databasev1alpha1.RoleSpec{{Name: "reader"}}
	db.Spec.TLS.CARotation = &databasev1alpha1.CARotationSpec{TrustPeriod: &metav1.Duration{}}
	db = create(t, db)
	rotationPods(t, db, 2)
	before := settledTo(t, db, "reader", 1)
	reportLoaded(t, db, "reader")

	first := metav1.NewTime(time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC))
	update(t, db, func(db *databasev1alpha1.MyDatabase) { db.Spec.TLS.CARotation.RequestedAt = &first })

	// Trusting: both CAs everywhere, the old one still issues, the servers
	// have not loaded the bundle.
	waitFor(t, db, "Trusting, waiting for the servers", caRotationIs(databasev1alpha1.CARotationTrusting, "car-0, car-1"))
	trusting := settledTo(t, db, "reader", 2)
	if !bytes.Equal(trusting.server[specs.TLSCertKey], before.server[specs.TLSCertKey]) ||
		!bytes.Equal(trusting.ca[specs.CAKeyKey], before.ca[specs.CAKeyKey]) {
		t.Fatal("Trusting issued a certificate, or changed the CA that issues")
	}
	waitFor(t, db, "Reconciling: RotatingCA", reconcilingWith(databasev1alpha1.ReasonRotatingCA, "Trusting"))

	// Reissuing: the new CA issues, the old key is gone.
	reportLoaded(t, db, "reader")
	waitFor(t, db, "Reissuing", caRotationIs(databasev1alpha1.CARotationReissuing, ""))
	reissuing := settledTo(t, db, "reader", 2)
	if bytes.Equal(reissuing.server[specs.TLSCertKey], before.server[specs.TLSCertKey]) ||
		bytes.Equal(reissuing.replication[specs.TLSCertKey], before.replication[specs.TLSCertKey]) {
		t.Fatal("the certificates were not issued again")
	}
	noSecretHolds(t, ns, before.ca[specs.CAKeyKey])
	waitFor(t, db, "Reissuing waits for the servers", caRotationIs(databasev1alpha1.CARotationReissuing, "car-0, car-1"))

	// Succeeded: the new CA alone.
	reportLoaded(t, db, "reader")
	waitFor(t, db, "Succeeded and Ready", func(db *databasev1alpha1.MyDatabase) error {
		if err := caRotationIs(databasev1alpha1.CARotationSucceeded, "")(db); err != nil {
			return err
		}
		if st := db.Status.TLS.CARotation; st.Request != "2026-12-06T00:00:00Z" || st.FinishedAt == nil || st.NewCANotAfter == nil {
			return fmt.Errorf("caRotation %+v", st)
		}
		return phaseIs(databasev1alpha1.PhaseReady)(db)
	})
	after := settledTo(t, db, "reader", 1)
	if !bytes.Equal(after.ca[specs.CACertKey], pki.Issuer(reissuing.ca[specs.CACertKey])) {
		t.Fatal("the CA left is not the new one")
	}
	old := pki.Issuer(before.ca[specs.CACertKey])
	if c := pki.CheckServer(before.server[specs.TLSCertKey], before.server[specs.TLSKeyKey], after.credentials[specs.CACertKey],
		specs.ServerDNSNames(db), reconciler.Clock.Now()); len(c.Problems) == 0 || bytes.Contains(after.credentials[specs.CACertKey], old) {
		t.Fatal("the old CA is still trusted")
	}
	eventually(t, "a CARotated event", eventWith(ns, "CARotated", "car-ca"))

	// The same request again: nothing.
	reconcileOnce(t, db)
	if got := secretData(t, ns, "car-ca"); len(pki.Split(got[specs.CACertKey])) != 1 || !bytes.Equal(got[specs.CAKeyKey], after.ca[specs.CAKeyKey]) {
		t.Fatal("a request already fulfilled rotated the CA again")
	}

	// A new request: a new rotation, through to the end.
	second := metav1.NewTime(first.Add(time.Hour))
	update(t, db, func(db *databasev1alpha1.MyDatabase) { db.Spec.TLS.CARotation.RequestedAt = &second })
	waitFor(t, db, "Trusting again", caRotationIs(databasev1alpha1.CARotationTrusting, ""))
	settledTo(t, db, "reader", 2)
	reportLoaded(t, db, "reader")
	waitFor(t, db, "Reissuing again", caRotationIs(databasev1alpha1.CARotationReissuing, ""))
	settledTo(t, db, "reader", 2)
	reportLoaded(t, db, "reader")
	waitFor(t, db, "Succeeded again", caRotationIs(databasev1alpha1.CARotationSucceeded, ""))
	final := settledTo(t, db, "reader", 1)
	if bytes.Equal(final.ca[specs.CACertKey], after.ca[specs.CACertKey]) {
		t.Fatal("the second request did not make a new CA")
	}
	noSecretHolds(t, ns, after.ca[specs.CAKeyKey])
}

// TestCARotationByAge: spec.tls.caRotation.maxAge rotates a CA older than
// it, once: the new CA is young.
func TestCARotationByAge(t *testing.T) {
	ns := namespace(t)
	db := newDB(ns, "aged")
	db.Spec.TLS.CARotation = &databasev1alpha1.CARotationSpec{TrustPeriod: &metav1.Duration{}}
	db = create(t, db)
	rotationPods(t, db, 1)
	before := secretData(t, ns, "aged-ca")
	// A CA made 400 days before the suite's clock, with a maxAge of a year.
	oldCA, err := pki.NewCA(specs.CACommonName(db), reconciler.Clock.Now().Add(-400*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ca := &corev1.Secret{}
	if err := get(ns, "aged-ca", ca); err != nil {
		t.Fatal(err)
	}
	ca.Data = map[string][]byte{specs.CACertKey: oldCA.Cert, specs.CAKeyKey: oldCA.Key}
	if err := k8s.Update(context.Background(), ca); err != nil {
		t.Fatal(err)
	}
	update(t, db, func(db *databasev1alpha1.MyDatabase) {
		db.Spec.TLS.CARotation.MaxAge = &metav1.Duration{Duration: 365 * 24 * time.Hour}
	})
	waitFor(t, db, "a rotation by age, through to the end", func(db *databasev1alpha1.MyDatabase) error {
		if err := caRotationIs(databasev1alpha1.CARotationSucceeded, "")(db); err != nil {
			return err
		}
		if db.Status.TLS.CARotation.Request != specs.CARotationByAge {
			return fmt.Errorf("request %q", db.Status.TLS.CARotation.Request)
		}
		return nil
	})
	after := secretData(t, ns, "aged-ca")
	if bytes.Equal(after[specs.CAKeyKey], oldCA.Key) || bytes.Equal(after[specs.CAKeyKey], before[specs.CAKeyKey]) {
		t.Fatal("no new CA")
	}
	reconcileOnce(t, db)
	if got := secretData(t, ns, "aged-ca"); !bytes.Equal(got[specs.CAKeyKey], after[specs.CAKeyKey]) {
		t.Fatal("the new CA was rotated again")
	}
}

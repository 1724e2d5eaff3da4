package mydatabase

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/pki"
	"example.com/myoperator/internal/specs"
)

// serverCertificate reads the server certificate Secret and checks its
// certificate against ca.crt and the names of db at the suite's clock.
func serverCertificate(t *testing.T, db *databasev1alpha1.MyDatabase) (*corev1.Secret, pki.Check) {
	t.Helper()
	s := &corev1.Secret{}
	if err := get(db.Namespace, specs.IssuedServerCertSecretName(db), s); err != nil {
		t.Fatal(err)
	}
	return s, pki.CheckServer(s.Data[specs.TLSCertKey], s.Data[specs.TLSKeyKey], s.Data[specs.CACertKey],
		specs.ServerDNSNames(db), reconciler.Clock.Now())
}

// TestServerCertificateIssuedAndRenewed: a new MyDatabase gets a CA and a
// server certificate for every name clients use; the credentials Secret
// gets the CA and asks for verify-full. More replicas, or a certificate
// due for renewal, get a new certificate from the same CA, which is never
// made again.
func TestServerCertificateIssuedAndRenewed(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "tls"))
	eventually(t, "the server certificate", exists(ns, "tls-server-tls", &corev1.Secret{}))
	ca := secretData(t, ns, "tls-ca")
	secret, check := serverCertificate(t, db)
	if len(check.Problems) > 0 || check.Renew {
		t.Fatalf("the issued certificate: problems %v, renew %t", check.Problems, check.Renew)
	}
	if secret.Type != corev1.SecretTypeTLS || !bytes.Equal(secret.Data[specs.CACertKey], ca[specs.CACertKey]) {
		t.Errorf("server Secret of type %s, ca.crt from the CA Secret %t", secret.Type, bytes.Equal(secret.Data[specs.CACertKey], ca[specs.CACertKey]))
	}
	for _, name := range []string{"tls-rw", "tls-rw." + ns + ".svc", "tls-0.tls-headless." + ns + ".svc.cluster.local"} {
		if !slices.Contains(check.Cert.DNSNames, name) {
			t.Errorf("the certificate does not name %s: %v", name, check.Cert.DNSNames)
		}
	}
	eventually(t, "ca.crt in the credentials Secret", func() error {
		creds := secretData(t, ns, "tls-credentials")
		u, err := url.Parse(string(creds[specs.SecretURIKey]))
		if err != nil {
			return err
		}
		if !bytes.Equal(creds[specs.CACertKey], ca[specs.CACertKey]) || u.Query().Get("sslmode") != "verify-full" {
			return fmt.Errorf("ca.crt %t, uri query %q", bytes.Equal(creds[specs.CACertKey], ca[specs.CACertKey]), u.RawQuery)
		}
		return nil
	})
	waitFor(t, db, "status.tls and CertificateValid", func(db *databasev1alpha1.MyDatabase) error {
		c := condition(db, databasev1alpha1.ConditionCertificateValid)
		if db.Status.TLS == nil || db.Status.TLS.CASecret != "tls-ca" || db.Status.TLS.RenewAt == nil ||
			c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("status.tls %+v, CertificateValid %+v", db.Status.TLS, c)
		}
		return nil
	})

	// Three servers: two more pods to name.
	update(t, db, func(db *databasev1alpha1.MyDatabase) { db.Spec.Replicas = ptr.To[int32](3) })
	eventually(t, "a certificate that names tls-2", func() error {
		_, check := serverCertificate(t, db)
		if !slices.Contains(check.Cert.DNSNames, "tls-2.tls-headless."+ns) || len(check.Problems) > 0 {
			return fmt.Errorf("names %v, problems %v", check.Cert.DNSNames, check.Problems)
		}
		return nil
	})
	eventually(t, "a CertificateRenewed event", eventWith(ns, "CertificateRenewed", "the names clients use changed"))

	// A certificate past two thirds of its life, as if issued 61 days ago.
	caPair := pki.KeyPair{Cert: ca[specs.CACertKey], Key: ca[specs.CAKeyKey]}
	old, err := pki.NewServer(caPair, "tls-rw", specs.ServerDNSNames(db), reconciler.Clock.Now().Add(-61*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	secret, _ = serverCertificate(t, db)
	secret.Data[specs.TLSCertKey], secret.Data[specs.TLSKeyKey] = old.Cert, old.Key
	if err := k8s.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the old certificate renewed", func() error {
		s, check := serverCertificate(t, db)
		if bytes.Equal(s.Data[specs.TLSCertKey], old.Cert) || check.Renew {
			return errors.New("not renewed yet")
		}
		return nil
	})
	if got := secretData(t, ns, "tls-ca"); !bytes.Equal(got[specs.CAKeyKey], ca[specs.CAKeyKey]) {
		t.Error("the CA was made again")
	}

	// The CA lost: Stalled, and no new CA.
	if err := k8s.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tls-ca"}}); err != nil {
		t.Fatal(err)
	}
	update(t, db, func(db *databasev1alpha1.MyDatabase) { db.Spec.Parameters = map[string]string{"work_mem": "8MB"} })
	waitFor(t, db, "Stalled: CA lost", stalledWith(databasev1alpha1.ReasonCALost, "tls-ca"))
	if err := get(ns, "tls-ca", &corev1.Secret{}); err == nil {
		t.Error("a new CA was made while the certificate of the lost one is in use")
	}
}

// TestCertificateSeals: every certificate Secret the operator issues
// carries the seal of its check (what a restarted operator opens instead
// of verifying the certificate again); one removed, as on a Secret issued
// before seals, or altered is written again.
func TestCertificateSeals(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "seal"))
	eventually(t, "the server certificate", exists(ns, "seal-server-tls", &corev1.Secret{}))
	ca := secretData(t, ns, "seal-ca")
	key := ca[specs.CAKeyKey]
	// sealed says whether a Secret's annotation is the seal a check of its
	// certificate makes.
	sealed := func(name string) error {
		s := &corev1.Secret{}
		if err := get(ns, name, s); err != nil {
			return err
		}
		var c pki.Check
		d := s.Data
		if name == "seal-server-tls" {
			c = (&pki.Checker{}).Server(d[specs.TLSCertKey], d[specs.TLSKeyKey], ca[specs.CACertKey], specs.ServerDNSNames(db), reconciler.Clock.Now(), pki.Seal{Key: key})
		} else {
			c = (&pki.Checker{}).Client(d[specs.TLSCertKey], d[specs.TLSKeyKey], ca[specs.CACertKey], contract.ReplicationRole, reconciler.Clock.Now(), pki.Seal{Key: key})
		}
		if got := s.Annotations[databasev1alpha1.AnnotationCertificateSeal]; c.Seal == "" || got != c.Seal {
			return fmt.Errorf("Secret %s: seal %q, want %q", name, got, c.Seal)
		}
		return nil
	}
	for _, name := range []string{"seal-server-tls", "seal-replication-tls"} {
		if err := sealed(name); err != nil {
			t.Error(err)
		}
	}

	for what, change := range map[string]func(map[string]string){
		"removed": func(a map[string]string) { delete(a, databasev1alpha1.AnnotationCertificateSeal) },
		"altered": func(a map[string]string) { a[databasev1alpha1.AnnotationCertificateSeal] = "v1.1.2.3.4.AAAA" },
	} {
		s := &corev1.Secret{}
		if err := get(ns, "seal-server-tls", s); err != nil {
			t.Fatal(err)
		}
		change(s.Annotations)
		if err := k8s.Update(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the seal "+what+" written again", func() error { return sealed("seal-server-tls") })
	}
}

// TestUserCertificate: the Secret spec.tls names is only read. Missing, it
// stalls the MyDatabase before any pod is made; expired, or not covering
// the names, it shows in CertificateValid.
func TestUserCertificate(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "byo", func(db *databasev1alpha1.MyDatabase) { db.Spec.TLS.ServerCertSecret = "byo-cert" }))
	waitFor(t, db, "Stalled: no Secret", stalledWith(databasev1alpha1.ReasonTLSSecretNotFound, "byo-cert"))
	if err := get(ns, "byo", &corev1.Secret{}); err == nil {
		t.Error("a StatefulSet exists although its certificate Secret does not")
	}

	now := reconciler.Clock.Now()
	ca, err := pki.NewCA("someone's CA", now.Add(-400*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	expired, err := pki.NewServer(ca, "byo", specs.ServerDNSNames(db), now.Add(-100*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	user := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "byo-cert"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{specs.TLSCertKey: expired.Cert, specs.TLSKeyKey: expired.Key, specs.CACertKey: ca.Cert}}
	if err := k8s.Create(context.Background(), user); err != nil {
		t.Fatal(err)
	}
	update(t, db, func(db *databasev1alpha1.MyDatabase) { db.Spec.Parameters = map[string]string{"work_mem": "8MB"} })
	waitFor(t, db, "CertificateValid False: expired", func(db *databasev1alpha1.MyDatabase) error {
		c := condition(db, databasev1alpha1.ConditionCertificateValid)
		if c == nil || c.Status != metav1.ConditionFalse || !bytes.Contains([]byte(c.Message), []byte("expired")) {
			return fmt.Errorf("CertificateValid %+v", c)
		}
		return nil
	})
	if err := get(ns, "byo-server-tls", &corev1.Secret{}); err == nil {
		t.Error("the operator issued a server certificate although the certificate is the user's")
	}
	// The replicas' client certificate comes from the operator's CA
	// whatever the server's certificate.
	opCA, repl := secretData(t, ns, "byo-ca"), secretData(t, ns, "byo-replication-tls")
	if check := pki.CheckClient(repl[specs.TLSCertKey], repl[specs.TLSKeyKey], opCA[specs.CACertKey], contract.ReplicationRole, now); len(check.Problems) > 0 {
		t.Errorf("the replication certificate: %v", check.Problems)
	}
	if s := secretData(t, ns, "byo-cert"); !bytes.Equal(s[specs.TLSCertKey], expired.Cert) {
		t.Error("the operator wrote the user's Secret")
	}
	if c := secretData(t, ns, "byo-credentials"); !bytes.Equal(c[specs.CACertKey], ca.Cert) {
		t.Error("the credentials Secret lacks the user's CA")
	}
}

package specs

import (
	"bytes"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/pki"
)

// TestCARotationData walks the CA Secret's data through a rotation: at
// each phase the phase reads back, ca.key belongs to the first
// certificate of ca.crt (the one that issues), and the bundle verifies a
// certificate of the old CA while one may still be in use (Trusting,
// Reissuing) and one of the new CA once one may be (Reissuing, after);
// the old key is gone from Reissuing on.
func TestCARotationData(t *testing.T) {
	at := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	old, err := pki.NewCA("old", at)
	if err != nil {
		t.Fatal(err)
	}
	next, err := pki.NewCA("new", at)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(ca pki.KeyPair) pki.KeyPair {
		l, err := pki.NewServer(ca, "db-rw", []string{"db-rw"}, at)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	oldLeaf, newLeaf := leaf(old), leaf(next)
	idle := map[string][]byte{CACertKey: old.Cert, CAKeyKey: old.Key}
	trusting := TrustingCAData(idle, next)
	reissuing := ReissuingCAData(trusting)
	rotated := RotatedCAData(reissuing)
	for _, tc := range []struct {
		name           string
		data           map[string][]byte
		phase          databasev1alpha1.CARotationPhase
		issuer         pki.KeyPair
		trustsOld      bool
		trustsNew      bool
		oldKeyAnywhere bool
	}{
		{"idle", idle, "", old, true, false, true},
		{"trusting", trusting, databasev1alpha1.CARotationTrusting, old, true, true, true},
		{"reissuing", reissuing, databasev1alpha1.CARotationReissuing, next, true, true, false},
		{"rotated", rotated, "", next, false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CAPhase(tc.data); got != tc.phase {
				t.Errorf("phase %q, want %q", got, tc.phase)
			}
			issuer := IssuingCA(tc.data)
			if !bytes.Equal(issuer.Cert, tc.issuer.Cert) || !bytes.Equal(issuer.Key, tc.issuer.Key) {
				t.Errorf("the CA that issues is not the expected one")
			}
			if err := issuer.Valid(); err != nil {
				t.Errorf("ca.key does not belong to the first certificate of ca.crt: %v", err)
			}
			for _, c := range []struct {
				leaf pki.KeyPair
				want bool
				what string
			}{{oldLeaf, tc.trustsOld, "old"}, {newLeaf, tc.trustsNew, "new"}} {
				check := pki.CheckServer(c.leaf.Cert, c.leaf.Key, tc.data[CACertKey], []string{"db-rw"}, at)
				if got := len(check.Problems) == 0; got != c.want {
					t.Errorf("ca.crt verifies a certificate of the %s CA: %t, want %t (%v)", c.what, got, c.want, check.Problems)
				}
			}
			found := false
			for _, v := range tc.data {
				found = found || bytes.Equal(v, old.Key)
			}
			if found != tc.oldKeyAnywhere {
				t.Errorf("the old key in the data: %t, want %t", found, tc.oldKeyAnywhere)
			}
		})
	}
}

// TestCARotationRequest: the request is recorded in UTC seconds, and a CA
// made while one is in the spec records it (it fulfils it).
func TestCARotationRequest(t *testing.T) {
	if got := CARotationRequest(db()); got != "" {
		t.Errorf("no request: %q", got)
	}
	at := time.Date(2026, 12, 6, 1, 0, 0, 0, time.FixedZone("CET", 3600))
	d := db(func(d *databasev1alpha1.MyDatabase) {
		d.Spec.TLS.CARotation = &databasev1alpha1.CARotationSpec{RequestedAt: &metav1.Time{Time: at}}
	})
	if got := CARotationRequest(d); got != "2026-12-06T00:00:00Z" {
		t.Errorf("request %q", got)
	}
	ca, err := pki.NewCA("x", at)
	if err != nil {
		t.Fatal(err)
	}
	if got := CASecret(d, ca).Annotations[databasev1alpha1.AnnotationCARotationRequest]; got != "2026-12-06T00:00:00Z" {
		t.Errorf("a new CA records %q", got)
	}
	if CATrustPeriod(d) != DefaultCATrustPeriod || CAMaxAge(d) != 0 {
		t.Errorf("trust period %s, max age %s", CATrustPeriod(d), CAMaxAge(d))
	}
}

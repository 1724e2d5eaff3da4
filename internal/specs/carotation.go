package specs

import (
	"time"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/pki"
)

// A rotation of the operator's CA lives in the CA Secret (<name>-ca), so
// that each pass decides the next step from what exists and a restart
// resumes where it was:
//
//	phase      ca.crt (the trust bundle)   ca.key   next-ca.crt/.key
//	none       the CA                      its key  -
//	Trusting   old CA, new CA              old key  the new CA
//	Reissuing  new CA, old CA              new key  -
//
// The first certificate of ca.crt is always the one that issues
// (pki.Issuer), the one ca.key belongs to; every bundle the operator
// writes (the Secrets' ca.crt) is the whole of ca.crt. Leaving Reissuing
// makes ca.crt the new CA alone.
const (
	// NextCACertKey and NextCAKeyKey hold the new CA while it is only
	// trusted (Trusting).
	NextCACertKey = "next-ca.crt"
	NextCAKeyKey  = "next-ca.key"

	// CARotationByAge is the request a rotation that spec.tls.caRotation
	// .maxAge started records.
	CARotationByAge = "maxAge"

	// DefaultCATrustPeriod is spec.tls.caRotation.trustPeriod when none is
	// given (the CRD's default).
	DefaultCATrustPeriod = 10 * time.Minute
)

// CARotationRequest is spec.tls.caRotation.requestedAt in the form the CA
// Secret records (AnnotationCARotationRequest), "" when none.
func CARotationRequest(db *databasev1alpha1.MyDatabase) string {
	if db.Spec.TLS.CARotation == nil {
		return ""
	}
	return formatRequest(db.Spec.TLS.CARotation.RequestedAt)
}

// CAMaxAge is spec.tls.caRotation.maxAge, 0 when none.
func CAMaxAge(db *databasev1alpha1.MyDatabase) time.Duration {
	if r := db.Spec.TLS.CARotation; r != nil && r.MaxAge != nil {
		return r.MaxAge.Duration
	}
	return 0
}

// CATrustPeriod is spec.tls.caRotation.trustPeriod.
func CATrustPeriod(db *databasev1alpha1.MyDatabase) time.Duration {
	if r := db.Spec.TLS.CARotation; r != nil && r.TrustPeriod != nil {
		return r.TrustPeriod.Duration
	}
	return DefaultCATrustPeriod
}

// CAPhase is the phase of the rotation the CA Secret's data are in: ""
// when none is under way.
func CAPhase(data map[string][]byte) databasev1alpha1.CARotationPhase {
	switch {
	case len(data[NextCAKeyKey]) > 0:
		return databasev1alpha1.CARotationTrusting
	case len(pki.Split(data[CACertKey])) > 1:
		return databasev1alpha1.CARotationReissuing
	}
	return ""
}

// IssuingCA is the CA of the Secret's data that issues certificates: the
// first of ca.crt, with ca.key.
func IssuingCA(data map[string][]byte) pki.KeyPair {
	return pki.KeyPair{Cert: pki.Issuer(data[CACertKey]), Key: data[CAKeyKey]}
}

// TrustingCAData starts a rotation: the data of a CA Secret whose CA
// still issues, next trusted beside it.
func TrustingCAData(data map[string][]byte, next pki.KeyPair) map[string][]byte {
	return map[string][]byte{
		CACertKey:     pki.Bundle(pki.Issuer(data[CACertKey]), next.Cert),
		CAKeyKey:      data[CAKeyKey],
		NextCACertKey: next.Cert,
		NextCAKeyKey:  next.Key,
	}
}

// ReissuingCAData makes the new CA of Trusting data the one that issues;
// the old one stays trusted, and its key is gone: nothing is signed with
// it again.
func ReissuingCAData(data map[string][]byte) map[string][]byte {
	return map[string][]byte{
		CACertKey: pki.Bundle(data[NextCACertKey], pki.Issuer(data[CACertKey])),
		CAKeyKey:  data[NextCAKeyKey],
	}
}

// RotatedCAData ends a rotation: the CA that issues, trusted alone.
func RotatedCAData(data map[string][]byte) map[string][]byte {
	return map[string][]byte{CACertKey: pki.Issuer(data[CACertKey]), CAKeyKey: data[CAKeyKey]}
}

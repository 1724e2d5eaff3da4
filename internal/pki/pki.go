// Package pki issues and reads the certificates of a MyDatabase: a CA of
// its own, and the server certificate its instances present, signed by
// that CA. Keys are ECDSA P-256: small, fast to make in a reconcile pass,
// and accepted by every supported PostgreSQL and libpq.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"
)

// Lifetimes of what the operator issues, and when it renews: a certificate
// is renewed once less than a third of its lifetime is left (30 days of
// a server certificate's 90), so a renewal that fails has weeks of
// retries before anything expires.
const (
	CALifetime     = 10 * 365 * 24 * time.Hour
	ServerLifetime = 90 * 24 * time.Hour
	// backdate covers clocks a little behind the operator's.
	backdate = 5 * time.Minute
)

// KeyPair is a certificate and its private key, PEM-encoded.
type KeyPair struct {
	Cert []byte
	Key  []byte
}

// NewCA makes a self-signed CA named commonName.
func NewCA(commonName string, now time.Time) (KeyPair, error) {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: commonName},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	return issue(tmpl, now, CALifetime, nil)
}

// NewServer makes a server certificate for dnsNames, signed by ca.
func NewServer(ca KeyPair, commonName string, dnsNames []string, now time.Time) (KeyPair, error) {
	signer, err := ca.parse()
	if err != nil {
		return KeyPair{}, fmt.Errorf("the CA: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName},
		DNSNames:    dnsNames,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	return issue(tmpl, now, ServerLifetime, signer)
}

// NewClient makes a client certificate for the PostgreSQL role
// commonName (what pg_hba.conf's cert method matches), signed by ca. It
// lives as long as a server certificate.
func NewClient(ca KeyPair, commonName string, now time.Time) (KeyPair, error) {
	signer, err := ca.parse()
	if err != nil {
		return KeyPair{}, fmt.Errorf("the CA: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	return issue(tmpl, now, ServerLifetime, signer)
}

type signer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func issue(tmpl *x509.Certificate, now time.Time, lifetime time.Duration, parent *signer) (KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return KeyPair{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return KeyPair{}, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-backdate), now.Add(lifetime)
	parentCert, parentKey := tmpl, key
	if parent != nil {
		parentCert, parentKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parentCert, &key.PublicKey, parentKey)
	if err != nil {
		return KeyPair{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return KeyPair{}, err
	}
	return KeyPair{
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func (kp KeyPair) parse() (*signer, error) {
	cert, err := ParseCert(kp.Cert)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(kp.Key)
	if block == nil {
		return nil, errors.New("the key is not PEM")
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the key: %w", err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("the key does not match the certificate")
	}
	return &signer{cert: cert, key: key}, nil
}

// Valid reports why kp is not a certificate with its key, nil if it is.
func (kp KeyPair) Valid() error {
	_, err := kp.parse()
	return err
}

// ParseCert reads the first certificate of a PEM bundle.
func ParseCert(data []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

// Check is what can be said of a certificate against its CA and
// the names it must cover. Problems are in plain words, for status.
type Check struct {
	Cert *x509.Certificate
	// Problems make the certificate unusable for a client that verifies
	// it (sslmode=verify-full), or the pair unusable for the server.
	Problems []string
	// Renew: a certificate the operator issued should be issued again.
	Renew bool
}

// CheckServer checks the PEM certificate, key and CA bundle of a server
// against names at now: that the key matches, that the CA verifies the
// certificate, that it is valid now and covers every name. Renew is set
// once less than a third of its lifetime is left, and on any problem.
func CheckServer(certPEM, keyPEM, caPEM []byte, names []string, now time.Time) Check {
	return check(certPEM, keyPEM, caPEM, x509.ExtKeyUsageServerAuth, names, now)
}

// CheckClient checks a client certificate as CheckServer does a server's,
// and that it names the role commonName.
func CheckClient(certPEM, keyPEM, caPEM []byte, commonName string, now time.Time) Check {
	c := check(certPEM, keyPEM, caPEM, x509.ExtKeyUsageClientAuth, nil, now)
	if c.Cert != nil && c.Cert.Subject.CommonName != commonName {
		c.Problems = append(c.Problems, fmt.Sprintf("the certificate names %q, not %q", c.Cert.Subject.CommonName, commonName))
		c.Renew = true
	}
	return c
}

func check(certPEM, keyPEM, caPEM []byte, usage x509.ExtKeyUsage, names []string, now time.Time) Check {
	var c Check
	pair, err := KeyPair{Cert: certPEM, Key: keyPEM}.parse()
	if err != nil {
		c.Problems = append(c.Problems, "tls.crt and tls.key: "+err.Error())
		c.Renew = true
		if cert, err := ParseCert(certPEM); err == nil {
			c.Cert = cert
		}
		return c
	}
	c.Cert = pair.cert
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		c.Problems = append(c.Problems, "ca.crt holds no PEM certificate")
	} else if _, err := c.Cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		c.Problems = append(c.Problems, "ca.crt does not verify tls.crt: "+err.Error())
	}
	var missing []string
	for _, n := range names {
		if c.Cert.VerifyHostname(n) != nil {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		c.Problems = append(c.Problems, fmt.Sprintf("the certificate does not cover %v", missing))
	}
	lifetime := c.Cert.NotAfter.Sub(c.Cert.NotBefore)
	c.Renew = len(c.Problems) > 0 || c.Cert.NotAfter.Sub(now) < lifetime/3
	return c
}

// RenewAt is when a certificate is due for renewal: a third of its
// lifetime before it expires.
func RenewAt(cert *x509.Certificate) time.Time {
	return cert.NotAfter.Add(-cert.NotAfter.Sub(cert.NotBefore) / 3)
}

// SameNames reports whether cert names exactly names (in any order); no
// certificate names nothing.
func SameNames(cert *x509.Certificate, names []string) bool {
	if cert == nil {
		return false
	}
	a, b := slices.Clone(cert.DNSNames), slices.Clone(names)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

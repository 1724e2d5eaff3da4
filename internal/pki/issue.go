// Package pki issues and reads the certificates of a MyDatabase: a CA of
// its own, and the server certificate its instances present, signed by
// that CA. Keys are ECDSA P-256: small, fast to make in a reconcile pass,
// and accepted by every supported PostgreSQL and libpq.
//
// issue.go issues, check.go checks a certificate against its CA, names
// and time, and checker.go remembers the checks that passed (and seals
// them in the Secret) so that an unchanged certificate is not verified
// again on every pass.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
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

// checkKey identifies a check by everything it depends on but the time.
func checkKey(certPEM, keyPEM, caPEM []byte, usage x509.ExtKeyUsage, names []string, commonName string) [sha256.Size]byte {
	h := sha256.New()
	field := func(b []byte) {
		_ = binary.Write(h, binary.LittleEndian, uint64(len(b)))
		h.Write(b)
	}
	_ = binary.Write(h, binary.LittleEndian, int64(usage))
	field([]byte(commonName))
	_ = binary.Write(h, binary.LittleEndian, uint64(len(names)))
	for _, n := range names {
		field([]byte(n))
	}
	field(certPEM)
	field(keyPEM)
	field(caPEM)
	var key [sha256.Size]byte
	h.Sum(key[:0])
	return key
}

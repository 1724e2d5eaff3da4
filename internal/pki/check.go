package pki

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"time"
)

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
	// Cert is nil when the certificate could not be read at all.
	Cert *Certificate
	// Problems make the certificate unusable for a client that verifies
	// it (sslmode=verify-full), or the pair unusable for the server.
	Problems []string
	// Renew: a certificate the operator issued should be issued again.
	Renew bool
	// Seal vouches for a check that passed, for a later Checker (see
	// Seal): set when the check was given a seal key and passed.
	Seal string
}

// Certificate is what the operator reads of a checked certificate.
type Certificate struct {
	NotBefore, NotAfter time.Time
	DNSNames            []string
}

func certificateOf(c *x509.Certificate) *Certificate {
	return &Certificate{NotBefore: c.NotBefore, NotAfter: c.NotAfter, DNSNames: c.DNSNames}
}

// CheckServer checks the PEM certificate, key and CA bundle of a server
// against names at now: that the key matches, that the CA verifies the
// certificate, that it is valid now and covers every name. Renew is set
// once less than a third of its lifetime is left, and on any problem.
func CheckServer(certPEM, keyPEM, caPEM []byte, names []string, now time.Time) Check {
	c, _ := check(certPEM, keyPEM, caPEM, x509.ExtKeyUsageServerAuth, names, "", now)
	return c
}

// CheckClient checks a client certificate as CheckServer does a server's,
// and that it names the role commonName.
func CheckClient(certPEM, keyPEM, caPEM []byte, commonName string, now time.Time) Check {
	c, _ := check(certPEM, keyPEM, caPEM, x509.ExtKeyUsageClientAuth, nil, commonName, now)
	return c
}

// validity is the span of time over which a check that found nothing
// holds: no certificate of the chain is expired or not yet valid, and the
// certificate is not due for renewal.
type validity struct{ from, until time.Time }

func (v validity) holds(now time.Time) bool { return !now.Before(v.from) && now.Before(v.until) }

func check(certPEM, keyPEM, caPEM []byte, usage x509.ExtKeyUsage, names []string, commonName string, now time.Time) (Check, validity) {
	var c Check
	pair, err := KeyPair{Cert: certPEM, Key: keyPEM}.parse()
	if err != nil {
		c.Problems = append(c.Problems, "tls.crt and tls.key: "+err.Error())
		c.Renew = true
		if cert, err := ParseCert(certPEM); err == nil {
			c.Cert = certificateOf(cert)
		}
		return c, validity{}
	}
	c.Cert = certificateOf(pair.cert)
	v := validity{from: c.Cert.NotBefore, until: c.Cert.RenewAt()}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		c.Problems = append(c.Problems, "ca.crt holds no PEM certificate")
	} else if chains, err := pair.cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		c.Problems = append(c.Problems, "ca.crt does not verify tls.crt: "+err.Error())
	} else {
		for _, link := range chains[0] {
			v.from, v.until = later(v.from, link.NotBefore), earlier(v.until, link.NotAfter)
		}
	}
	var missing []string
	for _, n := range names {
		if pair.cert.VerifyHostname(n) != nil {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		c.Problems = append(c.Problems, fmt.Sprintf("the certificate does not cover %v", missing))
	}
	if cn := pair.cert.Subject.CommonName; commonName != "" && cn != commonName {
		c.Problems = append(c.Problems, fmt.Sprintf("the certificate names %q, not %q", cn, commonName))
	}
	c.Renew = len(c.Problems) > 0 || !now.Before(c.Cert.RenewAt())
	return c, v
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// RenewAt is when a certificate is due for renewal: a third of its
// lifetime before it expires.
func (c *Certificate) RenewAt() time.Time {
	return c.NotAfter.Add(-c.NotAfter.Sub(c.NotBefore) / 3)
}

// SameNames reports whether the certificate names exactly names (in any
// order); no certificate names nothing.
func (c *Certificate) SameNames(names []string) bool {
	if c == nil {
		return false
	}
	a, b := slices.Clone(c.DNSNames), slices.Clone(names)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

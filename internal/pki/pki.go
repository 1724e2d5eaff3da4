// Package pki issues and reads the certificates of a MyDatabase: a CA of
// its own, and the server certificate its instances present, signed by
// that CA. Keys are ECDSA P-256: small, fast to make in a reconcile pass,
// and accepted by every supported PostgreSQL and libpq.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// Checker checks certificates as CheckServer and CheckClient do (and a
// CA's key pair as KeyPair.Valid does), and remembers, by their content,
// those that passed, for as long as that cannot change: until the
// certificate is due for renewal or one of its chain expires. A reconcile
// pass over an unchanged Secret then neither parses nor verifies it
// again. A verdict not used for one to two hours is forgotten. The zero
// value is ready, and safe for concurrent use.
type Checker struct {
	mu          sync.Mutex
	recent, old map[[sha256.Size]byte]passed
	turned      time.Time
}

// passed is a remembered verdict, kept small: times in Unix seconds (a
// certificate's have no finer resolution), and the names only when they
// differ from those checked (never, for what the operator issues).
type passed struct {
	notBefore, notAfter, from, until int64
	dnsNames                         []string
}

func remember(c *Certificate, v validity, names []string) passed {
	p := passed{notBefore: c.NotBefore.Unix(), notAfter: c.NotAfter.Unix(), from: v.from.Unix(), until: v.until.Unix()}
	if !slices.Equal(c.DNSNames, names) {
		p.dnsNames = c.DNSNames
	}
	return p
}

// certificate is what the check of names found, remembered.
func (p passed) certificate(names []string) *Certificate {
	c := &Certificate{NotBefore: time.Unix(p.notBefore, 0).UTC(), NotAfter: time.Unix(p.notAfter, 0).UTC(), DNSNames: p.dnsNames}
	if c.DNSNames == nil {
		c.DNSNames = names
	}
	return c
}

func (p passed) holds(now time.Time) bool {
	return validity{from: time.Unix(p.from, 0), until: time.Unix(p.until, 0)}.holds(now)
}

// checkerGeneration is how long an unused verdict is kept at least; at
// most twice that.
const checkerGeneration = time.Hour

// Server is CheckServer, remembered, and sealed with seal.Key.
func (k *Checker) Server(certPEM, keyPEM, caPEM []byte, names []string, now time.Time, seal Seal) Check {
	return k.check(certPEM, keyPEM, caPEM, x509.ExtKeyUsageServerAuth, names, "", now, seal)
}

// Client is CheckClient, remembered, and sealed with seal.Key.
func (k *Checker) Client(certPEM, keyPEM, caPEM []byte, commonName string, now time.Time, seal Seal) Check {
	return k.check(certPEM, keyPEM, caPEM, x509.ExtKeyUsageClientAuth, nil, commonName, now, seal)
}

func (k *Checker) check(certPEM, keyPEM, caPEM []byte, usage x509.ExtKeyUsage, names []string, commonName string, now time.Time, seal Seal) Check {
	key := checkKey(certPEM, keyPEM, caPEM, usage, names, commonName)
	p, ok := k.recall(key, now)
	if !ok {
		if p, ok = seal.open(key, now); ok {
			k.keep(key, p)
		}
	}
	if ok {
		return Check{Cert: p.certificate(names), Seal: seal.make(key, p)}
	}
	c, v := check(certPEM, keyPEM, caPEM, usage, names, commonName, now)
	if len(c.Problems) == 0 && !c.Renew && v.holds(now) {
		p := remember(c.Cert, v, names)
		k.keep(key, p)
		c.Seal = seal.make(key, p)
	}
	return c
}

// Seal carries a check that passed across restarts of the operator,
// which would otherwise parse and verify every certificate again: the
// check's verdict (the validity times it found) with an HMAC of them and
// of everything the check depends on but the time, kept in an annotation
// of the certificate's Secret. A Checker given a seal that opens answers
// as the check would, without it. The key is the private key of the CA
// that issued the certificate: whoever can make a seal can issue a
// certificate. A seal that does not open is ignored.
type Seal struct {
	// Key makes and opens seals; nil: no seal is made or opened.
	Key []byte
	// Value is the seal kept with the certificate, "" if none.
	Value string
}

// sealVersion starts every seal, for a format that may change.
const sealVersion = "v1"

func (s Seal) make(key [sha256.Size]byte, p passed) string {
	if s.Key == nil || p.dnsNames != nil {
		return ""
	}
	times := fmt.Sprintf("%s.%d.%d.%d.%d", sealVersion, p.notBefore, p.notAfter, p.from, p.until)
	return times + "." + base64.RawURLEncoding.EncodeToString(s.mac(key, times))
}

func (s Seal) open(key [sha256.Size]byte, now time.Time) (passed, bool) {
	cut := strings.LastIndexByte(s.Value, '.')
	if s.Key == nil || cut < 0 {
		return passed{}, false
	}
	times, sum := s.Value[:cut], s.Value[cut+1:]
	mac, err := base64.RawURLEncoding.DecodeString(sum)
	if err != nil || !hmac.Equal(mac, s.mac(key, times)) {
		return passed{}, false
	}
	fields := strings.Split(times, ".")
	if len(fields) != 5 || fields[0] != sealVersion {
		return passed{}, false
	}
	var p passed
	for i, t := range []*int64{&p.notBefore, &p.notAfter, &p.from, &p.until} {
		if *t, err = strconv.ParseInt(fields[i+1], 10, 64); err != nil {
			return passed{}, false
		}
	}
	return p, p.holds(now)
}

func (s Seal) mac(key [sha256.Size]byte, times string) []byte {
	h := hmac.New(sha256.New, s.Key)
	h.Write([]byte("myoperator certificate check\x00"))
	h.Write(key[:])
	h.Write([]byte(times))
	return h.Sum(nil)
}

// Valid is kp.Valid, remembered: a pair found good is not parsed again
// while its certificate is within its validity (outside it, the pair is
// parsed again, with the same answer: Valid does not look at the time).
func (k *Checker) Valid(kp KeyPair, now time.Time) error {
	key := checkKey(kp.Cert, kp.Key, nil, pairUsage, nil, "")
	if _, ok := k.recall(key, now); ok {
		return nil
	}
	pair, err := kp.parse()
	if err != nil {
		return err
	}
	c := certificateOf(pair.cert)
	if v := (validity{from: c.NotBefore, until: c.NotAfter}); v.holds(now) {
		k.keep(key, remember(c, v, c.DNSNames))
	}
	return nil
}

// pairUsage stands for "the key matches the certificate" among the usages
// a check is keyed by: no extended key usage has this value.
const pairUsage x509.ExtKeyUsage = -1

func (k *Checker) keep(key [sha256.Size]byte, p passed) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.recent[key] = p
}

// recall finds a verdict that holds at now, and turns the generations
// over when one has passed.
func (k *Checker) recall(key [sha256.Size]byte, now time.Time) (passed, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.recent == nil || now.Sub(k.turned) >= checkerGeneration || now.Before(k.turned) {
		k.old, k.recent, k.turned = k.recent, map[[sha256.Size]byte]passed{}, now
	}
	p, ok := k.recent[key]
	if !ok {
		if p, ok = k.old[key]; ok {
			k.recent[key] = p
		}
	}
	return p, ok && p.holds(now)
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

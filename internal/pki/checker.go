package pki

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

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

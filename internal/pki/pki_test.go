package pki

import (
	"crypto/x509"
	"slices"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

func mustCA(t *testing.T, at time.Time) KeyPair {
	t.Helper()
	ca, err := NewCA("test CA", at)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func mustServer(t *testing.T, ca KeyPair, names []string, at time.Time) KeyPair {
	t.Helper()
	s, err := NewServer(ca, "db-rw", names, at)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCheckServer(t *testing.T) {
	names := []string{"db-rw", "db-rw.shop.svc", "db-0.db-headless.shop.svc"}
	ca, other := mustCA(t, now), mustCA(t, now)
	fresh := mustServer(t, ca, names, now)
	for name, tc := range map[string]struct {
		cert, key, ca []byte
		names         []string
		at            time.Time
		problem       string // "" for none
		renew         bool
	}{
		"fresh":                  {fresh.Cert, fresh.Key, ca.Cert, names, now, "", false},
		"two thirds of its life": {fresh.Cert, fresh.Key, ca.Cert, names, now.Add(61 * 24 * time.Hour), "", true},
		"not yet due":            {fresh.Cert, fresh.Key, ca.Cert, names, now.Add(59 * 24 * time.Hour), "", false},
		"expired":                {fresh.Cert, fresh.Key, ca.Cert, names, now.Add(91 * 24 * time.Hour), "expired", true},
		"another CA":             {fresh.Cert, fresh.Key, other.Cert, names, now, "ca.crt does not verify tls.crt", true},
		"a name missing":         {fresh.Cert, fresh.Key, ca.Cert, append(names, "db-1.db-headless.shop.svc"), now, "does not cover [db-1.db-headless.shop.svc]", true},
		"another key":            {fresh.Cert, other.Key, ca.Cert, names, now, "the key does not match the certificate", true},
		"no CA":                  {fresh.Cert, fresh.Key, []byte("junk"), names, now, "ca.crt holds no PEM certificate", true},
	} {
		t.Run(name, func(t *testing.T) {
			c := CheckServer(tc.cert, tc.key, tc.ca, tc.names, tc.at)
			got := strings.Join(c.Problems, "; ")
			if (tc.problem == "") != (got == "") || !strings.Contains(got, tc.problem) {
				t.Errorf("problems %q, want %q", got, tc.problem)
			}
			if c.Renew != tc.renew {
				t.Errorf("renew %t, want %t", c.Renew, tc.renew)
			}
		})
	}
}

func TestRenewAtAndNames(t *testing.T) {
	ca := mustCA(t, now)
	s := mustServer(t, ca, []string{"b", "a"}, now)
	cert := CheckServer(s.Cert, s.Key, ca.Cert, nil, now).Cert
	if cert == nil {
		t.Fatal("the certificate was not read")
	}
	// 90 days from five minutes before now; renewed with a third left.
	if want := cert.NotAfter.Add(-(ServerLifetime + backdate) / 3); !cert.RenewAt().Equal(want) {
		t.Errorf("RenewAt %s, want %s", cert.RenewAt(), want)
	}
	if !cert.SameNames([]string{"a", "b"}) || cert.SameNames([]string{"a"}) || (*Certificate)(nil).SameNames(nil) {
		t.Error("SameNames")
	}
	caCert, err := ParseCert(ca.Cert)
	if err != nil || !caCert.IsCA || caCert.NotAfter.Sub(now) != CALifetime {
		t.Errorf("CA: IsCA %t, lifetime %s (err %v)", caCert.IsCA, caCert.NotAfter.Sub(now), err)
	}
	if err := (KeyPair{Cert: ca.Cert, Key: s.Key}).Valid(); err == nil {
		t.Error("a CA with another's key is valid")
	}
}

func TestCheckClient(t *testing.T) {
	ca, other := mustCA(t, now), mustCA(t, now)
	client, err := NewClient(ca, "replicator", now)
	if err != nil {
		t.Fatal(err)
	}
	server := mustServer(t, ca, []string{"db-rw"}, now)
	for name, tc := range map[string]struct {
		pair    KeyPair
		ca      []byte
		role    string
		at      time.Time
		problem string
		renew   bool
	}{
		"fresh":                  {client, ca.Cert, "replicator", now, "", false},
		"two thirds of its life": {client, ca.Cert, "replicator", now.Add(61 * 24 * time.Hour), "", true},
		"expired":                {client, ca.Cert, "replicator", now.Add(91 * 24 * time.Hour), "expired", true},
		"another CA":             {client, other.Cert, "replicator", now, "ca.crt does not verify tls.crt", true},
		"another role":           {client, ca.Cert, "postgres", now, `names "replicator", not "postgres"`, true},
		"a server certificate":   {server, ca.Cert, "db-rw", now, "incompatible key usage", true},
	} {
		t.Run(name, func(t *testing.T) {
			c := CheckClient(tc.pair.Cert, tc.pair.Key, tc.ca, tc.role, tc.at)
			got := strings.Join(c.Problems, "; ")
			if (tc.problem == "") != (got == "") || !strings.Contains(got, tc.problem) {
				t.Errorf("problems %q, want %q", got, tc.problem)
			}
			if c.Renew != tc.renew {
				t.Errorf("renew %t, want %t", c.Renew, tc.renew)
			}
		})
	}
}

// TestChecker: a remembered verdict is the one CheckServer or CheckClient
// would give, at every time and for every change of content.
func TestChecker(t *testing.T) {
	ca, other := mustCA(t, now), mustCA(t, now)
	names := []string{"db-rw", "db-0.db-headless.shop.svc"}
	server := mustServer(t, ca, names, now)
	client, err := NewClient(ca, "replicator", now)
	if err != nil {
		t.Fatal(err)
	}
	// A CA that expires 30 days from now, before its certificate is due.
	old := mustCA(t, now.Add(-CALifetime+30*24*time.Hour))
	underOld := mustServer(t, old, names, now)

	k := &Checker{}
	same := func(what string, got, want Check) { t.Helper(); sameCheck(t, what, got, want) }
	for _, at := range []time.Time{now, now.Add(24 * time.Hour), now.Add(31 * 24 * time.Hour),
		now.Add(61 * 24 * time.Hour), now.Add(91 * 24 * time.Hour), now} {
		for range 2 { // the second call is answered from memory when the first passed
			same("server "+at.String(), k.Server(server.Cert, server.Key, ca.Cert, names, at, Seal{}), CheckServer(server.Cert, server.Key, ca.Cert, names, at))
			same("another CA", k.Server(server.Cert, server.Key, other.Cert, names, at, Seal{}), CheckServer(server.Cert, server.Key, other.Cert, names, at))
			same("another name", k.Server(server.Cert, server.Key, ca.Cert, names[:1], at, Seal{}), CheckServer(server.Cert, server.Key, ca.Cert, names[:1], at))
			same("client", k.Client(client.Cert, client.Key, ca.Cert, "replicator", at, Seal{}), CheckClient(client.Cert, client.Key, ca.Cert, "replicator", at))
			same("another role", k.Client(client.Cert, client.Key, ca.Cert, "postgres", at, Seal{}), CheckClient(client.Cert, client.Key, ca.Cert, "postgres", at))
			same("the server as a client", k.Client(server.Cert, server.Key, ca.Cert, "db-rw", at, Seal{}), CheckClient(server.Cert, server.Key, ca.Cert, "db-rw", at))
			same("a CA expiring first", k.Server(underOld.Cert, underOld.Key, old.Cert, names, at, Seal{}), CheckServer(underOld.Cert, underOld.Key, old.Cert, names, at))
		}
	}
	if c := CheckServer(underOld.Cert, underOld.Key, old.Cert, names, now.Add(31*24*time.Hour)); len(c.Problems) == 0 {
		t.Fatal("the test's CA does not expire first")
	}

	// Only what passed is remembered: the server, the client and the
	// certificate under the expiring CA (the last turn, at now).
	k = &Checker{}
	k.Server(server.Cert, server.Key, ca.Cert, names, now, Seal{})
	k.Server(server.Cert, server.Key, other.Cert, names, now, Seal{})
	k.Client(client.Cert, client.Key, ca.Cert, "replicator", now, Seal{})
	if len(k.recent) != 2 {
		t.Errorf("%d verdicts remembered, want the 2 that passed", len(k.recent))
	}
	// A verdict used in every generation stays; an unused one goes after
	// two.
	for i := 1; i <= 2; i++ {
		k.Server(server.Cert, server.Key, ca.Cert, names, now.Add(time.Duration(i)*checkerGeneration), Seal{})
	}
	if len(k.recent) != 1 || len(k.old) != 1 {
		t.Errorf("after two generations: %d recent, %d old verdicts, want 1 and 1 (the server's, used in each)", len(k.recent), len(k.old))
	}

	// Valid answers as KeyPair.Valid does, at any time (an expired CA's
	// pair still matches), and remembers only a good pair in its validity.
	k = &Checker{}
	mismatched := KeyPair{Cert: server.Cert, Key: client.Key}
	for _, at := range []time.Time{now, now.Add(CALifetime + time.Hour), now} {
		for range 2 {
			if err := k.Valid(ca, at); err != nil {
				t.Errorf("the CA at %s: %v", at, err)
			}
			if err, want := k.Valid(mismatched, at), mismatched.Valid(); err == nil || err.Error() != want.Error() {
				t.Errorf("a key that does not match its certificate at %s: %v, want %v", at, err, want)
			}
		}
	}
	if len(k.recent) != 1 {
		t.Errorf("%d pairs remembered, want the CA's", len(k.recent))
	}
}

// sameCheck fails t unless got says what the check want says.
func sameCheck(t *testing.T, what string, got, want Check) {
	t.Helper()
	if strings.Join(got.Problems, "; ") != strings.Join(want.Problems, "; ") || got.Renew != want.Renew ||
		(got.Cert == nil) != (want.Cert == nil) || (got.Cert != nil && (!got.Cert.NotAfter.Equal(want.Cert.NotAfter) ||
		!slices.Equal(got.Cert.DNSNames, want.Cert.DNSNames))) {
		t.Errorf("%s: remembered %+v, want %+v", what, got, want)
	}
}

// TestSeal: a Checker that opens a seal answers as the check would, at
// every time, and a seal opens only with the key it was made with, for
// the content and names it was made for, and unaltered.
func TestSeal(t *testing.T) {
	ca, other := mustCA(t, now), mustCA(t, now)
	names := []string{"db-rw", "db-0.db-headless.shop.svc"}
	server, another := mustServer(t, ca, names, now), mustServer(t, ca, names, now)
	client, err := NewClient(ca, "replicator", now)
	if err != nil {
		t.Fatal(err)
	}

	if c := (&Checker{}).Server(server.Cert, server.Key, ca.Cert, names, now, Seal{}); c.Seal != "" {
		t.Errorf("a check given no key made the seal %q", c.Seal)
	}
	if c := (&Checker{}).Server(server.Cert, server.Key, other.Cert, names, now, Seal{Key: ca.Key}); c.Seal != "" {
		t.Errorf("a check that failed made the seal %q", c.Seal)
	}
	serverSeal := (&Checker{}).Server(server.Cert, server.Key, ca.Cert, names, now, Seal{Key: ca.Key}).Seal
	clientSeal := (&Checker{}).Client(client.Cert, client.Key, ca.Cert, "replicator", now, Seal{Key: ca.Key}).Seal
	if serverSeal == "" || clientSeal == "" {
		t.Fatalf("checks that passed made the seals %q and %q", serverSeal, clientSeal)
	}
	for _, at := range []time.Time{now, now.Add(24 * time.Hour), now.Add(61 * 24 * time.Hour), now.Add(91 * 24 * time.Hour)} {
		got := (&Checker{}).Server(server.Cert, server.Key, ca.Cert, names, at, Seal{Key: ca.Key, Value: serverSeal})
		sameCheck(t, "server at "+at.String(), got, CheckServer(server.Cert, server.Key, ca.Cert, names, at))
		if len(got.Problems) == 0 && !got.Renew && got.Seal != serverSeal {
			t.Errorf("at %s the seal became %q, was %q", at, got.Seal, serverSeal)
		}
		got = (&Checker{}).Client(client.Cert, client.Key, ca.Cert, "replicator", at, Seal{Key: ca.Key, Value: clientSeal})
		sameCheck(t, "client at "+at.String(), got, CheckClient(client.Cert, client.Key, ca.Cert, "replicator", at))
	}

	// A seal is taken as it stands: one made with the key for times no
	// check would find shows whether the Checker answered from it.
	key := checkKey(server.Cert, server.Key, ca.Cert, x509.ExtKeyUsageServerAuth, names, "")
	const notAfter = 2_000_000_000
	made := Seal{Key: ca.Key}.make(key, passed{notBefore: 1, notAfter: notAfter, until: notAfter})
	opened := func(certPEM, keyPEM []byte, names []string, seal Seal) bool {
		c := (&Checker{}).Server(certPEM, keyPEM, ca.Cert, names, now, seal)
		return c.Cert != nil && c.Cert.NotAfter.Unix() == notAfter
	}
	if !opened(server.Cert, server.Key, names, Seal{Key: ca.Key, Value: made}) {
		t.Fatal("the Checker did not answer from the seal")
	}
	for what, tc := range map[string]struct {
		cert  KeyPair
		names []string
		seal  Seal
	}{
		"another key":         {server, names, Seal{Key: other.Key, Value: made}},
		"another certificate": {another, names, Seal{Key: ca.Key, Value: made}},
		"other names":         {server, names[:1], Seal{Key: ca.Key, Value: made}},
		"altered times":       {server, names, Seal{Key: ca.Key, Value: strings.Replace(made, ".1.", ".2.", 1)}},
		"no seal":             {server, names, Seal{Key: ca.Key}},
		"not a seal":          {server, names, Seal{Key: ca.Key, Value: "v1.1.2.3"}},
	} {
		if opened(tc.cert.Cert, tc.cert.Key, tc.names, tc.seal) {
			t.Errorf("%s: the seal opened", what)
		}
	}
}

// TestBundle: a bundle joins certificates once each, in order; Split gives
// them back byte for byte; the first is the one that issues, and a single
// CA is its own bytes (so seals and comparisons made before rotations
// still hold).
func TestBundle(t *testing.T) {
	a, b := mustCA(t, now), mustCA(t, now)
	for name, tc := range map[string]struct {
		in     [][]byte
		split  [][]byte
		issuer []byte
	}{
		"one":           {[][]byte{a.Cert}, [][]byte{a.Cert}, a.Cert},
		"two":           {[][]byte{a.Cert, b.Cert}, [][]byte{a.Cert, b.Cert}, a.Cert},
		"the other way": {[][]byte{b.Cert, a.Cert}, [][]byte{b.Cert, a.Cert}, b.Cert},
		"repeated":      {[][]byte{a.Cert, a.Cert, b.Cert}, [][]byte{a.Cert, b.Cert}, a.Cert},
		"a bundle in":   {[][]byte{Bundle(b.Cert, a.Cert), nil}, [][]byte{b.Cert, a.Cert}, b.Cert},
		"none":          {nil, nil, nil},
	} {
		t.Run(name, func(t *testing.T) {
			bundle := Bundle(tc.in...)
			got := Split(bundle)
			if len(got) != len(tc.split) {
				t.Fatalf("%d certificates, want %d", len(got), len(tc.split))
			}
			for i := range got {
				if string(got[i]) != string(tc.split[i]) {
					t.Errorf("certificate %d differs", i)
				}
			}
			if string(Issuer(bundle)) != string(tc.issuer) {
				t.Errorf("Issuer is not the first certificate")
			}
		})
	}
	// Every certificate of a bundle verifies what it issued.
	leaf := mustServer(t, b, []string{"db-rw"}, now)
	if c := CheckServer(leaf.Cert, leaf.Key, Bundle(a.Cert, b.Cert), []string{"db-rw"}, now); len(c.Problems) > 0 {
		t.Errorf("the second CA of a bundle does not verify its certificate: %v", c.Problems)
	}
}

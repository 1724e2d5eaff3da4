package pki

import (
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
	cert, err := ParseCert(s.Cert)
	if err != nil {
		t.Fatal(err)
	}
	// 90 days from five minutes before now; renewed with a third left.
	if want := cert.NotAfter.Add(-(ServerLifetime + backdate) / 3); !RenewAt(cert).Equal(want) {
		t.Errorf("RenewAt %s, want %s", RenewAt(cert), want)
	}
	if !SameNames(cert, []string{"a", "b"}) || SameNames(cert, []string{"a"}) {
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

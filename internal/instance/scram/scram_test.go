package scram

import (
	"encoding/base64"
	"testing"
)

// A verifier PostgreSQL 15 computed for the password "pencil" with this
// salt (SELECT rolpassword FROM pg_authid after ALTER ROLE ... PASSWORD
// 'pencil'), re-derived here: the bytes must agree exactly.
func TestVerifierAgreesWithPostgreSQL(t *testing.T) {
	salt, err := base64.StdEncoding.DecodeString(postgresSalt)
	if err != nil {
		t.Fatal(err)
	}
	got, err := verifier("pencil", salt, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if got != postgresVerifier {
		t.Fatalf("verifier of pencil:\n got %s\nwant %s", got, postgresVerifier)
	}
	if !Matches(postgresVerifier, "pencil") {
		t.Fatal("Matches refuses the right password")
	}
}

func TestMatches(t *testing.T) {
	v, err := Verifier("correct horse")
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		stored, password string
		want             bool
	}{
		"right password":   {v, "correct horse", true},
		"wrong password":   {v, "correct horsE", false},
		"empty password":   {v, "", false},
		"md5 verifier":     {"md5abcdef", "correct horse", false},
		"no verifier":      {"", "correct horse", false},
		"truncated":        {v[:30], "correct horse", false},
		"non-ASCII string": {v, "pässword", false},
	} {
		if got := Matches(tc.stored, tc.password); got != tc.want {
			t.Errorf("%s: Matches = %t, want %t", name, got, tc.want)
		}
	}
}

func TestUnsupportedPasswordsAreRefused(t *testing.T) {
	for _, p := range []string{"", "pässword", "tab\there", "nul\x00"} {
		if _, err := Verifier(p); err == nil {
			t.Errorf("Verifier(%q) accepted a password SASLprep may change", p)
		}
	}
}

const (
	postgresSalt     = "RllKBMG+misly8ZFWsb1PA=="
	postgresVerifier = "SCRAM-SHA-256$4096:RllKBMG+misly8ZFWsb1PA==$rQH/apYlbE4VkA7XDsl53Ns3JRlehhMKGh4+Yz6kh+8=:XLzTwitieO8ww6e9TdOTHy56tIrCSM4REm50lIZ1s0w="
)

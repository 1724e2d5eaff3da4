package scram

import (
	"strconv"
	"strings"
	"testing"
)

// FuzzMatches: the instance manager reads a role's stored verifier from
// pg_authid (rotate.go), where anyone who may ALTER ROLE writes it. Any
// stored value is read without panicking; a verifier this package writes
// accepts its password and no other; and a value that is not a
// SCRAM-SHA-256 verifier accepts nothing. Run longer with make fuzz.
func FuzzMatches(f *testing.F) {
	f.Add(postgresVerifier, "pencil", "pencil2")
	f.Add("md5abcdef0123456789abcdef01234567", "pencil", "")
	f.Add("SCRAM-SHA-256$4096:$:", "x", "y")
	f.Add("SCRAM-SHA-256$0:RllKBMG+misly8ZFWsb1PA==$a:b", "x", "y")
	f.Add("SCRAM-SHA-256$16777217:AA==$AA==:AA==", "x", "y")
	f.Add("", "correct horse", "pässword")
	f.Fuzz(func(t *testing.T, stored, password, other string) {
		iterations, _, _ := strings.Cut(strings.TrimPrefix(stored, "SCRAM-SHA-256$"), ":")
		if n, err := strconv.Atoi(iterations); err == nil && n > Iterations {
			t.Skip() // up to 2^24 rounds of PBKDF2 are allowed, and slow
		}
		if Matches(stored, password) {
			if !Supported(password) || !strings.HasPrefix(stored, "SCRAM-SHA-256$") {
				t.Fatalf("%q accepts %q", stored, password)
			}
		}
		v, err := verifier(password, []byte(other), 1+len(other)%8)
		if err != nil {
			if Supported(password) || v != "" {
				t.Fatalf("verifier(%q) = %q, %v", password, v, err)
			}
			return
		}
		if !Matches(v, password) {
			t.Fatalf("%s refuses its own password %q", v, password)
		}
		if other != password && Matches(v, other) {
			t.Fatalf("%s, the verifier of %q, accepts %q", v, password, other)
		}
	})
}

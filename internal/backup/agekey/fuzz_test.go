package agekey

import (
	"regexp"
	"strings"
	"testing"

	"filippo.io/age"
)

// FuzzParse: the operator parses the encryption Secret, which a namespace
// admin writes, and the instance manager the file mounted from it. Any
// input gives identities or an error, never a panic; every identity
// parsed is one of the input's lines; and an error says nothing of the
// input, which may hold a secret key, but a line number: it is one of
// three fixed messages.
func FuzzParse(f *testing.F) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		f.Fatal(err)
	}
	key := id.String()
	for _, seed := range []string{
		key + "\n",
		"# created: 2026-12-07T03:30:00Z\n# public key: " + id.Recipient().String() + "\n" + key + "\n",
		key + "\r\n\r\n" + key,
		"",
		"\n\n# only comments\n",
		strings.ToLower(key),
		"AGE-SECRET-KEY-1",
		key[:len(key)-1] + "X",
		strings.Repeat("A", 70000),
		"age1" + strings.Repeat("q", 58),
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ids, err := Parse(data)
		lines := strings.Split(strings.ReplaceAll(string(data), "\r", ""), "\n")
		if err != nil {
			if ids != nil {
				t.Fatalf("identities and an error: %v", err)
			}
			if !fixedError.MatchString(err.Error()) {
				t.Fatalf("the error %q is not one of the fixed messages", err)
			}
			return
		}
		if len(ids) == 0 {
			t.Fatal("no identity and no error")
		}
		for _, id := range ids {
			found := false
			for _, line := range lines {
				found = found || strings.EqualFold(strings.TrimSpace(line), id.String())
			}
			if !found {
				t.Fatalf("identity of %s is on no line of the input", id.Recipient())
			}
		}
	})
}

var fixedError = regexp.MustCompile(`^(line [0-9]+ is not an age X25519 identity \(AGE-SECRET-KEY-1\.\.\., as age-keygen writes\)|` +
	`a line is too long to be an age identity|holds no age identity \(AGE-SECRET-KEY-1\.\.\., as age-keygen writes\))$`)

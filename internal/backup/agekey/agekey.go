// Package agekey reads the age X25519 identities that encrypt a
// MyDatabase's backups at rest (docs/backup.md, "Encryption at rest"):
// the instance manager decrypts with them, and the operator checks them
// before any pod is made. It is apart from package backup so that the
// operator can check a key without the object store's client.
package agekey

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strings"

	"filippo.io/age"
)

// SecretKey is the key of the encryption Secret that holds the identities.
const SecretKey = "identities"

// Parse reads age X25519 identities (AGE-SECRET-KEY-1..., as age-keygen
// writes them), one a line; blank lines and lines that start with # (the
// comments age-keygen writes) are skipped. The first identity is the one
// new objects are encrypted to. An error never quotes the data: it is a
// secret.
func Parse(data []byte) ([]*age.X25519Identity, error) {
	var ids []*age.X25519Identity
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, err := age.ParseX25519Identity(line)
		if err != nil {
			return nil, fmt.Errorf("line %d is not an age X25519 identity (AGE-SECRET-KEY-1..., as age-keygen writes)", n)
		}
		ids = append(ids, id)
	}
	if sc.Err() != nil {
		return nil, errors.New("a line is too long to be an age identity")
	}
	if len(ids) == 0 {
		return nil, errors.New("holds no age identity (AGE-SECRET-KEY-1..., as age-keygen writes)")
	}
	return ids, nil
}

// Recipients are the public keys (age1...) of ids, in order: what may be
// said about a key in a log or an error.
func Recipients(ids []*age.X25519Identity) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.Recipient().String()
	}
	return out
}

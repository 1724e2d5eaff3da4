// Package scram computes and checks PostgreSQL's SCRAM-SHA-256 password
// verifiers (the rolpassword of pg_authid), so that the instance manager
// sets a password with ALTER ROLE ... PASSWORD '<verifier>': the server
// stores the verifier as given, and the plaintext never reaches it, its
// logs or pg_stat_statements.
//
// PostgreSQL normalises a password with SASLprep before hashing it. For
// printable ASCII SASLprep changes nothing, which is all Verifier accepts
// (Supported); other passwords are refused rather than hashed differently
// from the server.
package scram

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Iterations is PostgreSQL's default scram_iterations.
const Iterations = 4096

const saltLength = 16

// ErrUnsupported: the password has characters SASLprep may change.
var ErrUnsupported = errors.New("the password has characters other than printable ASCII, which SASLprep may change: " +
	"the instance manager sets only printable ASCII passwords")

// Supported tells whether Verifier can hash password exactly as the server
// would: printable ASCII (space to tilde).
func Supported(password string) bool {
	if password == "" {
		return false
	}
	for i := 0; i < len(password); i++ {
		if password[i] < 0x20 || password[i] > 0x7e {
			return false
		}
	}
	return true
}

// Verifier returns a new verifier of password with a random salt.
func Verifier(password string) (string, error) {
	salt := make([]byte, saltLength)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	return verifier(password, salt, Iterations)
}

func verifier(password string, salt []byte, iterations int) (string, error) {
	if !Supported(password) {
		return "", ErrUnsupported
	}
	stored, server, err := keys(password, salt, iterations)
	if err != nil {
		return "", err
	}
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", iterations, b64(salt), b64(stored), b64(server)), nil
}

func keys(password string, salt []byte, iterations int) (stored, server []byte, err error) {
	salted, err := pbkdf2.Key(sha256.New, password, salt, iterations, sha256.Size)
	if err != nil {
		return nil, nil, err
	}
	mac := func(key []byte, msg string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(msg))
		return h.Sum(nil)
	}
	clientKey := mac(salted, "Client Key")
	sum := sha256.Sum256(clientKey)
	return sum[:], mac(salted, "Server Key"), nil
}

// Matches tells whether the stored verifier accepts password. A verifier
// that is not SCRAM-SHA-256 (none, md5) accepts nothing here.
func Matches(stored, password string) bool {
	if !Supported(password) {
		return false
	}
	rest, ok := strings.CutPrefix(stored, "SCRAM-SHA-256$")
	if !ok {
		return false
	}
	iterSalt, storedServer, ok := strings.Cut(rest, "$")
	if !ok {
		return false
	}
	iter, saltB64, ok := strings.Cut(iterSalt, ":")
	if !ok {
		return false
	}
	storedB64, serverB64, ok := strings.Cut(storedServer, ":")
	if !ok {
		return false
	}
	n, err := strconv.Atoi(iter)
	if err != nil || n < 1 || n > 1<<24 {
		return false
	}
	salt, err1 := base64.StdEncoding.DecodeString(saltB64)
	wantStored, err2 := base64.StdEncoding.DecodeString(storedB64)
	wantServer, err3 := base64.StdEncoding.DecodeString(serverB64)
	if err1 != nil || err2 != nil || err3 != nil {
		return false
	}
	gotStored, gotServer, err := keys(password, salt, n)
	if err != nil {
		return false
	}
	return subtle.ConstantTimeCompare(gotStored, wantStored) == 1 && subtle.ConstantTimeCompare(gotServer, wantServer) == 1
}

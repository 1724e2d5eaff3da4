package pki

import (
	"bytes"
	"encoding/pem"
)

// A trust bundle is PEM certificates one after the other, as ca.crt holds
// them: a client (libpq's sslrootcert, PgBouncer's CA files, PostgreSQL's
// ssl_ca_file) trusts every certificate in it. During a CA rotation the
// operator's bundles carry two CAs; the first is always the one that
// issues (Issuer), so that a reader that takes only the first certificate
// of ca.crt (ParseCert, KeyPair) still pairs it with ca.key.

// Bundle joins PEM certificates into one trust bundle, skipping empty
// ones and ones already in it.
func Bundle(certs ...[]byte) []byte {
	var out []byte
	seen := map[string]bool{}
	for _, c := range certs {
		for _, one := range Split(c) {
			if seen[string(one)] {
				continue
			}
			seen[string(one)] = true
			out = append(out, one...)
		}
	}
	return out
}

// Split returns each PEM block of bundle as its own bytes (exactly as
// they appear, followed by a newline), nothing for a bundle with none.
func Split(bundle []byte) [][]byte {
	var out [][]byte
	rest := bundle
	for {
		block, next := pem.Decode(rest)
		if block == nil {
			return out
		}
		one := bytes.TrimSpace(rest[:len(rest)-len(next)])
		// What precedes the block (text pem.Decode skips) is not part of it.
		if i := bytes.Index(one, []byte("-----BEGIN")); i > 0 {
			one = one[i:]
		}
		out = append(out, append(append([]byte(nil), one...), '\n'))
		rest = next
	}
}

// Issuer is the first certificate of bundle, the one the operator issues
// from; bundle itself when it holds one certificate or none (so that a
// single CA's bytes are compared and checked exactly as they are stored).
func Issuer(bundle []byte) []byte {
	certs := Split(bundle)
	if len(certs) <= 1 {
		return bundle
	}
	return certs[0]
}

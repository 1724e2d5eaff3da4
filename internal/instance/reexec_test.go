package instance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Replace reads the whole binary before it decides anything: the
// operator's exec stream ends only once its standard input is sent.
func TestReplaceReadsTheWholeBinary(t *testing.T) {
	binary := bytes.Repeat([]byte("instance manager "), 1<<16)
	sum := sha256.Sum256(binary)
	digest := hex.EncodeToString(sum[:])
	for _, c := range []struct {
		name    string
		running string // the digest the running instance manager announced
		digest  string // the digest the operator names
		err     string
	}{
		{"replaced already", digest, digest, ""},
		{"another binary than named", "old", strings.Repeat("0", 64), "not replacing"},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, pidFile), []byte("1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, digestFile), []byte(c.running+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		in := bytes.NewReader(binary)
		err := Replace(context.Background(), dir, c.digest, in)
		if (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.err)
		}
		if in.Len() != 0 {
			t.Errorf("%s: %d bytes of the binary left unread", c.name, in.Len())
		}
		if _, err := os.Stat(filepath.Join(dir, nextFile)); err == nil {
			t.Errorf("%s: a binary was staged", c.name)
		}
	}
}

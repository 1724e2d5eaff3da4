package backup

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"
	"github.com/google/go-cmp/cmp"
	"github.com/klauspost/compress/zstd"
)

// The encryption of WAL files and base backups, through the functions the
// store's reads and writes go through (seal and openSealed, compressTar
// and openArchive), without an object store: test/postgres runs them
// against a real one (TestEncryptedBackups).

func newIdentity(t testing.TB) *age.X25519Identity {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// storeWith is a store whose identities file holds ids, in order, as the
// encryption Secret named secret would; a plain store without ids.
func storeWith(t *testing.T, secret string, ids ...*age.X25519Identity) *Store {
	t.Helper()
	s := &Store{prefix: "backups/orders"}
	if len(ids) == 0 {
		return s
	}
	var file bytes.Buffer
	file.WriteString("# created: by the test\n")
	for _, id := range ids {
		file.WriteString("# public key: " + id.Recipient().String() + "\n" + id.String() + "\n\n")
	}
	path := filepath.Join(t.TempDir(), "identities")
	if err := os.WriteFile(path, file.Bytes(), 0o400); err != nil {
		t.Fatal(err)
	}
	keys, err := loadKeyring(&Encryption{IdentitiesFile: path, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	s.keys = keys
	return s
}

// pushWAL is what PushWAL writes for the WAL file segment of content
// walContent: the object's key, body and recipient metadata.
func pushWAL(t *testing.T, s *Store) (key string, body []byte, recipient string) {
	t.Helper()
	body, opts, err := s.seal(walContent)
	if err != nil {
		t.Fatal(err)
	}
	return s.walKeys(segment)[0], body, opts.UserMetadata[recipientMeta]
}

// fetchWAL is what FetchWAL reads of segment from the object key.
func fetchWAL(s *Store, key string, body []byte, recipient string) ([]byte, error) {
	compressed, err := s.openSealed(bytes.NewReader(body), "WAL file "+segment, key, recipient)
	if err != nil {
		return nil, err
	}
	dec, err := zstd.NewReader(compressed)
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	return io.ReadAll(dec)
}

const segment = "000000010000000000000003"

// walContent is a WAL file's content with a row value in it.
var walContent = bytes.Repeat([]byte("a distinctive row value\x00\x01"), 4096)

func TestWALRoundTrip(t *testing.T) {
	id := newIdentity(t)
	for name, s := range map[string]*Store{"plain": storeWith(t, ""), "encrypted": storeWith(t, "backup-key", id)} {
		t.Run(name, func(t *testing.T) {
			key, body, recipient := pushWAL(t, s)
			encrypted := s.keys != nil
			if want := "backups/orders/wal/" + segment + map[bool]string{false: ".zst", true: ".zst.age"}[encrypted]; key != want {
				t.Errorf("archived as %s, want %s", key, want)
			}
			if hasRow := bytes.Contains(body, []byte("distinctive")); hasRow == encrypted {
				t.Errorf("the object holds the row value: %t; encrypted: %t", hasRow, encrypted)
			}
			if encrypted && recipient != id.Recipient().String() {
				t.Errorf("recipient metadata %q, want %s", recipient, id.Recipient())
			}
			got, err := fetchWAL(s, key, body, recipient)
			if err != nil || !bytes.Equal(got, walContent) {
				t.Fatalf("fetched %d bytes (%v), want the %d archived", len(got), err, len(walContent))
			}
		})
	}
}

func TestWALKeysReadBothForms(t *testing.T) {
	plain, encrypted := storeWith(t, ""), storeWith(t, "backup-key", newIdentity(t))
	base := "backups/orders/wal/" + segment
	if diff := cmp.Diff([]string{base + ".zst", base + ".zst.age"}, plain.walKeys(segment)); diff != "" {
		t.Errorf("plain store's keys (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{base + ".zst.age", base + ".zst"}, encrypted.walKeys(segment)); diff != "" {
		t.Errorf("encrypted store's keys (-want +got):\n%s", diff)
	}
	for object, want := range map[string]string{segment + ".zst": segment, segment + ".zst.age": segment,
		"00000002.history.zst.age": "00000002.history", "backup.json": "backup.json"} {
		if got := walName(object); got != want {
			t.Errorf("walName(%q) = %q, want %q", object, got, want)
		}
	}
}

// TestMixedStore: a store switched to encryption still reads the WAL it
// archived before, in the clear; a store without a key says that an
// object is encrypted.
func TestMixedStore(t *testing.T) {
	id := newIdentity(t)
	plain, encrypted := storeWith(t, ""), storeWith(t, "backup-key", id)
	key, body, _ := pushWAL(t, plain)
	if got, err := fetchWAL(encrypted, key, body, ""); err != nil || !bytes.Equal(got, walContent) {
		t.Fatalf("the encrypted store read %d bytes of the plain object (%v)", len(got), err)
	}
	key, body, recipient := pushWAL(t, encrypted)
	_, err := fetchWAL(plain, key, body, recipient)
	if !errors.Is(err, ErrWrongKey) || !strings.Contains(err.Error(), "WAL file "+segment+" is encrypted (to recipient "+id.Recipient().String()+
		"), but no encryption key was given") {
		t.Fatalf("a store without a key read an encrypted object: %v", err)
	}
}

func TestWrongKey(t *testing.T) {
	right, wrong := newIdentity(t), newIdentity(t)
	key, body, recipient := pushWAL(t, storeWith(t, "old-key", right))
	_, err := fetchWAL(storeWith(t, "new-key", wrong), key, body, recipient)
	want := "WAL file " + segment + `: no identity in Secret "new-key" matches its recipient ` + right.Recipient().String() +
		" (the identities there are of " + wrong.Recipient().String() + ")"
	if !errors.Is(err, ErrWrongKey) || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want %q", err, want)
	}
	if strings.Contains(err.Error(), "AGE-SECRET-KEY") {
		t.Fatalf("the error holds a secret key: %v", err)
	}
}

// TestRotation: after a rotation (the new identity first, the old one
// second), new objects go to the new recipient alone, and the old ones
// stay readable.
func TestRotation(t *testing.T) {
	old, current := newIdentity(t), newIdentity(t)
	before := storeWith(t, "backup-key", old)
	after := storeWith(t, "backup-key", current, old)
	key, body, recipient := pushWAL(t, before)
	if got, err := fetchWAL(after, key, body, recipient); err != nil || !bytes.Equal(got, walContent) {
		t.Fatalf("after the rotation, read %d bytes of an old object (%v)", len(got), err)
	}
	key, body, recipient = pushWAL(t, after)
	if recipient != current.Recipient().String() {
		t.Fatalf("a new object went to %s, want the new recipient %s", recipient, current.Recipient())
	}
	if _, err := fetchWAL(before, key, body, recipient); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("the old key alone read a new object: %v", err)
	}
}

// TestBaseBackupRoundTrip: a base backup's tar stream, encrypted on its
// way out, restores with the key (after a rotation too), and not without.
func TestBaseBackupRoundTrip(t *testing.T) {
	old, current := newIdentity(t), newIdentity(t)
	stream := tarOf(t, entry{name: "PG_VERSION", body: "15\n"}, entry{name: "base", typ: tar.TypeDir}, entry{name: "base/1", typ: tar.TypeDir}, entry{name: "base/1/16384", body: strings.Repeat("a distinctive row value", 1000)},
		entry{name: "backup_manifest", body: `{"WAL-Ranges":[{"Timeline":1,"Start-LSN":"0/2000028","End-LSN":"0/2000138"}]}`})
	s := storeWith(t, "backup-key", old)
	m := Manifest{ID: "20261207T030405Z", Encryption: &ManifestEncryption{Recipient: old.Recipient().String()}}
	if got := s.archiveKey(m); got != "backups/orders/base/20261207T030405Z/base.tar.zst.age" {
		t.Errorf("archived as %s", got)
	}
	var object bytes.Buffer
	var ranges streamFacts
	if err := s.compressTar(&object, bytes.NewReader(stream), &ranges); err != nil {
		t.Fatal(err)
	}
	if len(ranges.Ranges) != 1 || ranges.Ranges[0].End != "0/2000138" || ranges.major != "15" {
		t.Errorf("WAL ranges %+v, major %q: want 0/2000138 and 15, from the stream", ranges.Ranges, ranges.major)
	}
	if bytes.Contains(object.Bytes(), []byte("distinctive")) || bytes.Contains(object.Bytes(), []byte("PG_VERSION")) {
		t.Error("the encrypted archive holds its content in the clear")
	}
	for name, tc := range map[string]struct {
		store *Store
		err   string
	}{
		"the key":          {store: s},
		"after a rotation": {store: storeWith(t, "backup-key", current, old)},
		"another key":      {store: storeWith(t, "other", current), err: `base backup 20261207T030405Z: no identity in Secret "other" matches its recipient ` + old.Recipient().String()},
		"no key":           {store: storeWith(t, ""), err: "base backup 20261207T030405Z is encrypted (to recipient " + old.Recipient().String() + "), but no encryption key was given"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			err := tc.store.unpack(bytes.NewReader(object.Bytes()), m, dir)
			if tc.err != "" {
				if !errors.Is(err, ErrWrongKey) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want %q", err, tc.err)
				}
				if _, serr := os.Stat(dir); serr == nil {
					t.Fatal("a restore with the wrong key wrote the data directory")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(dir, "base/1/16384")); err != nil || !strings.HasPrefix(string(b), "a distinctive row value") {
				t.Fatalf("restored %q, %v", b, err)
			}
		})
	}
}

func TestIdentitiesFile(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		content string
		err     string
	}{
		"missing":      {err: "no such file"},
		"empty":        {content: "# only a comment\n\n", err: "holds no age identity"},
		"not a key":    {content: "AGE-SECRET-KEY-1NOTAKEY\n", err: "line 1 is not an age X25519 identity"},
		"a public key": {content: newIdentity(t).String() + "\n" + newIdentity(t).Recipient().String(), err: "line 2 is not"},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
			if tc.content != "" {
				if err := os.WriteFile(path, []byte(tc.content), 0o400); err != nil {
					t.Fatal(err)
				}
			}
			_, err := loadKeyring(&Encryption{IdentitiesFile: path, Secret: "backup-key"})
			if err == nil || !strings.Contains(err.Error(), `the encryption identities of Secret "backup-key"`) || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("got %v, want %q", err, tc.err)
			}
			if strings.Contains(err.Error(), "NOTAKEY") {
				t.Fatalf("the error quotes the file: %v", err)
			}
		})
	}
}

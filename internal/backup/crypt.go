package backup

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"filippo.io/age"

	"example.com/myoperator/internal/backup/agekey"
)

// Encryption at rest (docs/backup.md, "Encryption at rest"). With an
// Encryption in its Config, a store's WAL files and base backups are
// compressed, then encrypted with age to the X25519 recipient of the
// first identity of the identities file, before they leave the pod; their
// objects take the suffix .age. Every identity of the file decrypts: the
// first is the current key, the others are kept so that what was written
// before a key rotation stays readable. Reading goes by an object's name,
// not by the store's configuration, so a store switched to encryption
// keeps its older plain objects readable. Manifests stay in the clear
// (times, LSNs, a size and the recipient): backups are listed, chosen and
// expired without the key.

// Encryption is where a store's age identities are.
type Encryption struct {
	// IdentitiesFile holds age X25519 identities, one a line
	// (agekey.Parse); it is read when the store is opened.
	IdentitiesFile string `json:"identitiesFile"`
	// Secret names the Kubernetes Secret the file comes from, for errors.
	Secret string `json:"secret,omitempty"`
}

// ManifestEncryption says how a base backup is encrypted: to which
// recipient (public key).
type ManifestEncryption struct {
	Recipient string `json:"recipient"`
}

// encryptedSuffix ends the name of every encrypted object.
const encryptedSuffix = ".age"

// recipientMeta is the user metadata of an encrypted WAL object that
// names its recipient, for the error when no identity matches.
const recipientMeta = "Age-Recipient"

// keyring is a store's identities, read when it is opened.
type keyring struct {
	identities []*age.X25519Identity
	// source says where they come from in an error: a Secret, or a file.
	source string
}

func loadKeyring(e *Encryption) (*keyring, error) {
	source := "file " + e.IdentitiesFile
	if e.Secret != "" {
		source = fmt.Sprintf("Secret %q", e.Secret)
	}
	data, err := os.ReadFile(e.IdentitiesFile)
	if err != nil {
		return nil, fmt.Errorf("the encryption identities of %s: %w", source, err)
	}
	ids, err := agekey.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("the encryption identities of %s: %w", source, err)
	}
	return &keyring{identities: ids, source: source}, nil
}

// recipient is whom new objects are encrypted to: the first identity's.
func (k *keyring) recipient() *age.X25519Recipient { return k.identities[0].Recipient() }

// seal encrypts what is written to the returned writer into w; closing it
// writes the last chunk (it does not close w).
func (k *keyring) seal(w io.Writer) (io.WriteCloser, error) { return age.Encrypt(w, k.recipient()) }

// ErrWrongKey: no identity of the store's decrypts an object (wrapped by
// a *KeyError).
var ErrWrongKey = errors.New("no identity matches")

// KeyError is an encrypted object that cannot be decrypted: the store has
// no identities, or none of them matches the object's recipient.
type KeyError struct {
	// What names the object: "base backup <id>", "WAL file <name>".
	What string
	// Recipient is the object's, when known (the manifest or the object's
	// metadata says).
	Recipient string
	// Source is where the identities came from; empty when the store has
	// none.
	Source string
	// Have are the recipients of the identities the store has.
	Have []string
}

func (e *KeyError) Error() string {
	to := ""
	if e.Recipient != "" {
		to = " " + e.Recipient
	}
	if e.Source == "" {
		return fmt.Sprintf("%s is encrypted (to recipient%s), but no encryption key was given: "+
			"name the Secret with its identity in encryption", e.What, to)
	}
	return fmt.Sprintf("%s: no identity in %s matches its recipient%s (the identities there are of %s): "+
		"add the identity of that recipient to the Secret, after the current one", e.What, e.Source, to, strings.Join(e.Have, ", "))
}

func (e *KeyError) Is(target error) bool { return target == ErrWrongKey }

// open decrypts r, the encrypted object what, whose recipient is said to
// be recipient ("" when unknown). The header is read at once: a key that
// does not match fails here, before any of the content is used.
func (k *keyring) open(r io.Reader, what, recipient string) (io.Reader, error) {
	if k == nil {
		return nil, &KeyError{What: what, Recipient: recipient}
	}
	ids := make([]age.Identity, len(k.identities))
	for i, id := range k.identities {
		ids[i] = id
	}
	plain, err := age.Decrypt(r, ids...)
	if _, ok := errors.AsType[*age.NoIdentityMatchError](err); ok {
		return nil, &KeyError{What: what, Recipient: recipient, Source: k.source, Have: agekey.Recipients(k.identities)}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: decrypting: %w", what, err)
	}
	return plain, nil
}

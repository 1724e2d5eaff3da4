// Package backup keeps a MyDatabase's backups in an S3-compatible object
// store: the WAL its primary archives, and base backups, both compressed
// with zstd, and encrypted with age when the store has a key (crypt.go). The instance manager uses it (archive_command and
// restore_command run its wal-push and wal-fetch, a backup runs
// pg_basebackup through it, a restore bootstraps a new primary from it);
// the layout under the store's path is
//
//	wal/<segment or history file>.zst[.age]
//	base/<backup id>/base.tar.zst[.age]
//	base/<backup id>/backup.json   (the Manifest, written last)
//
// where .age ends the name of an encrypted object.
// A backup without backup.json is incomplete and never used.
package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Config is where a store is and how to reach it.
type Config struct {
	// Endpoint is the store's URL: https://host[:port], or http:// for a
	// store without TLS.
	Endpoint string `json:"endpoint"`
	Bucket   string `json:"bucket"`
	// Path is the prefix of this database's objects in the bucket.
	Path            string `json:"path"`
	Region          string `json:"region,omitempty"`
	AccessKeyID     string `json:"accessKeyID"`
	SecretAccessKey string `json:"secretAccessKey"`
	// Encryption, when set, encrypts what is written and decrypts what
	// is read (crypt.go).
	Encryption *Encryption `json:"encryption,omitempty"`
}

// Store is one database's objects in a bucket.
type Store struct {
	client   *minio.Client
	endpoint string
	bucket   string
	prefix   string
	// keys decrypt, and the first encrypts; nil for a store without
	// Encryption.
	keys *keyring
}

// ErrNotFound: no such object.
var ErrNotFound = errors.New("not in the object store")

// Open checks the configuration, reads the encryption identities if any,
// and makes a client; it does not connect.
func Open(c Config) (*Store, error) {
	u, err := url.Parse(c.Endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("object store endpoint %q: want http(s)://host[:port]", c.Endpoint)
	}
	if c.Bucket == "" {
		return nil, errors.New("object store: no bucket")
	}
	client, err := minio.New(u.Host, &minio.Options{
		Creds:  credentials.NewStaticV4(c.AccessKeyID, c.SecretAccessKey, ""),
		Secure: u.Scheme == "https",
		Region: c.Region,
	})
	if err != nil {
		return nil, err
	}
	s := &Store{client: client, endpoint: c.Endpoint, bucket: c.Bucket, prefix: strings.Trim(c.Path, "/")}
	if c.Encryption != nil {
		if s.keys, err = loadKeyring(c.Encryption); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// ReadConfig reads a Config the instance manager wrote (WriteConfig).
func ReadConfig(file string) (Config, error) {
	var c Config
	b, err := os.ReadFile(file)
	if err != nil {
		return c, err
	}
	return c, json.Unmarshal(b, &c)
}

// WriteConfig writes c where only this user can read it (it holds the
// store's secret key), whole or not at all.
func WriteConfig(file string, c Config) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

// fail says what went wrong with what (an object's key, or an action) in
// plain words, and what to do about it when the store says why.
func (s *Store) fail(what string, err error) error {
	var advice string
	switch minio.ToErrorResponse(err).Code {
	case "SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied", "InvalidToken", "ExpiredToken":
		advice = "the store refused the credentials: check ACCESS_KEY_ID and SECRET_ACCESS_KEY in the credentials Secret"
	case minio.NoSuchBucket:
		advice = fmt.Sprintf("bucket %q does not exist at %s: create it, or correct objectStore.bucket", s.bucket, s.endpoint)
	default:
		if _, ok := errors.AsType[net.Error](err); ok {
			advice = fmt.Sprintf("cannot reach the store at %s: check objectStore.endpoint, and that the store is up and reachable from the pods", s.endpoint)
		}
	}
	if advice == "" {
		return fmt.Errorf("object store: %s: %w", what, err)
	}
	return fmt.Errorf("object store: %s: %w (%s)", what, err, advice)
}

// Unavailable tells whether err is the store failing to serve (out of
// reach, the credentials refused, any S3 error but a missing object)
// rather than what it served being damaged: it says nothing of the
// objects.
func Unavailable(err error) bool {
	if _, ok := errors.AsType[net.Error](err); ok {
		return true
	}
	resp, ok := errors.AsType[minio.ErrorResponse](err)
	return ok && resp.Code != "" && resp.Code != minio.NoSuchKey
}

func (s *Store) key(parts ...string) string {
	return path.Join(append([]string{s.prefix}, parts...)...)
}

// stat returns an object's size, ErrNotFound when it does not exist.
func (s *Store) stat(ctx context.Context, key string) (int64, error) {
	info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return 0, ErrNotFound
		}
		return 0, s.fail(key, err)
	}
	return info.Size, nil
}

// putJSON writes v as the object key.
func (s *Store) putJSON(ctx context.Context, key string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = s.client.PutObject(ctx, s.bucket, key, strings.NewReader(string(b)), int64(len(b)),
		minio.PutObjectOptions{ContentType: "application/json"})
	return err
}

// getJSON reads the object key into v.
func (s *Store) getJSON(ctx context.Context, key string, v any) error {
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return err
	}
	defer func() { _ = obj.Close() }()
	if err := json.NewDecoder(obj).Decode(v); err != nil {
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return ErrNotFound
		}
		return s.fail(key, err)
	}
	return nil
}

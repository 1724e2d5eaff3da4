package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"
)

// walKeys are the objects a WAL file (a segment, a .history or a .backup
// file) may be stored as, by its name: the form this store writes first,
// then the other (an encrypted store keeps reading what was archived
// before it was encrypted, and a plain one says that an object is
// encrypted rather than that it is missing).
func (s *Store) walKeys(name string) []string {
	plain := s.key("wal", name+".zst")
	if s.keys != nil {
		return []string{plain + encryptedSuffix, plain}
	}
	return []string{plain, plain + encryptedSuffix}
}

// walName is the WAL file an object of wal/ holds, by the object's base
// name.
func walName(object string) string {
	return strings.TrimSuffix(strings.TrimSuffix(object, encryptedSuffix), ".zst")
}

// sumMeta is the user metadata that holds the SHA-256 of a WAL file's
// uncompressed, unencrypted content (docs/backup.md says what it tells
// someone who reads the store without the key).
const sumMeta = "Wal-Sha256"

// PushWAL archives the WAL file at file (archive_command). Archiving the
// same file again succeeds (PostgreSQL retries after a crash); a file of
// the same name and other content is refused, so that nothing archived is
// ever overwritten: two databases writing to one path would otherwise
// destroy each other's history. Both forms, plain and encrypted, count.
func (s *Store) PushWAL(ctx context.Context, file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	digest := hex.EncodeToString(sum[:])
	keys := s.walKeys(filepath.Base(file))
	for _, key := range keys {
		info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
		switch {
		case err == nil && info.UserMetadata[sumMeta] == digest:
			return nil
		case err == nil:
			return fmt.Errorf("%s is already archived with other content: is another database archiving to the same path?", key)
		case minio.ToErrorResponse(err).Code != minio.NoSuchKey:
			return s.fail(key, err)
		}
	}
	body, opts, err := s.seal(data)
	if err != nil {
		return err
	}
	opts.UserMetadata[sumMeta] = digest
	if _, err := s.client.PutObject(ctx, s.bucket, keys[0], bytes.NewReader(body), int64(len(body)), opts); err != nil {
		return s.fail(keys[0], err)
	}
	return nil
}

// seal is the object of a file's content (a WAL file, a backup's
// backup_manifest): compressed, then encrypted when the store has a key.
func (s *Store) seal(data []byte) ([]byte, minio.PutObjectOptions, error) {
	opts := minio.PutObjectOptions{ContentType: "application/zstd", UserMetadata: map[string]string{}}
	compressed, err := compress(data)
	if err != nil || s.keys == nil {
		return compressed, opts, err
	}
	var buf bytes.Buffer
	w, err := s.keys.seal(&buf)
	if err != nil {
		return nil, opts, err
	}
	if _, err := w.Write(compressed); err != nil {
		return nil, opts, err
	}
	if err := w.Close(); err != nil {
		return nil, opts, err
	}
	opts.ContentType = "application/octet-stream"
	opts.UserMetadata[recipientMeta] = s.keys.recipient().String()
	return buf.Bytes(), opts, nil
}

// FetchWAL restores the archived WAL file name into dest
// (restore_command), from either form; ErrNotFound when it was never
// archived, which PostgreSQL takes as the end of the archive.
func (s *Store) FetchWAL(ctx context.Context, name, dest string) error {
	for _, key := range s.walKeys(name) {
		if err := s.fetchSealed(ctx, "WAL file "+name, key, dest); !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	return ErrNotFound
}

// fetchSealed restores the file what (for errors) from the object key,
// written by seal, into dest.
func (s *Store) fetchSealed(ctx context.Context, what, key, dest string) error {
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return s.fail(key, err)
	}
	defer func() { _ = obj.Close() }()
	var recipient string
	if strings.HasSuffix(key, encryptedSuffix) {
		info, err := obj.Stat()
		if err != nil {
			if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
				return ErrNotFound
			}
			return s.fail(key, err)
		}
		recipient = info.UserMetadata[recipientMeta]
	}
	compressed, err := s.openSealed(obj, what, key, recipient)
	if err != nil {
		return err
	}
	dec, err := zstd.NewReader(compressed)
	if err != nil {
		return err
	}
	defer dec.Close()
	tmp := dest + ".fetching"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, dec)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return ErrNotFound
		}
		return s.fail(key, err)
	}
	return os.Rename(tmp, dest)
}

// openSealed is the compressed content of the file what read from the
// object key, decrypted when the object's name says it is encrypted (to
// recipient, "" when unknown).
func (s *Store) openSealed(obj io.Reader, what, key, recipient string) (io.Reader, error) {
	if !strings.HasSuffix(key, encryptedSuffix) {
		return obj, nil
	}
	return s.keys.open(obj, what, recipient)
}

func compress(data []byte) ([]byte, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		return nil, err
	}
	defer func() { _ = enc.Close() }()
	return enc.EncodeAll(data, nil), nil
}

// ArchivedSize is the size in the store of the archived WAL file name, in
// either form.
func (s *Store) ArchivedSize(ctx context.Context, name string) (int64, error) {
	for _, key := range s.walKeys(name) {
		if size, err := s.stat(ctx, key); !errors.Is(err, ErrNotFound) {
			return size, err
		}
	}
	return 0, ErrNotFound
}

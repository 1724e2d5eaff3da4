package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"
)

// walKey is the object of a WAL file (a segment, a .history or a .backup
// file) by its name.
func (s *Store) walKey(name string) string { return s.key("wal", name+".zst") }

// sumMeta is the user metadata that holds the SHA-256 of a WAL file's
// uncompressed content.
const sumMeta = "Wal-Sha256"

// PushWAL archives the WAL file at file (archive_command). Archiving the
// same file again succeeds (PostgreSQL retries after a crash); a file of
// the same name and other content is refused, so that nothing archived is
// ever overwritten: two databases writing to one path would otherwise
// destroy each other's history.
func (s *Store) PushWAL(ctx context.Context, file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	digest := hex.EncodeToString(sum[:])
	key := s.walKey(filepath.Base(file))
	info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	switch {
	case err == nil && info.UserMetadata[sumMeta] == digest:
		return nil
	case err == nil:
		return fmt.Errorf("%s is already archived with other content: is another database archiving to the same path?", key)
	case minio.ToErrorResponse(err).Code != minio.NoSuchKey:
		return s.fail(key, err)
	}
	compressed, err := compress(data)
	if err != nil {
		return err
	}
	_, err = s.client.PutObject(ctx, s.bucket, key, bytes.NewReader(compressed), int64(len(compressed)),
		minio.PutObjectOptions{ContentType: "application/zstd", UserMetadata: map[string]string{sumMeta: digest}})
	if err != nil {
		return s.fail(key, err)
	}
	return nil
}

// FetchWAL restores the archived WAL file name into dest
// (restore_command); ErrNotFound when it was never archived, which
// PostgreSQL takes as the end of the archive.
func (s *Store) FetchWAL(ctx context.Context, name, dest string) error {
	key := s.walKey(name)
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return s.fail(key, err)
	}
	defer func() { _ = obj.Close() }()
	dec, err := zstd.NewReader(obj)
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

func compress(data []byte) ([]byte, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		return nil, err
	}
	defer func() { _ = enc.Close() }()
	return enc.EncodeAll(data, nil), nil
}

// ArchivedSize is the size in the store of the archived WAL file name.
func (s *Store) ArchivedSize(ctx context.Context, name string) (int64, error) {
	return s.stat(ctx, s.walKey(name))
}

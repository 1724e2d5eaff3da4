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
	"path"
	"path/filepath"
	"strings"
	"sync"

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
// A file an earlier call pushed ahead (PushWALAhead) is published from
// where it waits, a copy inside the store, rather than uploaded again.
func (s *Store) PushWAL(ctx context.Context, file string) error {
	w, err := s.readWAL(ctx, file)
	if err != nil || w.archived {
		return err
	}
	if s.publishAhead(ctx, w) {
		return nil
	}
	return s.upload(ctx, w, w.key)
}

// upload writes w's content, sealed, with its digest, as the object key.
func (s *Store) upload(ctx context.Context, w walPush, key string) error {
	body, opts, err := s.seal(w.data)
	if err != nil {
		return err
	}
	opts.UserMetadata[sumMeta] = w.digest
	if _, err := s.client.PutObject(ctx, s.bucket, key, bytes.NewReader(body), int64(len(body)), opts); err != nil {
		return s.fail(key, err)
	}
	return nil
}

// walPush is a WAL file on its way to the archive.
type walPush struct {
	data   []byte
	digest string // the SHA-256 of data, hexadecimal
	// key is the object it is archived as: the form this store writes.
	key string
	// archived: the archive holds it already, with this content.
	archived bool
}

// readWAL reads the WAL file at file and whether the archive holds it in
// either form; an object of its name with other content is an error.
func (s *Store) readWAL(ctx context.Context, file string) (walPush, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return walPush{}, err
	}
	sum := sha256.Sum256(data)
	w := walPush{data: data, digest: hex.EncodeToString(sum[:])}
	keys := s.walKeys(filepath.Base(file))
	w.key = keys[0]
	for _, key := range keys {
		info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
		switch {
		case err == nil && info.UserMetadata[sumMeta] == w.digest:
			w.archived = true
			return w, nil
		case err == nil:
			return w, fmt.Errorf("%s is already archived with other content: is another database archiving to the same path?", key)
		case minio.ToErrorResponse(err).Code != minio.NoSuchKey:
			return w, s.fail(key, err)
		}
	}
	return w, nil
}

// PushWALAhead archives file as PushWAL does and, at the same time,
// uploads up to ahead WAL segments after it that PostgreSQL has marked
// ready to archive (archive_status/<name>.ready beside it). PostgreSQL
// runs archive_command on one file at a time, so one slow upload holds
// every file behind it. A segment pushed ahead waits beside the archive
// (aheadKey), not in it: uploads finish in any order, and a segment in
// the archive while the one before it is still on its way would look
// like a hole to a restore that reaches the end of the archive
// (Gap). Its own call publishes it, in PostgreSQL's order, with a copy
// inside the store. Only file's error is returned: a segment whose push
// ahead failed is uploaded by its own call, which reports.
func (s *Store) PushWALAhead(ctx context.Context, file string, ahead int) error {
	var wg sync.WaitGroup
	for _, next := range readyAfter(file, ahead) {
		wg.Go(func() { _ = s.pushAhead(ctx, next) })
	}
	err := s.PushWAL(ctx, file)
	wg.Wait()
	return err
}

// aheadKey is where the object key waits when its WAL file was pushed
// ahead: under wal-ahead/, which no restore, retention or Gap reads as
// the archive.
func (s *Store) aheadKey(key string) string { return s.key("wal-ahead", path.Base(key)) }

// pushAhead uploads the WAL file at file to its aheadKey, unless the
// archive holds it already.
func (s *Store) pushAhead(ctx context.Context, file string) error {
	w, err := s.readWAL(ctx, file)
	if err != nil || w.archived {
		return err
	}
	return s.upload(ctx, w, s.aheadKey(w.key))
}

// publishAhead copies w's object pushed ahead, if one waits with w's
// content, to its key in the archive, and deletes it. False when there is
// none, or the copy failed: the caller uploads w.
func (s *Store) publishAhead(ctx context.Context, w walPush) bool {
	ahead := s.aheadKey(w.key)
	info, err := s.client.StatObject(ctx, s.bucket, ahead, minio.StatObjectOptions{})
	if err != nil || info.UserMetadata[sumMeta] != w.digest {
		return false
	}
	// The copy keeps the object's metadata: its digest, and the key it
	// is encrypted to. MatchETag: exactly the object just read.
	if _, err := s.client.CopyObject(ctx, minio.CopyDestOptions{Bucket: s.bucket, Object: w.key},
		minio.CopySrcOptions{Bucket: s.bucket, Object: ahead, MatchETag: info.ETag}); err != nil {
		return false
	}
	_ = s.client.RemoveObject(ctx, s.bucket, ahead, minio.RemoveObjectOptions{})
	return true
}

// readyAfter lists up to n WAL segments after file's that are ready to
// archive, in order, by their path beside it. History, backup history and
// partial files are never pushed ahead.
func readyAfter(file string, n int) []string {
	dir, name := filepath.Split(file)
	entries, err := os.ReadDir(filepath.Join(dir, "archive_status"))
	if err != nil || n <= 0 {
		return nil
	}
	var out []string
	for _, e := range entries { // sorted by name: by position in the WAL
		seg, ok := strings.CutSuffix(e.Name(), ".ready")
		if !ok || seg <= name || !isSegment(seg) {
			continue
		}
		if out = append(out, filepath.Join(dir, seg)); len(out) == n {
			break
		}
	}
	return out
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

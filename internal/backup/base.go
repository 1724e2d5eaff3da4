package backup

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"
)

// Manifest describes a complete base backup: what a restore needs to
// choose it and to know which WAL makes it consistent.
type Manifest struct {
	ID         string    `json:"id"`
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt"`
	// Timeline and BeginLSN: where its WAL starts; the data is consistent
	// once recovery has replayed up to EndLSN.
	Timeline int64  `json:"timeline"`
	BeginLSN string `json:"beginLSN"`
	EndLSN   string `json:"endLSN"`
	// Size is the size in the store, compressed (and encrypted), in bytes.
	Size int64 `json:"size"`
	// Encryption is set when the backup is encrypted (crypt.go).
	Encryption *ManifestEncryption `json:"encryption,omitempty"`
	// Major is the PostgreSQL major of the data ("17", from its
	// PG_VERSION): a backup restores only into a server of that major.
	// Empty in a manifest written before it was recorded.
	Major string `json:"major,omitempty"`
	// Parent is the backup an incremental backup builds on (PostgreSQL
	// 17's pg_basebackup --incremental): it holds only the blocks that
	// changed since, and restores only with every backup of its chain
	// (Chain). Empty for a full backup.
	Parent string `json:"parent,omitempty"`
	// PGManifest: the store holds PostgreSQL's backup_manifest of the
	// backup beside it (pgManifestKey), which an incremental backup on top
	// of it hands to pg_basebackup.
	PGManifest bool `json:"pgManifest,omitempty"`
}

// archiveKey is the object that holds backup m's tar stream.
func (s *Store) archiveKey(m Manifest) string {
	if m.Encryption != nil {
		return s.key("base", m.ID, baseArchive+encryptedSuffix)
	}
	return s.key("base", m.ID, baseArchive)
}

const (
	baseArchive  = "base.tar.zst"
	manifestName = "backup.json"
	// partSize bounds the memory of an upload of unknown size.
	partSize = 16 << 20
)

// walRanges is the part of PostgreSQL's backup manifest (the file
// backup_manifest, which pg_basebackup puts at the end of the tar stream)
// that says which WAL makes the backup consistent.
type walRanges struct {
	Ranges []struct {
		Timeline int64  `json:"Timeline"`
		Start    string `json:"Start-LSN"`
		End      string `json:"End-LSN"`
	} `json:"WAL-Ranges"`
}

// streamFacts is what a base backup's tar stream says of it on the way
// to the store: its WAL range, the major of its data (PG_VERSION), and
// its backup_manifest, kept when it is at most maxPGManifest bytes.
type streamFacts struct {
	walRanges
	major      string
	pgManifest []byte
}

// maxPGManifest bounds the memory a backup_manifest takes on its way to
// the store: about 300,000 files. A backup with a larger one keeps none,
// and the next backup is full.
const maxPGManifest = 64 << 20

// Exec starts cmd and returns a function that waits for it to exit,
// ending it when ctx ends first. PlainExec is exec.Cmd's own; a process
// that reaps its children itself (the instance manager, PID 1) brings its
// own.
type Exec func(ctx context.Context, cmd *exec.Cmd) (wait func() error, err error)

// PlainExec runs cmd with exec.Cmd's Start and Wait.
func PlainExec(ctx context.Context, cmd *exec.Cmd) (func() error, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Kill() })
	return func() error {
		err := cmd.Wait()
		stop()
		return err
	}, nil
}

// TakeBackup takes a base backup of the server conninfo reaches with
// pg_basebackup (a replication connection; the WAL comes from the
// archive, which pg_basebackup waits for on a primary) and streams it,
// compressed, into the store: a full backup, or with parent an
// incremental one on top of it (NextParent). The manifest is written
// last: a backup cut short leaves no manifest and is never restored from.
// An incremental backup the server refuses, or whose parent's
// backup_manifest cannot be read, fails with ErrIncrementalRefused,
// leaving nothing in the store.
func (s *Store) TakeBackup(ctx context.Context, run Exec, conninfo string, now time.Time, parent *Manifest) (Manifest, error) {
	m := Manifest{ID: now.UTC().Format("20060102T150405Z"), StartedAt: now.UTC()}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.Command("pg_basebackup", "--dbname="+conninfo, "--pgdata=-", "--format=tar",
		"--wal-method=none", "--checkpoint=fast", "--label=mydatabase backup "+m.ID)
	if parent != nil {
		file, err := s.fetchPGManifest(ctx, *parent)
		if err != nil {
			// Gone, or no longer to be decrypted: the next full backup
			// starts a new chain. (A store out of reach fails that one.)
			return m, fmt.Errorf("%w: reading the backup_manifest of backup %s: %w", ErrIncrementalRefused, parent.ID, err)
		}
		defer func() { _ = os.Remove(file) }()
		cmd.Args = append(cmd.Args, "--incremental="+file)
		m.Parent = parent.ID
	}
	// Our own pipes: exec.Cmd's would be closed only by its Wait, which a
	// reaping Exec does not call.
	out, w, err := os.Pipe()
	if err != nil {
		return m, err
	}
	defer func() { _ = out.Close() }()
	errR, errW, err := os.Pipe()
	if err != nil {
		_ = w.Close()
		return m, err
	}
	cmd.Stdout, cmd.Stderr = w, errW
	wait, err := run(ctx, cmd)
	_, _ = w.Close(), errW.Close()
	if err != nil {
		_ = errR.Close()
		return m, fmt.Errorf("pg_basebackup: %w", err)
	}
	stderr := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(errR)
		_ = errR.Close()
		stderr <- strings.TrimSpace(string(b))
	}()
	// The tar stream is compressed (then encrypted) on its way to the
	// store, and read on the way for its backup_manifest. Memory stays
	// bounded: the pipe holds nothing, zstd and age a window and a chunk,
	// the upload a part.
	if s.keys != nil {
		m.Encryption = &ManifestEncryption{Recipient: s.keys.recipient().String()}
	}
	pr, pw := io.Pipe()
	var facts streamFacts
	go func() { _ = pw.CloseWithError(s.compressTar(pw, out, &facts)) }()
	contentType := "application/zstd"
	if m.Encryption != nil {
		contentType = "application/octet-stream"
	}
	info, uploadErr := s.client.PutObject(ctx, s.bucket, s.archiveKey(m), pr, -1,
		minio.PutObjectOptions{ContentType: contentType, PartSize: partSize})
	if uploadErr != nil {
		cancel() // pg_basebackup must not block on a pipe nobody reads
		_ = pr.CloseWithError(uploadErr)
	}
	waitErr := wait()
	if waitErr != nil || uploadErr != nil {
		// What reached the store is cut short, and no manifest names it.
		_ = s.client.RemoveObject(context.WithoutCancel(ctx), s.bucket, s.archiveKey(m), minio.RemoveObjectOptions{})
	}
	switch {
	case waitErr != nil && parent != nil && uploadErr == nil && len(facts.Ranges) == 0:
		return m, fmt.Errorf("%w: pg_basebackup --incremental on backup %s: %w: %s", ErrIncrementalRefused, parent.ID, waitErr, <-stderr)
	case waitErr != nil:
		return m, fmt.Errorf("pg_basebackup: %w: %s", waitErr, <-stderr)
	case uploadErr != nil:
		return m, s.fail("uploading the base backup", uploadErr)
	}
	if len(facts.Ranges) == 0 {
		return m, errors.New("the base backup has no backup_manifest with its WAL range")
	}
	first, last := facts.Ranges[0], facts.Ranges[len(facts.Ranges)-1]
	m.Timeline, m.BeginLSN, m.EndLSN, m.Size, m.Major = first.Timeline, first.Start, last.End, info.Size, facts.major
	if facts.pgManifest != nil {
		if err := s.putPGManifest(ctx, m, facts.pgManifest); err != nil {
			return m, err
		}
		m.PGManifest = true
	}
	m.FinishedAt = time.Now().UTC()
	return m, s.putJSON(ctx, s.key("base", m.ID, manifestName), m)
}

// compressTar writes the tar stream tarStream, compressed and, when the
// store has a key, encrypted, to w, and reads what it says of the backup
// into facts on the way.
func (s *Store) compressTar(w io.Writer, tarStream io.Reader, facts *streamFacts) error {
	sink := io.WriteCloser(nopCloser{w})
	if s.keys != nil {
		var err error
		if sink, err = s.keys.seal(w); err != nil {
			return err
		}
	}
	enc, err := zstd.NewWriter(sink)
	if err != nil {
		return err
	}
	err = readManifest(io.TeeReader(tarStream, enc), facts)
	if cerr := enc.Close(); err == nil {
		err = cerr
	}
	if cerr := sink.Close(); err == nil {
		err = cerr
	}
	return err
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// readManifest reads a tar stream to its end, decoding backup_manifest
// and PG_VERSION into facts on the way.
func readManifest(r io.Reader, facts *streamFacts) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("the base backup's tar stream: %w", err)
		}
		switch h.Name {
		case "backup_manifest":
			if err := facts.readPGManifest(tr); err != nil {
				return fmt.Errorf("backup_manifest: %w", err)
			}
		case "PG_VERSION":
			version, err := io.ReadAll(io.LimitReader(tr, 16))
			if err != nil {
				return fmt.Errorf("PG_VERSION: %w", err)
			}
			facts.major = strings.TrimSpace(string(version))
		}
	}
	_, err := io.Copy(io.Discard, r) // the end-of-archive padding
	return err
}

// Backups lists the complete base backups, oldest first.
func (s *Store) Backups(ctx context.Context) ([]Manifest, error) {
	var out []Manifest
	for obj := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.key("base") + "/", Recursive: true}) {
		if obj.Err != nil {
			return nil, s.fail("listing the base backups", obj.Err)
		}
		if filepath.Base(obj.Key) != manifestName {
			continue
		}
		var m Manifest
		if err := s.getJSON(ctx, obj.Key, &m); err != nil {
			return nil, err
		}
		if manifestAt(obj.Key, m) {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b Manifest) int { return a.FinishedAt.Compare(b.FinishedAt) })
	return out, nil
}

// manifestAt tells whether m, read at key, is a manifest TakeBackup wrote
// there: in the directory its ID names. Any other (a backup directory
// copied, or a manifest written by hand) is no backup: its ID would name
// another backup's objects to restore or delete (two manifests of one ID
// would have retention delete the newest backup), or, with a "..", objects
// outside this database's path.
func manifestAt(key string, m Manifest) bool {
	return m.ID != "" && m.ID != "." && m.ID != ".." && !strings.ContainsAny(m.ID, `/\`) &&
		path.Base(path.Dir(key)) == m.ID
}

// ErrNoBackup: no base backup fits.
var ErrNoBackup = errors.New("no base backup fits")

// Choose picks the backup to restore into a server of PostgreSQL major
// (any, when empty): the one named id, or else the latest of that major
// that finished before target (any time: the latest). A backup of another
// major does not restore: an upgraded database's archive holds backups of
// both.
func Choose(backups []Manifest, id string, target time.Time, major string) (Manifest, error) {
	fits := func(b Manifest) bool { return major == "" || b.Major == "" || b.Major == major }
	other := ""
	for _, b := range slices.Backward(backups) {
		switch {
		case id != "" && b.ID == id && !fits(b):
			return Manifest{}, fmt.Errorf("%w: backup %s is of PostgreSQL %s, and restores only into a server of that major, not %s",
				ErrNoBackup, id, b.Major, major)
		case (id != "" && b.ID == id) || (id == "" && fits(b) && (target.IsZero() || b.FinishedAt.Before(target))):
			return b, nil
		case !fits(b) && other == "":
			other = b.Major
		}
	}
	switch {
	case len(backups) == 0:
		return Manifest{}, fmt.Errorf("%w: the object store holds no base backup at that bucket and path", ErrNoBackup)
	case id != "":
		return Manifest{}, fmt.Errorf("%w: there is no backup %q", ErrNoBackup, id)
	case other != "":
		return Manifest{}, fmt.Errorf("%w: none of the %d backups is of PostgreSQL %s and finished before the target (the newest is of %s): "+
			"a backup restores only into a server of its major", ErrNoBackup, len(backups), major, other)
	}
	return Manifest{}, fmt.Errorf("%w: none of the %d backups finished before the target %s", ErrNoBackup, len(backups), target.UTC().Format(time.RFC3339))
}

// Restore writes the data of the last backup of chain (Chain: a full
// backup, then each incremental on top of it) into dir, which must be
// empty or absent, without the files that must not survive a restore
// (leftOut). A full backup is unpacked into dir. A chain is unpacked
// beside dir (dir + ".chain"), check (when not nil) runs on each backup
// unpacked, and pg_combinebackup (run with run) writes dir from them: a
// restore of a chain needs room for the chain and for the result.
func (s *Store) Restore(ctx context.Context, run Exec, chain []Manifest, dir string, check func(m Manifest, dir string) error) error {
	switch len(chain) {
	case 0:
		return errors.New("Restore: no backup")
	case 1:
		return s.unpackObject(ctx, chain[0], dir)
	}
	return s.restoreChain(ctx, run, chain, dir, check)
}

// unpackObject unpacks base backup m from the store into dir.
func (s *Store) unpackObject(ctx context.Context, m Manifest, dir string) error {
	key := s.archiveKey(m)
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return s.fail(key, err)
	}
	defer func() { _ = obj.Close() }()
	return s.unpack(bufio.NewReaderSize(obj, 1<<20), m, dir)
}

// unpack writes the archive object of base backup m, read from obj, into
// dir.
func (s *Store) unpack(obj io.Reader, m Manifest, dir string) error {
	compressed, err := s.openArchive(obj, m)
	if err != nil {
		return err
	}
	dec, err := zstd.NewReader(compressed)
	if err != nil {
		return err
	}
	defer dec.Close()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := untar(tar.NewReader(dec), dir); err != nil {
		return err
	}
	// The tar stream ends before the zstd frame does: zstd checks its
	// checksum, and age the last chunk, only at the very end, so a damaged
	// object would otherwise restore without a word.
	if _, err := io.Copy(io.Discard, dec); err != nil {
		return fmt.Errorf("the base backup archive, after its last file: %w", err)
	}
	return nil
}

// BaseObject is the key of the object that holds base backup m.
func (s *Store) BaseObject(m Manifest) string { return s.archiveKey(m) }

// openArchive is the compressed tar stream of backup m read from its
// archive object, decrypted when m is encrypted. The header is read here:
// a key that does not match fails before anything is written.
func (s *Store) openArchive(obj io.Reader, m Manifest) (io.Reader, error) {
	if m.Encryption == nil {
		return obj, nil
	}
	return s.keys.open(obj, "base backup "+m.ID, m.Encryption.Recipient)
}

// leftOut tells whether the archive entry name (cleaned, relative to the
// data directory) is one a restore must not write, after PostgreSQL's
// documentation of base backups ("Continuous Archiving and Point-in-Time
// Recovery", the same for 15 to 18):
//   - standby.signal and recovery.signal. pg_basebackup copies a standby's
//     standby.signal, so a backup taken on a replica carries one; with it
//     the restored server stays in standby mode and never ends recovery at
//     the end of the archive. The restore writes its own recovery.signal.
//   - postmaster.pid and postmaster.opts: of a server that ran on the data.
//   - the files of pg_wal and pg_replslot: the restore's WAL comes from the
//     archive alone, and the source's replication slots would hold WAL for
//     replicas the restored database never has. The directories stay.
//
// pg_basebackup leaves out the last four itself; backups are stored as it
// wrote them (docs/backup.md says why), so the signal files are dropped
// here, on the way in.
func leftOut(name string, typ byte) bool {
	switch name {
	case "standby.signal", "recovery.signal", "postmaster.pid", "postmaster.opts":
		return true
	}
	for _, dir := range []string{"pg_wal/", "pg_replslot/"} {
		if strings.HasPrefix(name, dir) && (typ != tar.TypeDir || dir == "pg_replslot/") {
			return true
		}
	}
	return false
}

// untar writes a tar stream under dir, refusing any entry that would land
// outside it and skipping those a restore leaves out.
func untar(tr *tar.Reader, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer func() { _ = root.Close() }()
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("the base backup archive: %w", err)
		}
		name := filepath.Clean(h.Name)
		if leftOut(name, h.Typeflag) {
			continue
		}
		mode := os.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			if name == "." {
				continue
			}
			if err := root.MkdirAll(name, mode|0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			f, err := root.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode|0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := root.Symlink(h.Linkname, name); err != nil {
				return err
			}
		default:
			return fmt.Errorf("the base backup archive: %s has an unsupported type %q", h.Name, h.Typeflag)
		}
	}
}

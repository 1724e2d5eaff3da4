package backup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Incremental base backups (PostgreSQL 17 or later). Every server of a
// MyDatabase with spec.backup on 17 summarises its WAL (summarize_wal),
// and the store keeps each backup's backup_manifest beside it. A backup
// is then taken with pg_basebackup --incremental on top of the newest
// one, until a chain holds spec.backup.incremental.fullEvery backups, and
// a restore combines the chain with pg_combinebackup. Retention keeps
// every backup a kept one builds on (Retention.Expired).

// ErrIncrementalRefused: an incremental backup could not be taken: the
// server refused it (it lacks the WAL summaries since its parent began,
// say, after it was cloned anew or restarted without summarize_wal), or
// the parent's backup_manifest could not be read. A full backup is taken
// instead.
var ErrIncrementalRefused = errors.New("no incremental backup")

// MinIncrementalMajor is the first PostgreSQL major with incremental
// backups.
const MinIncrementalMajor = 17

// NextParent is the backup the next backup of a server of PostgreSQL
// major builds on, under a full backup every fullEvery backups (0: every
// backup full): the newest backup of that major, unless its chain already
// holds fullEvery backups, or the store lacks what an incremental needs.
// When it is nil, why says why the backup is full ("" when incremental
// backups are off).
func NextParent(backups []Manifest, fullEvery int, major string) (parent *Manifest, why string) {
	if fullEvery < 2 {
		return nil, ""
	}
	if n, err := strconv.Atoi(major); err != nil || n < MinIncrementalMajor {
		return nil, fmt.Sprintf("PostgreSQL %s takes full backups only: incremental backups need PostgreSQL %d or later", major, MinIncrementalMajor)
	}
	var newest *Manifest
	for i := range backups {
		if backups[i].Major == major {
			newest = &backups[i]
		}
	}
	if newest == nil {
		return nil, fmt.Sprintf("the first backup of PostgreSQL %s is full", major)
	}
	chain, err := Chain(backups, *newest)
	switch {
	case err != nil:
		return nil, fmt.Sprintf("the newest backup does not restore, so nothing builds on it: %v", err)
	case len(chain) >= fullEvery:
		return nil, fmt.Sprintf("the chain of backup %s holds %d backups, and spec.backup.incremental.fullEvery is %d", chain[0].ID, len(chain), fullEvery)
	case !newest.PGManifest:
		return nil, fmt.Sprintf("the store keeps no backup_manifest of the newest backup, %s, which an incremental backup needs", newest.ID)
	}
	return newest, ""
}

// Chain is what a restore of backup m needs, oldest first: m alone when
// it is full, else the full backup its chain starts from and every
// incremental from there to m. A backup it builds on that backups (the
// store's list) lacks is an error: m cannot be restored.
func Chain(backups []Manifest, m Manifest) ([]Manifest, error) {
	byID := make(map[string]Manifest, len(backups))
	for _, b := range backups {
		byID[b.ID] = b
	}
	chain := []Manifest{m}
	for b := m; b.Parent != ""; {
		parent, ok := byID[b.Parent]
		switch {
		case !ok:
			return nil, fmt.Errorf("%w: backup %s is incremental on backup %s, which the store does not hold", ErrNoBackup, b.ID, b.Parent)
		case len(chain) > len(backups):
			return nil, fmt.Errorf("%w: the chain of backup %s loops", ErrNoBackup, m.ID)
		}
		chain = append(chain, parent)
		b = parent
	}
	for i, j := 0, len(chain)-1; i < j; i, j = i+1, j-1 {
		chain[i], chain[j] = chain[j], chain[i]
	}
	return chain, nil
}

// readPGManifest reads a backup's backup_manifest from r: its WAL range,
// and the whole file when it is small enough to keep.
func (f *streamFacts) readPGManifest(r io.Reader) error {
	b, err := io.ReadAll(io.LimitReader(r, maxPGManifest+1))
	if err != nil {
		return err
	}
	if len(b) <= maxPGManifest {
		f.pgManifest = b
		return json.Unmarshal(b, &f.walRanges)
	}
	return json.NewDecoder(io.MultiReader(bytes.NewReader(b), r)).Decode(&f.walRanges)
}

// pgManifestKey is the object that holds backup m's backup_manifest,
// compressed and, as m is, encrypted.
func (s *Store) pgManifestKey(m Manifest) string {
	key := s.key("base", m.ID, "backup_manifest.zst")
	if m.Encryption != nil {
		key += encryptedSuffix
	}
	return key
}

// putPGManifest stores the backup_manifest of backup m.
func (s *Store) putPGManifest(ctx context.Context, m Manifest, content []byte) error {
	body, opts, err := s.seal(content)
	if err != nil {
		return err
	}
	key := s.pgManifestKey(m)
	if _, err := s.client.PutObject(ctx, s.bucket, key, bytes.NewReader(body), int64(len(body)), opts); err != nil {
		return s.fail(key, err)
	}
	return nil
}

// fetchPGManifest writes the backup_manifest of backup m into a file of
// its own, for pg_basebackup --incremental, and returns its name.
func (s *Store) fetchPGManifest(ctx context.Context, m Manifest) (string, error) {
	f, err := os.CreateTemp("", "backup_manifest-"+m.ID+"-*")
	if err != nil {
		return "", err
	}
	_ = f.Close()
	if err := s.fetchSealed(ctx, "the backup_manifest of backup "+m.ID, s.pgManifestKey(m), f.Name()); err != nil {
		_ = os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// restoreChain is Restore of more than one backup.
func (s *Store) restoreChain(ctx context.Context, run Exec, chain []Manifest, dir string, check func(Manifest, string) error) error {
	parts := filepath.Clean(dir) + ".chain"
	if err := os.RemoveAll(parts); err != nil { // left by a restore cut short
		return err
	}
	defer func() { _ = os.RemoveAll(parts) }()
	args := []string{"--output=" + dir}
	for i, m := range chain {
		part := filepath.Join(parts, fmt.Sprintf("%02d-%s", i, m.ID))
		if err := s.unpackObject(ctx, m, part); err != nil {
			return fmt.Errorf("backup %s, %d of the %d backups a restore of %s combines: %w", m.ID, i+1, len(chain), chain[len(chain)-1].ID, err)
		}
		if check != nil {
			if err := check(m, part); err != nil {
				return err
			}
		}
		args = append(args, part)
	}
	return combine(ctx, run, args)
}

// combine runs pg_combinebackup with args.
func combine(ctx context.Context, run Exec, args []string) error {
	errFile, err := os.CreateTemp("", "pg_combinebackup-*")
	if err != nil {
		return err
	}
	defer func() { _ = errFile.Close(); _ = os.Remove(errFile.Name()) }()
	cmd := exec.Command("pg_combinebackup", args...)
	cmd.Stdout, cmd.Stderr = errFile, errFile
	wait, err := run(ctx, cmd)
	if err == nil {
		err = wait()
	}
	if err != nil {
		out, _ := os.ReadFile(errFile.Name())
		return fmt.Errorf("pg_combinebackup: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

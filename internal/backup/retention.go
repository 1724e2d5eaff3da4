package backup

import (
	"context"
	"fmt"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/minio/minio-go/v7"
)

// Retention is which base backups are kept (spec.backup.retention). A
// backup is deleted only when no rule keeps it; the newest is always kept.
type Retention struct {
	// Window keeps every backup a restore to a time within it needs: those
	// that finished in it and the newest before it. Zero: no window.
	Window time.Duration `json:"window,omitempty"`
	// Keep keeps this many of the newest backups. Zero: no count.
	Keep int `json:"keep,omitempty"`
}

// ParseWindow reads a recovery window such as "7d" or "36h".
func ParseWindow(s string) (time.Duration, error) {
	unit := map[byte]time.Duration{'d': 24 * time.Hour, 'h': time.Hour}
	if len(s) < 2 || unit[s[len(s)-1]] == 0 {
		return 0, fmt.Errorf("recovery window %q: want a number of days or hours such as 7d or 36h", s)
	}
	n, err := strconv.Atoi(s[:len(s)-1])
	if err != nil || n < 1 {
		return 0, fmt.Errorf("recovery window %q: want a number of days or hours such as 7d or 36h", s)
	}
	return time.Duration(n) * unit[s[len(s)-1]], nil
}

// Expired is what retention r deletes from backups (oldest first, as
// Backups lists them) at now: the backups no rule keeps, and that no kept
// incremental backup builds on, oldest first.
func (r Retention) Expired(backups []Manifest, now time.Time) []Manifest {
	if len(backups) == 0 || (r.Window == 0 && r.Keep == 0) {
		return nil
	}
	keep := make([]bool, len(backups))
	keep[len(backups)-1] = true
	for i := range backups {
		if r.Keep > 0 && i >= len(backups)-r.Keep {
			keep[i] = true
		}
	}
	if r.Window > 0 {
		start := now.Add(-r.Window)
		for i, b := range backups {
			// A backup that finished in the window, or the newest one
			// before it: a restore to the window's start begins there.
			if !b.FinishedAt.Before(start) || (i+1 < len(backups) && !backups[i+1].FinishedAt.Before(start)) {
				keep[i] = true
			}
		}
	}
	// A kept incremental backup restores only with every backup it
	// builds on.
	index := make(map[string]int, len(backups))
	for i, b := range backups {
		index[b.ID] = i
	}
	for i := len(backups) - 1; i >= 0; i-- {
		if p, ok := index[backups[i].Parent]; keep[i] && ok {
			keep[p] = true
		}
	}
	var out []Manifest
	for i, b := range backups {
		if !keep[i] {
			out = append(out, b)
		}
	}
	return out
}

// segmentSize is the WAL segment size of the servers the operator makes
// (initdb's default).
const segmentSize = 16 << 20

// WALFile is the name of the WAL segment that holds lsn on timeline, a
// TimeLineID of PostgreSQL's (1 to FFFFFFFF): any other, as a manifest
// from the store may hold, would write no segment's name.
func WALFile(timeline int64, lsn string) (string, error) {
	if timeline < 1 || timeline > math.MaxUint32 {
		return "", fmt.Errorf("timeline %d is not one of PostgreSQL's (1 to %X)", timeline, uint32(math.MaxUint32))
	}
	pos, err := pglogrepl.ParseLSN(lsn)
	if err != nil {
		return "", fmt.Errorf("WAL position %q: %w", lsn, err)
	}
	seg := uint64(pos) / segmentSize
	const perID = 0x100000000 / segmentSize
	return fmt.Sprintf("%08X%08X%08X", timeline, seg/perID, seg%perID), nil
}

// DeleteBackup deletes base backup m: its manifest first, so that a
// deletion cut short leaves no backup that looks complete.
func (s *Store) DeleteBackup(ctx context.Context, m Manifest) error {
	for _, key := range []string{s.key("base", m.ID, manifestName), s.archiveKey(m), s.pgManifestKey(m)} {
		if err := s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil {
			return s.fail("deleting "+key, err)
		}
	}
	return nil
}

// PruneWAL deletes the archived WAL segments, on any timeline, that come
// before the segment first (a segment's file name): the WAL of no backup
// that begins at or after it. Timeline history files are always kept.
// It returns how many files it deleted.
func (s *Store) PruneWAL(ctx context.Context, first string) (int, error) {
	if len(first) != 24 {
		return 0, fmt.Errorf("PruneWAL: %q is not a WAL segment's name", first)
	}
	prefix := s.key("wal") + "/"
	deleted := 0
	for obj := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix}) {
		if obj.Err != nil {
			return deleted, s.fail("listing the WAL", obj.Err)
		}
		name := walName(path.Base(obj.Key))
		if !segmentBefore(name, first) {
			continue
		}
		if err := s.client.RemoveObject(ctx, s.bucket, obj.Key, minio.RemoveObjectOptions{}); err != nil {
			return deleted, s.fail("deleting "+obj.Key, err)
		}
		deleted++
	}
	return deleted, nil
}

// segmentBefore: name is a segment (or a partial segment, or a backup
// history file) whose position comes before first's, whatever the
// timelines. History files (<timeline>.history) never are.
func segmentBefore(name, first string) bool {
	if len(name) < 24 || strings.HasSuffix(name, ".history") {
		return false
	}
	if strings.Trim(name[:24], "0123456789ABCDEF") != "" {
		return false
	}
	return name[8:24] < first[8:24]
}

// ApplyRetention deletes what r does not keep: the expired backups, then
// the WAL that comes before the oldest backup kept. It returns the
// backups deleted and the number of WAL files.
func (s *Store) ApplyRetention(ctx context.Context, r Retention, now time.Time) ([]Manifest, int, error) {
	list, err := s.Backups(ctx)
	if err != nil {
		return nil, 0, err
	}
	expired := r.Expired(list, now)
	for _, m := range expired {
		if err := s.DeleteBackup(ctx, m); err != nil {
			return nil, 0, err
		}
	}
	kept := slices.DeleteFunc(slices.Clone(list), func(m Manifest) bool { return slices.Contains(expired, m) })
	if len(kept) == 0 {
		return expired, 0, nil
	}
	// Also when nothing expired now: a pass cut short after deleting
	// backups left their WAL.
	first, err := WALFile(kept[0].Timeline, kept[0].BeginLSN)
	if err != nil {
		return expired, 0, err
	}
	n, err := s.PruneWAL(ctx, first)
	return expired, n, err
}

// Gap tells whether the archive has a hole right after the WAL segment
// last, where a recovery to the end of the archive stopped: the next
// segment of last's timeline is missing while a later one, next, is there.
// PostgreSQL archives a timeline's segments in order and retries one
// until it succeeds, so such a hole is a lost or deleted object, not a
// segment yet to come; every write after it is missing from a restore
// that ended there. A later timeline whose history file is missing is not
// seen.
func (s *Store) Gap(ctx context.Context, last string) (missing, next string, err error) {
	var names []string
	for obj := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.key("wal") + "/"}) {
		if obj.Err != nil {
			return "", "", s.fail("listing the WAL", obj.Err)
		}
		names = append(names, path.Base(obj.Key))
	}
	missing, next = gapAfter(names, last)
	return missing, next, nil
}

// gapAfter is Gap on the archive's object names.
func gapAfter(names []string, last string) (missing, next string) {
	if len(last) != 24 {
		return "", ""
	}
	for _, name := range names {
		// A segment's object of last's timeline, past it: not a .partial,
		// .backup or .history file.
		if len(name) < 24 || !strings.HasPrefix(name[24:], ".zst") || strings.Trim(name[:24], "0123456789ABCDEF") != "" ||
			name[:8] != last[:8] || name[8:24] <= last[8:] {
			continue
		}
		if next == "" || name[:24] < next {
			next = name[:24]
		}
	}
	log, errLog := strconv.ParseUint(last[8:16], 16, 32)
	seg, errSeg := strconv.ParseUint(last[16:24], 16, 32)
	if next == "" || errLog != nil || errSeg != nil {
		return "", ""
	}
	const perLog = 0x100000000 / segmentSize
	if seg++; seg == perLog {
		log, seg = log+1, 0
	}
	if want := fmt.Sprintf("%s%08X%08X", last[:8], log, seg); next != want {
		return want, next
	}
	return "", ""
}

// NewestTimeline is the highest timeline the archive holds a WAL file of
// (a segment, a partial segment or a history file); 0 when it holds none.
// A major upgrade starts the new cluster above it, so that the new
// cluster's WAL and history files never meet the old one's under one
// name, and a restore of an old backup to the end of the archive never
// follows a timeline of the new cluster.
func (s *Store) NewestTimeline(ctx context.Context) (int64, error) {
	var newest int64
	for obj := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.key("wal") + "/"}) {
		if obj.Err != nil {
			return 0, s.fail("listing the WAL", obj.Err)
		}
		if tli := timelineOf(walName(path.Base(obj.Key))); tli > newest {
			newest = tli
		}
	}
	return newest, nil
}

// timelineOf is the timeline of a WAL file's name (its first eight
// hexadecimal digits), 0 for a name that is none.
func timelineOf(name string) int64 {
	switch {
	case len(name) == 16 && strings.HasSuffix(name, ".history"):
	case len(name) >= 24 && isSegment(name[:24]):
	default:
		return 0
	}
	tli, err := strconv.ParseUint(name[:8], 16, 32)
	if err != nil {
		return 0
	}
	return int64(tli)
}

// isSegment is true for the name of a WAL segment: 24 upper-case
// hexadecimal digits.
func isSegment(name string) bool {
	if len(name) != 24 {
		return false
	}
	for _, c := range name {
		if (c < '0' || c > '9') && (c < 'A' || c > 'F') {
			return false
		}
	}
	return true
}

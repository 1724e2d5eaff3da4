package instance

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"example.com/myoperator/internal/backup"
)

// The upgraded cluster's timeline: above the old cluster's and every one
// its archive holds (docs/backup.md, "Backups across a major upgrade").

// newTimeline is the timeline the upgraded cluster starts on: the one
// after the old cluster's, and after every timeline the archive holds.
// pg_upgrade starts the new cluster on timeline 1, its WAL files named
// after the old one's last; in the same archive path, the new cluster's
// first promotion would then write a history file the old one may have
// written under that name (the archive refuses to overwrite it, and
// archiving stops), and a restore of an old backup to the end of the
// archive would follow the new cluster's timelines. Above every one of
// them, neither happens: PostgreSQL looks for a later timeline one number
// at a time, and the new cluster never writes its first timeline's
// history file. The archive is read before anything changes, so a store
// that does not answer leaves the old data untouched.
func (u *upgrader) newTimeline(ctx context.Context, old int64) (int64, error) {
	newest := old
	if u.uc.Archive != nil {
		store, err := backup.Open(*u.uc.Archive)
		var archived int64
		if err == nil {
			archived, err = store.NewestTimeline(ctx)
		}
		if err != nil {
			return 0, untouched("reading the timelines of the archive at %s/%s, which the upgraded cluster's must follow: %v",
				u.uc.Archive.Bucket, u.uc.Archive.Path, err)
		}
		newest = max(newest, archived)
	}
	next, err := timelineAfter(newest)
	if err != nil {
		return 0, untouched("%v: the upgraded cluster's timeline must be above it; remove the object that names it, "+
			"or give spec.backup.objectStore.path a new value", err)
	}
	u.log("the upgraded cluster starts on timeline %d: the old one is on %d, the archive holds up to %d", next, old, newest)
	return next, nil
}

// timelineAfter is the timeline after newest. PostgreSQL's timelines are
// 32 bits, and pg_resetwal would refuse the one after the last, past the
// point of no return: checked here, before anything changes. An archive
// someone else can write could name that one.
func timelineAfter(newest int64) (int64, error) {
	if newest >= math.MaxUint32 {
		return 0, fmt.Errorf("the newest timeline of the old cluster and its archive is %d (%08X), the last PostgreSQL has", newest, newest)
	}
	return newest + 1, nil
}

// moveToTimeline puts the new cluster, which pg_upgrade left on timeline
// 1, on timeline, with pg_resetwal: its WAL continues at the segment
// after the one it is at, on that timeline. The cluster is shut down
// cleanly (pg_upgrade's last step), so nothing in its WAL is lost.
// Its output is returned.
func (u *upgrader) moveToTimeline(ctx context.Context, timeline int64) (string, error) {
	newBin, err := newBinDir()
	if err != nil {
		return "", err
	}
	out, err := u.procs.run(ctx, []string{"LC_ALL=C"}, "", filepath.Join(newBin, "pg_controldata"), u.scratch)
	if err != nil {
		return out, err
	}
	next, err := walFileOnTimeline(controlFields(out)["Latest checkpoint's REDO WAL file"], timeline)
	if err != nil {
		return out, err
	}
	u.log("pg_resetwal -l %s: the upgraded cluster's WAL goes on at %s", next, next)
	if out, err := u.procs.run(ctx, nil, "", filepath.Join(newBin, "pg_resetwal"), "-l", next, u.scratch); err != nil {
		return out, err
	}
	// pg_resetwal leaves wal_level "minimal" in pg_control, with which
	// the server refuses to start as a standby, as every server of this
	// operator starts. A start and a clean shutdown in single-user mode
	// write the real one back, as pg_upgrade's own last start does.
	return u.procs.run(ctx, nil, "", filepath.Join(newBin, "postgres"), "--single", "-D", u.scratch,
		"-c", "listen_addresses=", "-c", "wal_level=replica", "postgres")
}

// walFileOnTimeline is the name of the WAL segment after redo (a segment's
// name), on timeline.
func walFileOnTimeline(redo string, timeline int64) (string, error) {
	if len(redo) != 24 {
		return "", fmt.Errorf("pg_controldata gives %q as the last checkpoint's WAL file", redo)
	}
	log, errLog := strconv.ParseUint(redo[8:16], 16, 32)
	seg, errSeg := strconv.ParseUint(redo[16:24], 16, 32)
	if errLog != nil || errSeg != nil {
		return "", fmt.Errorf("pg_controldata gives %q as the last checkpoint's WAL file", redo)
	}
	// 16 MiB segments, 256 to a log file (initdb's default, which the
	// upgrade keeps).
	if seg++; seg == 0x100 {
		log, seg = log+1, 0
	}
	return fmt.Sprintf("%08X%08X%08X", timeline, log, seg), nil
}

func controlFields(out string) map[string]string {
	fields := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if field, value, ok := strings.Cut(sc.Text(), ":"); ok {
			fields[strings.TrimSpace(field)] = strings.TrimSpace(value)
		}
	}
	return fields
}

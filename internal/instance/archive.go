package instance

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"example.com/myoperator/internal/backup"
	"example.com/myoperator/internal/contract"
)

// Continuous archiving. With spec.backup every server runs with
// archive_mode=on and an archive_command that is this program's wal-push
// (cmd/instance): a standby archives nothing, a primary every WAL file it
// completes, and a promoted one its new timeline's history file and the
// last, partial segment of the old timeline. The object store's
// configuration, its secret key included, is a file of the instance
// manager's in the socket directory (an emptyDir, mode 0600), never the
// server's environment or command line.

// backupConfigFile holds the object store spec.backup names.
func (c Config) backupConfigFile() string { return filepath.Join(c.SocketDir, "backup.json") }

// archiveArgs turn archiving on when there is an object store, and WAL
// summaries on when base backups are to be incremental (PostgreSQL 17 or
// later): pg_basebackup --incremental reads them on the server that
// takes the backup, primary or standby, back to where its parent began.
func (c Config) archiveArgs() []string {
	if c.Backup == nil {
		return nil
	}
	args := []string{"-c", "archive_mode=on",
		"-c", fmt.Sprintf("archive_command=%s wal-push --config %s %%p", shellQuote(c.Self), shellQuote(c.backupConfigFile()))}
	if c.FullEvery > 1 && c.dataMajor() >= backup.MinIncrementalMajor {
		args = append(args, "-c", "summarize_wal=on")
	}
	return args
}

// fetchArgs let a replica that follows a primary fetch from the archive
// the WAL the primary no longer keeps (wal_keep_size, 128 MB): a replica
// restarted under write load, or one that fell behind, catches up without
// a new clone. Not for a standby of no one (dataPosition), which must
// replay only what its own data holds.
func (c Config) fetchArgs() []string {
	if c.Backup == nil {
		return nil
	}
	return []string{"-c", fmt.Sprintf("restore_command=%s wal-fetch --config %s %%f %%p", shellQuote(c.Self), shellQuote(c.backupConfigFile()))}
}

// shellQuote quotes s for the shell PostgreSQL runs its commands with.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Backup takes a full base backup of the server of this container into
// the object store of spec.backup: `instance backup`, run in the database
// container (PGHOST and PGPORT are its environment; pg_basebackup
// connects through the socket as the postgres OS user, whom pg_hba.conf
// admits to replication by peer).
func Backup(ctx context.Context) (backup.Manifest, error) {
	dir, port := os.Getenv("PGHOST"), os.Getenv("PGPORT")
	if dir == "" || port == "" {
		return backup.Manifest{}, errors.New("PGHOST and PGPORT are not set: run this in the database container")
	}
	file := Config{SocketDir: dir}.backupConfigFile()
	cfg, err := backup.ReadConfig(file)
	if errors.Is(err, fs.ErrNotExist) {
		return backup.Manifest{}, fmt.Errorf("%s does not exist: this MyDatabase has no spec.backup", file)
	} else if err != nil {
		return backup.Manifest{}, err
	}
	store, err := backup.Open(cfg)
	if err != nil {
		return backup.Manifest{}, err
	}
	m, err := store.TakeBackup(ctx, backup.PlainExec, fmt.Sprintf("host=%s port=%s user=postgres", dir, port), time.Now(), nil)
	if err == nil {
		// The instance manager lists the backups again for its report.
		_ = os.WriteFile(filepath.Join(dir, backupDoneFile), []byte(m.ID), 0o600)
	}
	return m, err
}

// archiveErrorFile is where wal-push leaves its last error, beside its
// configuration, for the instance manager's report; it is removed when an
// attempt succeeds.
const archiveErrorFile = "wal-push.error"

// RecordArchiveResult keeps, beside the configuration file config, the
// error of a wal-push (nil: it succeeded).
func RecordArchiveResult(config string, err error) {
	file := filepath.Join(filepath.Dir(config), archiveErrorFile)
	if err == nil {
		_ = os.Remove(file)
		return
	}
	_ = os.WriteFile(file, []byte(err.Error()), 0o600)
}

// observeArchive reads pg_stat_archiver on a primary with spec.backup.
func (pg *pgServer) observeArchive(ctx context.Context, conn *pgx.Conn) (*contract.Archive, error) {
	if pg.c.Backup == nil {
		return nil, nil
	}
	a := &contract.Archive{}
	var archived, failed *string
	err := conn.QueryRow(ctx, "SELECT last_archived_wal, last_archived_time, last_failed_wal, last_failed_time FROM pg_stat_archiver").
		Scan(&archived, &a.LastArchivedTime, &failed, &a.LastFailedTime)
	if err != nil {
		return nil, err
	}
	a.LastArchivedWAL, a.LastFailedWAL, a.Backups = deref(archived), deref(failed), pg.backups.Load()
	if a.Failing() {
		if b, err := os.ReadFile(filepath.Join(pg.c.SocketDir, archiveErrorFile)); err == nil {
			a.Error = strings.TrimSpace(string(b))
		}
	}
	return a, nil
}

// backupsEvery is how often the instance manager looks at the object
// store's base backups, for its report; at once, too, after `instance
// backup` in its container (which touches backupDoneFile).
const (
	backupsEvery   = 5 * time.Minute
	backupDoneFile = "backup.done"
)

// watchBackups sums up the store's base backups until ctx ends, for the
// primary's report. It runs beside the HA loop, never in it: a slow store
// delays nothing else.
func (k *backupKeeper) watchBackups(ctx context.Context) {
	// Listing and retention read manifests, which are never encrypted, and
	// delete by name: they need no key, and go on whatever becomes of it.
	cfg := *k.c.Backup
	cfg.Encryption = nil
	store, err := backup.Open(cfg)
	if err != nil {
		k.log("listing the base backups: %v", err)
		return
	}
	done := filepath.Join(k.c.SocketDir, backupDoneFile)
	var listed, seen time.Time
	for {
		if fi, err := os.Stat(done); err == nil && !fi.ModTime().Equal(seen) {
			seen, listed = fi.ModTime(), time.Time{}
		}
		if time.Since(listed) >= backupsEvery {
			lctx, cancel := context.WithTimeout(ctx, time.Minute)
			k.applyRetention(lctx, store)
			list, err := store.Backups(lctx)
			cancel()
			if err != nil {
				k.log("listing the base backups: %v", err)
			} else {
				k.backups.Store(summarize(list))
			}
			listed = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
}

// summarize is the report's view of the backups, oldest first.
func summarize(list []backup.Manifest) *contract.Backups {
	b := &contract.Backups{Count: len(list)}
	if len(list) > 0 {
		first, last := list[0], list[len(list)-1]
		b.LastID, b.LastTime, b.FirstRecoverableTime = last.ID, &last.FinishedAt, &first.FinishedAt
	}
	return b
}

// applyRetention deletes, on the primary alone, the backups
// spec.backup.retention no longer keeps and the WAL that came before the
// oldest backup kept.
func (k *backupKeeper) applyRetention(ctx context.Context, store *backup.Store) {
	if k.c.Retention == (backup.Retention{}) {
		return
	}
	var standby bool
	err := k.pg.withServer(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&standby)
	})
	if err != nil || standby {
		return
	}
	expired, wal, err := store.ApplyRetention(ctx, k.c.Retention, time.Now())
	for _, b := range expired {
		k.log("retention: deleted base backup %s (finished %s)", b.ID, b.FinishedAt.Format(time.RFC3339))
	}
	if wal > 0 {
		k.log("retention: deleted %d WAL files no backup kept needs", wal)
	}
	if err != nil {
		k.log("retention: %v", err)
	}
}

package instance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"example.com/myoperator/internal/backup"
	"example.com/myoperator/internal/contract"
)

// Restore is where a new primary's data comes from instead of initdb
// (spec.bootstrap.recovery): a base backup in an object store and the WAL
// archived after it, replayed up to a target.
type Restore struct {
	Store backup.Config
	// BackupID names the base backup; empty: the latest that finished
	// before the target time (the latest of all without one).
	BackupID string
	Target   RecoveryTarget
}

// RecoveryTarget is where recovery stops: at most one is set; none means
// the end of the archive.
type RecoveryTarget struct {
	Time      time.Time
	LSN       string
	Name      string
	Immediate bool // as soon as the base backup is consistent
}

// restoreFromEnv reads RESTORE_*; nil when there is no store.
func restoreFromEnv() (*Restore, error) {
	store := storeFromEnv(contract.RestoreStore)
	if store == nil {
		return nil, nil
	}
	r := &Restore{Store: *store, BackupID: os.Getenv(contract.EnvRestoreBackupID)}
	if t := os.Getenv(contract.EnvRestoreTargetTime); t != "" {
		at, err := time.Parse(time.RFC3339Nano, t)
		if err != nil {
			return nil, fmt.Errorf("RESTORE_TARGET_TIME %q is not an RFC 3339 time: %w", t, err)
		}
		r.Target.Time = at
	}
	r.Target.LSN, r.Target.Name = os.Getenv(contract.EnvRestoreTargetLSN), os.Getenv(contract.EnvRestoreTargetName)
	r.Target.Immediate = os.Getenv(contract.EnvRestoreTargetImmediate) == "true"
	return r, nil
}

// restoreConfigFile holds the object store restored from.
func (c Config) restoreConfigFile() string { return filepath.Join(c.SocketDir, "restore.json") }

// recoveryArgs are the settings of the private server that replays the
// archive: the WAL comes through this program's wal-fetch, the server
// promotes itself at the target, archives nothing meanwhile (its WAL is
// not this database's history yet) and takes no connection before.
// wal-fetch is --strict: PostgreSQL takes any failure of restore_command
// below exit status 126 as "not archived", the end of the archive, and a
// restore to the end would promote without every write after a file the
// store could not give back intact (test/postgres TestRestoreNeverEndsEarly).
func (c Config) recoveryArgs() []string {
	t := c.Restore.Target
	args := []string{"-c", fmt.Sprintf("restore_command=%s wal-fetch --strict --config %s %%f %%p", shellQuote(c.Self), shellQuote(c.restoreConfigFile())),
		"-c", "recovery_target_action=promote", "-c", "hot_standby=off"}
	// With spec.backup of its own, the new timeline's history file and the
	// last, partial segment of the old one are archived from the promotion
	// on, as a promoted replica's are.
	if archive := c.archiveArgs(); archive != nil {
		args = append(args, archive...)
	} else {
		args = append(args, "-c", "archive_mode=off")
	}
	switch {
	case !t.Time.IsZero():
		args = append(args, "-c", "recovery_target_time="+t.Time.UTC().Format("2006-01-02 15:04:05.999999-07"))
	case t.LSN != "":
		args = append(args, "-c", "recovery_target_lsn="+t.LSN)
	case t.Name != "":
		args = append(args, "-c", "recovery_target_name="+t.Name)
	case t.Immediate:
		args = append(args, "-c", "recovery_target=immediate")
	}
	return args
}

// restoreSQL gives the restored data this MyDatabase's password for the
// application's role (the backup holds the source's), and takes the
// replication role's away, if the source's had one.
const restoreSQL = `\getenv app_user POSTGRES_USER
\getenv app_password POSTGRES_PASSWORD
ALTER ROLE :"app_user" PASSWORD :'app_password';
ALTER ROLE replicator PASSWORD NULL;
`

// Timing of a restore's report. The instance manager looks at recovery's
// progress every restoreWatchEvery; a recovery that fetched no new WAL
// file for restoreStallAfter is reported stalled (a store that hangs, or
// a server that waits for WAL the archive does not hold); a failed restore
// is tried again after restoreRetryAfter (the archive may yet receive the
// WAL it lacked), not at every turn: each attempt downloads the backup.
const (
	restoreWatchEvery  = 5 * time.Second
	restoreStallAfter  = time.Minute
	restoreRetryAfter  = 30 * time.Second
	walFetchRecordFile = "wal-fetch.json"
)

// fetchRecord is wal-fetch's account of its last call, which it leaves
// beside its configuration for the instance manager's report of a restore.
type fetchRecord struct {
	Name  string    `json:"name"`
	Found bool      `json:"found"`
	Error string    `json:"error,omitempty"`
	At    time.Time `json:"at"`
	// LastSegment is the last WAL segment (not a history file) fetched,
	// by this call or an earlier one: recovery asks for the next one at
	// once, which the archive often does not hold yet.
	LastSegment string `json:"lastSegment,omitempty"`
}

// RecordFetchResult keeps, beside the configuration file config, what came
// of a wal-fetch of the WAL file name (nil: fetched; backup.ErrNotFound:
// not archived).
func RecordFetchResult(config, name string, err error) {
	r := fetchRecord{Name: name, Found: err == nil, At: time.Now().UTC()}
	if err != nil && !errors.Is(err, backup.ErrNotFound) {
		r.Error = err.Error()
	}
	file := filepath.Join(filepath.Dir(config), walFetchRecordFile)
	if prev, err := os.ReadFile(file); err == nil {
		var p fetchRecord
		if json.Unmarshal(prev, &p) == nil {
			r.LastSegment = p.LastSegment
		}
	}
	if r.Found && len(name) == 24 {
		r.LastSegment = name
	}
	b, _ := json.Marshal(r) // a fetchRecord always marshals
	if os.WriteFile(file+".tmp", b, 0o600) == nil {
		_ = os.Rename(file+".tmp", file)
	}
}

// lastFetch reads wal-fetch's record; ok is false when there is none.
func (c Config) lastFetch() (r fetchRecord, ok bool) {
	b, err := os.ReadFile(filepath.Join(c.SocketDir, walFetchRecordFile))
	return r, err == nil && json.Unmarshal(b, &r) == nil
}

// describe says, in plain words, what recovery last asked of the archive.
func (r fetchRecord) describe() string {
	switch {
	case r.Found:
		return fmt.Sprintf("it last fetched WAL file %s", r.Name)
	case r.Error != "":
		return fmt.Sprintf("it last asked the archive for WAL file %s and got an error: %s", r.Name, r.Error)
	}
	return fmt.Sprintf("it last asked the archive for WAL file %s, which the archive does not hold", r.Name)
}

// restoreWatch publishes the restore's progress in the instance's report
// while recovery replays the archive.
type restoreWatch struct {
	pg     *pgServer
	id     string
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// watchRestore sets the report's restore to Running with message, and
// from then on follows recovery's fetches until stop.
func (pg *pgServer) watchRestore(ctx context.Context, id, message string) *restoreWatch {
	_ = os.Remove(filepath.Join(pg.c.SocketDir, walFetchRecordFile))
	pg.restore.Store(&contract.Restore{BackupID: id, Phase: contract.RestoreRunning, Message: message})
	pg.report(ctx, nil, nil)
	ctx, cancel := context.WithCancel(ctx)
	w := &restoreWatch{pg: pg, id: id, cancel: cancel}
	w.done.Go(func() {
		progress := restoreProgress{id: id}
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(restoreWatchEvery):
			}
			if r, ok := pg.c.lastFetch(); ok {
				pg.restore.Store(progress.see(r, time.Now()))
				pg.report(ctx, nil, nil)
			}
		}
	})
	return w
}

// restoreProgress follows wal-fetch's records of one restore.
type restoreProgress struct {
	id      string
	last    fetchRecord
	fetched string    // the last WAL file fetched
	since   time.Time // when the record last changed
}

// see takes the record r, read at now, and says where the restore stands:
// stalled once the record has not changed for restoreStallAfter (recovery
// asks again and again for one file, or a fetch hangs).
func (p *restoreProgress) see(r fetchRecord, now time.Time) *contract.Restore {
	if p.since.IsZero() || r.Name != p.last.Name || r.Found != p.last.Found {
		p.since = now
	}
	if p.last = r; r.Found {
		p.fetched = r.Name
	}
	st := &contract.Restore{BackupID: p.id, Phase: contract.RestoreRunning, LastWAL: p.fetched,
		Message: "replaying the archive: " + r.describe()}
	if idle := now.Sub(p.since); idle >= restoreStallAfter {
		st.Stalled = true
		st.Message = fmt.Sprintf("recovery has fetched no new WAL file for %s: %s", idle.Truncate(time.Second), r.describe())
	}
	return st
}

// stop ends the watch; a restore that failed with err is reported Failed
// (at the turn's report) and tried again after restoreRetryAfter.
func (w *restoreWatch) stop(err error) {
	w.cancel()
	w.done.Wait()
	if err == nil {
		w.pg.restore.Store(nil)
		return
	}
	w.pg.restoreFailed(w.id, err)
}

// restoreFailed reports a restore that failed with err, of backup id ("" when
// none was chosen), Failed (at the turn's report), and tries it again
// after restoreRetryAfter.
func (pg *pgServer) restoreFailed(id string, err error) {
	pg.restoreRetryAt = time.Now().Add(restoreRetryAfter)
	pg.restore.Store(&contract.Restore{BackupID: id, Phase: contract.RestoreFailed,
		Message: fmt.Sprintf("%v; tried again every %s", err, restoreRetryAfter)})
}

// restorePrimary makes the data of a new primary from the object store,
// in the scratch directory initPrimary uses, renamed into place only once
// recovery reached its target and the server promoted itself.
func (pg *pgServer) restorePrimary(ctx context.Context, scratch string) error {
	c := pg.c
	store, chain, err := pg.chooseBackup(ctx, c.Restore.Store, c.Restore.BackupID, c.Restore.Target.Time)
	if err != nil {
		return err // the store refused, holds none at its path, or none before the target
	}
	chosen := chain[len(chain)-1]
	encrypted := ""
	if e := chosen.Encryption; e != nil {
		encrypted = ", encrypted to " + e.Recipient
	}
	pg.log("restoring base backup %s%s (from %s on timeline %d%s) of %s/%s", chosen.ID, chainNote(chain), chosen.BeginLSN, chosen.Timeline,
		encrypted, c.Restore.Store.Bucket, c.Restore.Store.Path)
	w := pg.watchRestore(ctx, chosen.ID, fmt.Sprintf("downloading base backup %s%s", chosen.ID, chainNote(chain)))
	err = pg.recover(ctx, store, chain, scratch)
	w.stop(err)
	return err
}

// chooseBackup opens the object store at cfg and picks the base backup to
// restore: id, or the latest of this server's major that finished before
// the time before (the latest of all when both are zero). It returns the
// backup's chain (backup.Chain), the backup itself last. An error is
// reported, as a failed restore is.
func (pg *pgServer) chooseBackup(ctx context.Context, cfg backup.Config, id string, before time.Time) (*backup.Store, []backup.Manifest, error) {
	store, err := backup.Open(cfg)
	var chosen backup.Manifest
	var chain, backups []backup.Manifest
	major := ""
	if err == nil {
		major, err = pg.serverMajor(ctx)
	}
	if err == nil {
		if backups, err = store.Backups(ctx); err != nil {
			err = fmt.Errorf("listing the base backups: %w", err)
		} else {
			chosen, err = backup.Choose(backups, id, before, major)
		}
	}
	if err == nil {
		chain, err = backup.Chain(backups, chosen)
	}
	if err != nil {
		pg.restoreFailed("", err)
	}
	return store, chain, err
}

// chainNote says, after a backup's ID, what else a restore of chain
// combines it with.
func chainNote(chain []backup.Manifest) string {
	if len(chain) < 2 {
		return ""
	}
	return fmt.Sprintf(" (incremental: combined with the %d backups it builds on, from full backup %s)", len(chain)-1, chain[0].ID)
}

// recover writes the data of the last backup of chain into scratch and
// replays the archive on a private server up to the target, where the
// server promotes itself.
func (pg *pgServer) recover(ctx context.Context, store *backup.Store, chain []backup.Manifest, scratch string) error {
	c := pg.c
	chosen := chain[len(chain)-1]
	if err := store.Restore(ctx, pg.procs.exec, chain, scratch, nil); err != nil {
		return err
	}
	if err := c.readyForRecovery(scratch); err != nil {
		return err
	}
	// It accepts connections once it has promoted itself.
	env := []string{"POSTGRES_USER=" + c.User, "POSTGRES_PASSWORD=" + c.Password}
	stopped := fmt.Errorf("the recovery of base backup %s stopped before it reached its target (the server's log says why)", chosen.ID)
	if err := pg.withPrivateServer(ctx, scratch, c.recoveryArgs(), stopped, env, restoreSQL+rewindGrants+"CHECKPOINT;\n"); err != nil {
		if r, ok := c.lastFetch(); ok && errors.Is(err, stopped) {
			err = fmt.Errorf("%w: %s", err, r.describe())
		}
		return err
	}
	if err := c.reachedTheEnd(ctx, store); err != nil {
		return err
	}
	pg.log("recovery reached its target and promoted")
	return nil
}

// readyForRecovery makes the base backup unpacked in dir recover from
// the store of c.Restore when a server starts on it with recoveryArgs.
func (c Config) readyForRecovery(dir string) error {
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "recovery.signal"), nil, 0o600); err != nil {
		return err
	}
	return backup.WriteConfig(c.restoreConfigFile(), c.Restore.Store)
}

// reachedTheEnd: a restore to the end of the archive ends where the
// archive does, not at a hole in it (backup.Gap). PostgreSQL takes a
// missing file for the end, and promotes.
func (c Config) reachedTheEnd(ctx context.Context, store *backup.Store) error {
	r, ok := c.lastFetch()
	if c.Restore.Target != (RecoveryTarget{}) || !ok || r.LastSegment == "" {
		return nil
	}
	missing, next, err := store.Gap(ctx, r.LastSegment)
	if err != nil {
		return fmt.Errorf("checking that recovery reached the end of the archive: %w", err)
	}
	if missing != "" {
		return &archiveHole{last: r.LastSegment, missing: missing, next: next}
	}
	return nil
}

// archiveHole is where a recovery to the end of the archive ended early:
// after WAL file last, the archive lacks missing but holds next.
type archiveHole struct{ last, missing, next string }

func (h *archiveHole) Error() string {
	return fmt.Sprintf("recovery ended after WAL file %s, where the archive lacks %s but holds %s: the archive has a hole, "+
		"and the restore would lack every write after it", h.last, h.missing, h.next)
}

// serverMajor is the major of this container's PostgreSQL ("17"): a base
// backup restores only into a server of its own major.
func (pg *pgServer) serverMajor(ctx context.Context) (string, error) {
	out, err := pg.procs.run(ctx, nil, "", "postgres", "--version")
	if err != nil {
		return "", fmt.Errorf("postgres --version: %w", err)
	}
	return majorOfVersion(out)
}

// majorOfVersion reads the major from what postgres --version prints:
// "postgres (PostgreSQL) 17.6 (Debian 17.6-1.pgdg120+1)".
func majorOfVersion(out string) (string, error) {
	_, version, ok := strings.Cut(out, "(PostgreSQL) ")
	digits := strings.IndexFunc(version, func(r rune) bool { return r < '0' || r > '9' })
	if digits < 0 {
		digits = len(version)
	}
	major := version[:digits] // "17" of 17.6, "18" of 18beta1
	if !ok || major == "" {
		return "", fmt.Errorf("postgres --version printed %q, which names no version", strings.TrimSpace(out))
	}
	return major, nil
}

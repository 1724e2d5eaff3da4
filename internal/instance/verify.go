package instance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"example.com/myoperator/internal/backup"
	"example.com/myoperator/internal/contract"
)

// A verification (`instance verify`, contract.VerifyCommand) is a restore
// to the end of the archive that nobody uses: it unpacks the base backup
// into PGDATA, checks its files against the backup's own manifest, replays
// the archive on a private server (no TCP port, archive_mode off: it
// writes nothing to the store), checks where recovery ended, and runs
// pg_amcheck on every database. Its result tells apart a backup that does
// not restore (Failed) from a verification that could not run (Error):
// errors are Error unless they are a verifyFailure.

// verifyFailure is a check the backup or its archive failed: Failed.
type verifyFailure struct{ message string }

func (f *verifyFailure) Error() string { return f.message }

func failed(format string, args ...any) error {
	return &verifyFailure{message: fmt.Sprintf(format, args...)}
}

// resultOf is the verification's result when it ended with err.
func resultOf(err error) string {
	switch {
	case err == nil:
		return contract.VerificationPassed
	case errors.As(err, new(*verifyFailure)):
		return contract.VerificationFailed
	}
	return contract.VerificationError
}

// verifyStall bounds the time recovery may read no new WAL file: a
// strict wal-fetch gives up on one within three attempts of at most 5
// minutes each, so a longer wait is a store or server that hangs.
const verifyStall = 20 * time.Minute

// verifier holds what a verification found so far.
type verifier struct {
	pg     *pgServer
	store  *backup.Store
	backup backup.Manifest
	// chain is what a restore of backup combines: backup alone when it
	// is full (backup.Chain).
	chain  []backup.Manifest
	result contract.Verification
}

// Verify runs `instance verify` with its configuration from the
// environment (verifyConfigFromEnv) and says what it found.
func Verify(ctx context.Context, log Logger) contract.Verification {
	v := &verifier{result: contract.Verification{Started: time.Now().UTC()}}
	err := v.run(ctx, log)
	v.result.Result, v.result.Stopped = resultOf(err), time.Now().UTC()
	switch {
	case err != nil:
		v.result.Message = err.Error()
	default:
		v.result.Message = fmt.Sprintf("base backup %s restored, its files as its backup_manifest lists them, and the archive replayed "+
			"to its end at %s (the backup ends at %s); pg_amcheck found no corruption in %d databases",
			v.backup.ID, v.result.ReachedLSN, v.backup.EndLSN, v.result.Databases)
	}
	if v.result.Result == contract.VerificationError {
		v.result.Message = "could not verify: " + v.result.Message
	}
	return v.result
}

// verifyConfigFromEnv reads what a restore reads: the store from the
// RESTORE_ variables, the backup from RESTORE_BACKUP_ID (empty: the
// latest), the data directory from PGDATA, and PGPORT, which only names
// the private server's socket (default 5432). RESTORE_TARGET_* are not
// read: a verification replays the whole archive. The store's secret key
// leaves the environment, as ConfigFromEnv's do: no child inherits it.
func verifyConfigFromEnv() (Config, error) {
	store := storeFromEnv(contract.RestoreStore)
	if err := os.Unsetenv(contract.RestoreStore + contract.StoreSecretAccessKey); err != nil {
		return Config{}, err
	}
	if store == nil {
		return Config{}, fmt.Errorf("%s%s is not set: there is no object store to verify", contract.RestoreStore, contract.StoreEndpoint)
	}
	c := Config{PodName: os.Getenv(contract.EnvPodName), PGData: os.Getenv(contract.EnvPGData), Port: os.Getenv(contract.EnvPort),
		Restore: &Restore{Store: *store, BackupID: os.Getenv(contract.EnvRestoreBackupID)}}
	if c.PGData == "" {
		return c, fmt.Errorf("%s is not set: there is nowhere to restore to", contract.EnvPGData)
	}
	if c.Port == "" {
		c.Port = "5432"
	}
	self, err := os.Executable()
	c.Self = self
	return c, err
}

func (v *verifier) run(ctx context.Context, log Logger) error {
	v.result.BackupID = os.Getenv(contract.EnvRestoreBackupID)
	c, err := verifyConfigFromEnv()
	if err != nil {
		return err
	}
	// The private directory holds the socket, wal-fetch's configuration
	// (with the store's secret key) and its record: mode 0700, removed at
	// the end.
	private, err := os.MkdirTemp("", "instance-verify-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(private) }()
	c.SocketDir = private
	procs := startReaper()
	defer procs.stop()
	v.pg = &pgServer{c: c, log: log, procs: procs}
	if err := v.choose(ctx); err != nil {
		return err
	}
	if err := v.unpack(ctx); err != nil {
		return err
	}
	server, err := v.recoverArchive(ctx)
	if err != nil {
		return err
	}
	defer server.stop(killDelay)
	if err := v.checkRecovery(ctx); err != nil {
		return err
	}
	return v.amcheck(ctx)
}

// choose opens the store and picks the backup. A backup ID the store does
// not list is Failed: a restore of it would fail the same way. A store
// that holds none, asked for the latest, is Error: there is nothing to
// verify; so is a backup of another major than this image's (taken before
// a major upgrade), which it cannot restore.
func (v *verifier) choose(ctx context.Context) error {
	cfg := v.pg.c.Restore
	store, err := backup.Open(cfg.Store)
	if err != nil {
		return err
	}
	backups, err := store.Backups(ctx)
	if err != nil {
		return fmt.Errorf("listing the base backups: %w", err)
	}
	major, err := v.pg.serverMajor(ctx)
	if err != nil {
		return err
	}
	chosen, err := backup.Choose(backups, cfg.BackupID, time.Time{}, "")
	if err == nil && chosen.Major != "" && chosen.Major != major {
		return fmt.Errorf("base backup %s is of PostgreSQL %s and this pod runs %s, the MyDatabase's major now: a backup restores "+
			"only into its own major (it was taken before a major upgrade), so this image cannot verify it", chosen.ID, chosen.Major, major)
	}
	if err != nil && cfg.BackupID != "" {
		return failed("%v at bucket %s, path %s, which lists %d base backups: it was deleted (by retention?) or never finished, "+
			"or the path is not the database's; a restore of it would fail the same way", err, cfg.Store.Bucket, cfg.Store.Path, len(backups))
	}
	if err != nil {
		return err
	}
	chain, err := backup.Chain(backups, chosen)
	if err != nil {
		return failed("%v: a restore of it would fail the same way", err)
	}
	v.store, v.backup, v.chain, v.result.BackupID = store, chosen, chain, chosen.ID
	v.pg.log("verifying base backup %s (WAL %s to %s on timeline %d) of %s/%s", chosen.ID, chosen.BeginLSN, chosen.EndLSN, chosen.Timeline,
		cfg.Store.Bucket, cfg.Store.Path)
	return nil
}

// unpack writes the base backup into PGDATA, which must be empty, and
// checks every file against the backup_manifest pg_basebackup wrote
// into it, before any server changes them. An incremental backup's
// chain is checked backup by backup before pg_combinebackup combines it,
// and the result after.
func (v *verifier) unpack(ctx context.Context) error {
	c := v.pg.c
	if entries, err := os.ReadDir(c.PGData); err == nil && len(entries) > 0 {
		return fmt.Errorf("PGDATA %s is not empty: a verification restores into an empty directory", c.PGData)
	}
	what := func(m backup.Manifest) string {
		return fmt.Sprintf("base backup %s (object %s)", m.ID, v.store.BaseObject(m))
	}
	check := func(m backup.Manifest, dir string) error { return v.checkFiles(ctx, what(m), dir) }
	if err := v.store.Restore(ctx, v.pg.procs.exec, v.chain, c.PGData, check); err != nil {
		if errors.As(err, new(*verifyFailure)) {
			return err
		}
		return readFailure(what(v.backup)+chainNote(v.chain), err)
	}
	if err := v.checkFiles(ctx, what(v.backup)+chainNote(v.chain), c.PGData); err != nil {
		return err
	}
	return c.readyForRecovery(c.PGData)
}

// readFailure is what an error reading the object what says: Failed when
// the object is damaged, Error when the store or this container failed.
func readFailure(what string, err error) error {
	if damaged(err) {
		return failed("%s does not restore: %v", what, err)
	}
	return fmt.Errorf("reading %s: %w", what, err)
}

// localErrors are failures of this container (its disk, its limits), not
// of what it read.
var localErrors = []syscall.Errno{syscall.ENOSPC, syscall.EDQUOT, syscall.EROFS, syscall.EACCES, syscall.EPERM, syscall.EIO,
	syscall.EMFILE, syscall.ENFILE, syscall.ENOMEM}

// damaged tells whether err, from reading an object of the store, says
// the object is damaged: it came back, but does not decrypt with the key
// given (backup.ErrWrongKey), decompress or unpack, or it is missing.
// The store failing to serve, the container's disk and a stop say
// nothing of the object.
func damaged(err error) bool {
	switch {
	case errors.Is(err, backup.ErrWrongKey), errors.Is(err, backup.ErrNotFound):
		return true
	case backup.Unavailable(err), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	}
	for _, local := range localErrors {
		if errors.Is(err, local) {
			return false
		}
	}
	return true
}

// checkFiles runs pg_verifybackup on backup what, unpacked in dir: each
// file's size and checksum against the backup_manifest pg_basebackup put
// in the backup. The WAL is checked by recovery instead.
func (v *verifier) checkFiles(ctx context.Context, what, dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "backup_manifest")); errors.Is(err, os.ErrNotExist) {
		return failed("%s holds no backup_manifest, which pg_basebackup writes at the end of every backup: it is cut short", what)
	}
	out, code, err := v.pg.runCaptured(ctx, "pg_verifybackup", "--no-parse-wal", "--quiet", dir)
	switch {
	case err != nil:
		return err
	case code != 0:
		return failed("%s: its files differ from its backup_manifest (pg_verifybackup): %s", what, strings.TrimSpace(out))
	}
	return nil
}

// errRecoveryStopped: the private server exited before it promoted.
var errRecoveryStopped = errors.New("PostgreSQL stopped before recovery reached the end of the archive")

// recoverArchive starts the private server on the unpacked backup, and
// returns it once recovery has replayed the archive to its end and the
// server promoted (it takes no connection before). Its pg_hba.conf, in
// the private directory, lets in the postgres superuser on the socket
// alone, whatever the backup's says.
func (v *verifier) recoverArchive(ctx context.Context) (*server, error) {
	c := v.pg.c
	hba := filepath.Join(c.SocketDir, "pg_hba.conf")
	if err := os.WriteFile(hba, []byte("local all postgres trust\n"), 0o600); err != nil {
		return nil, err
	}
	args := append([]string{"-D", c.PGData, "-c", "hba_file=" + hba}, c.recoveryArgs()...)
	server, err := v.pg.startPrivate(ctx, args, c.SocketDir, errRecoveryStopped, verifyStall)
	if errors.Is(err, errRecoveryStopped) {
		return nil, v.whyStopped(ctx)
	}
	return server, err
}

// checkRecovery checks, on the promoted server, that recovery went past
// the backup's end and ended where the archive does.
func (v *verifier) checkRecovery(ctx context.Context) error {
	c := v.pg.c
	conn, err := v.pg.connectAt(ctx, c.SocketDir)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	// After the promotion it stays where recovery ended.
	var reached string
	if err := conn.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn()::text").Scan(&reached); err != nil {
		return fmt.Errorf("asking the restored server where recovery ended: %w", err)
	}
	v.result.ReachedLSN = reached
	if err := reachedEnd(reached, v.backup); err != nil {
		return err
	}
	err = c.reachedTheEnd(ctx, v.store)
	if errors.As(err, new(*archiveHole)) {
		return failed("%v", err)
	}
	return err
}

// reachedEnd fails a recovery that ended at reached, before the end of
// base backup m, where its data becomes consistent.
func reachedEnd(reached string, m backup.Manifest) error {
	at, err := contract.LSN(reached)
	if err != nil {
		return fmt.Errorf("the restored server says recovery ended at %q: %w", reached, err)
	}
	end, err := contract.LSN(m.EndLSN)
	if err != nil {
		return failed("base backup %s has an end LSN %q that is none: its manifest is damaged", m.ID, m.EndLSN)
	}
	if at < end {
		return failed("recovery ended at %s, before base backup %s ends (%s): the restored data is not consistent", reached, m.ID, m.EndLSN)
	}
	return nil
}

// runCaptured runs a program to completion and returns its standard
// output and error together, and its exit code; err is for a program that
// did not run, or a stop. The output goes to the log too.
func (pg *pgServer) runCaptured(ctx context.Context, name string, args ...string) (string, int, error) {
	f, err := os.CreateTemp(pg.c.SocketDir, name+"-*.out")
	if err != nil {
		return "", 0, err
	}
	defer func() { _ = os.Remove(f.Name()) }()
	defer func() { _ = f.Close() }()
	// Files, not pipes: exec.Cmd would copy from a pipe only in its Wait,
	// which the reaper does instead.
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	exited, err := pg.procs.start(cmd)
	if err != nil {
		return "", 0, fmt.Errorf("%s: %w", name, err)
	}
	code := exitCode(waitOrStop(ctx, cmd.Process, exited))
	out, err := os.ReadFile(f.Name())
	if err != nil {
		return "", code, err
	}
	if len(out) > 0 {
		pg.log("%s (exit status %d):\n%s", name, code, strings.TrimRight(string(out), "\n"))
	}
	return string(out), code, ctx.Err()
}

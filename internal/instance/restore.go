package instance

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"example.com/myoperator/internal/backup"
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
	store := storeFromEnv("RESTORE_")
	if store == nil {
		return nil, nil
	}
	r := &Restore{Store: *store, BackupID: os.Getenv("RESTORE_BACKUP_ID")}
	if t := os.Getenv("RESTORE_TARGET_TIME"); t != "" {
		at, err := time.Parse(time.RFC3339Nano, t)
		if err != nil {
			return nil, fmt.Errorf("RESTORE_TARGET_TIME %q is not an RFC 3339 time: %w", t, err)
		}
		r.Target.Time = at
	}
	r.Target.LSN, r.Target.Name = os.Getenv("RESTORE_TARGET_LSN"), os.Getenv("RESTORE_TARGET_NAME")
	r.Target.Immediate = os.Getenv("RESTORE_TARGET_IMMEDIATE") == "true"
	return r, nil
}

// restoreConfigFile holds the object store restored from.
func (c Config) restoreConfigFile() string { return filepath.Join(c.SocketDir, "restore.json") }

// recoveryArgs are the settings of the private server that replays the
// archive: the WAL comes through this program's wal-fetch, the server
// promotes itself at the target, archives nothing meanwhile (its WAL is
// not this database's history yet) and takes no connection before.
func (c Config) recoveryArgs() []string {
	t := c.Restore.Target
	args := []string{"-c", fmt.Sprintf("restore_command=%s wal-fetch --config %s %%f %%p", shellQuote(c.Self), shellQuote(c.restoreConfigFile())),
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

// restorePrimary makes the data of a new primary from the object store,
// in the scratch directory initPrimary uses, renamed into place only once
// recovery reached its target and the server promoted itself.
func (m *manager) restorePrimary(ctx context.Context, scratch string) error {
	c := m.c
	store, err := backup.Open(c.Restore.Store)
	if err != nil {
		return err
	}
	backups, err := store.Backups(ctx)
	if err != nil {
		return err
	}
	chosen, err := backup.Choose(backups, c.Restore.BackupID, c.Restore.Target.Time)
	if err != nil {
		return err
	}
	m.log("restoring base backup %s (from %s on timeline %d) of %s/%s", chosen.ID, chosen.BeginLSN, chosen.Timeline,
		c.Restore.Store.Bucket, c.Restore.Store.Path)
	if err := store.Restore(ctx, chosen, scratch); err != nil {
		return err
	}
	if err := os.Chmod(scratch, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(scratch, "recovery.signal"), nil, 0o600); err != nil {
		return err
	}
	if err := backup.WriteConfig(c.restoreConfigFile(), c.Restore.Store); err != nil {
		return err
	}
	// It accepts connections once it has promoted itself.
	env := []string{"POSTGRES_USER=" + c.User, "POSTGRES_PASSWORD=" + c.Password}
	stopped := fmt.Errorf("the recovery of base backup %s stopped before it reached its target (see the server's log above)", chosen.ID)
	if err := m.withPrivateServer(ctx, scratch, c.recoveryArgs(), stopped, env, restoreSQL+rewindGrants+"CHECKPOINT;\n"); err != nil {
		return err
	}
	m.log("recovery reached its target and promoted")
	return nil
}

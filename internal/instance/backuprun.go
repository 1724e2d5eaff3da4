package instance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/backup"
	"example.com/myoperator/internal/contract"
)

// Base backups a MyDatabaseBackup asks for. The operator names the backup
// in an annotation of the pod that is to take it
// (contract.AnnotationBackupRequest); the instance manager watches its own pod,
// takes the backup, and reports how it went in its report, from which the
// operator writes the MyDatabaseBackup's status. The instance manager thus
// writes nothing but its own pod, and a request is taken once: the run is
// kept in a file of the socket directory, which outlives a restart of the
// container (not of the pod, whose successor is never asked).

// backupKeeper looks at the object store's base backups and applies the
// retention (watchBackups, archive.go), and takes the base backups asked
// of this instance (takeRequestedBackups); it reaches the server through
// the pgServer.
type backupKeeper struct {
	c     Config
	log   Logger
	procs *reaper
	kube  *kube
	pg    *pgServer
	// backups is the object store's base backups at the last look
	// (watchBackups), for the report.
	backups atomic.Pointer[contract.Backups]
	// backupRun is the last base backup asked of this instance, for the
	// report.
	backupRun atomic.Pointer[contract.BackupRun]
}

// backupRunFile is the last run, for the report and across restarts.
const backupRunFile = "backup-run.json"

// walArchivedWithin bounds the wait for the WAL file a backup ends in.
const walArchivedWithin = 15 * time.Minute

// loadBackupRun reads the last run; a run the previous container left
// Running was cut short.
func (k *backupKeeper) loadBackupRun() {
	b, err := os.ReadFile(filepath.Join(k.c.SocketDir, backupRunFile))
	if err != nil {
		return
	}
	var run contract.BackupRun
	if json.Unmarshal(b, &run) != nil || run.Name == "" {
		return
	}
	if run.Phase == string(databasev1alpha1.BackupRunning) {
		now := time.Now().UTC()
		run.Phase, run.Stopped = string(databasev1alpha1.BackupFailed), &now
		run.Message = "the instance manager restarted while it took the backup: " + run.Message
		k.saveBackupRun(run)
		return
	}
	k.backupRun.Store(&run)
}

// saveBackupRun records run for the report and in its file.
func (k *backupKeeper) saveBackupRun(run contract.BackupRun) {
	k.backupRun.Store(&run)
	b, _ := json.Marshal(run) // a BackupRun always marshals
	tmp := filepath.Join(k.c.SocketDir, backupRunFile+".tmp")
	err := os.WriteFile(tmp, b, 0o600)
	if err == nil {
		err = os.Rename(tmp, filepath.Join(k.c.SocketDir, backupRunFile))
	}
	if err != nil {
		k.log("keeping the state of backup %s: %v", run.Name, err)
	}
}

// takeRequestedBackups takes each backup its pod's annotation asks for,
// one at a time, until ctx ends.
func (k *backupKeeper) takeRequestedBackups(ctx context.Context) {
	requests := make(chan string, 1)
	go k.kube.watchOwnAnnotation(ctx, contract.AnnotationBackupRequest, requests)
	for {
		select {
		case <-ctx.Done():
			return
		case name := <-requests:
			if last := k.backupRun.Load(); name == "" || (last != nil && last.Name == name) {
				continue
			}
			k.takeBackup(ctx, name)
		}
	}
}

// takeBackup takes the backup name asks for, into spec.backup's store.
func (k *backupKeeper) takeBackup(ctx context.Context, name string) {
	start := time.Now().UTC()
	run := contract.BackupRun{Name: name, Phase: string(databasev1alpha1.BackupRunning), Started: &start,
		Message: "pg_basebackup is copying the data"}
	k.saveBackupRun(run)
	k.log("taking base backup %s", name)
	man, full, err := k.backupAndWait(ctx, &run)
	stop := time.Now().UTC()
	run.Stopped = &stop
	if err != nil {
		if ctx.Err() != nil {
			return // stopping: the next container reports it cut short
		}
		run.Phase, run.Message = string(databasev1alpha1.BackupFailed), err.Error()
		k.log("base backup %s failed: %v", name, err)
	} else {
		run.Phase, run.Message = string(databasev1alpha1.BackupCompleted), full
		kind := "full"
		if man.Parent != "" {
			kind = "incremental on " + man.Parent
		}
		k.log("base backup %s done: %s, %d bytes, %s", name, man.ID, man.Size, kind)
	}
	k.saveBackupRun(run)
}

// backupAndWait takes the backup, incremental when it can be
// (backup.NextParent), then waits until the WAL file it ends in is
// archived: until then a restore from it could not become consistent. (A
// primary's pg_basebackup waits for that itself; a replica's cannot: the
// primary archives.) full says why a backup is full when incremental
// backups are on.
func (k *backupKeeper) backupAndWait(ctx context.Context, run *contract.BackupRun) (man backup.Manifest, full string, err error) {
	store, err := backup.Open(*k.c.Backup)
	if err != nil {
		return man, "", err
	}
	var parent *backup.Manifest
	if k.c.FullEvery > 1 {
		backups, err := store.Backups(ctx)
		if err != nil {
			return man, "", err
		}
		parent, full = backup.NextParent(backups, k.c.FullEvery, strconv.Itoa(k.c.dataMajor()))
	}
	conninfo := fmt.Sprintf("host=%s port=%s user=postgres", k.c.SocketDir, k.c.Port)
	man, err = store.TakeBackup(ctx, k.procs.exec, conninfo, time.Now(), parent)
	if errors.Is(err, backup.ErrIncrementalRefused) {
		k.log("%v: taking a full backup", err)
		full = err.Error()
		man, err = store.TakeBackup(ctx, k.procs.exec, conninfo, time.Now(), nil)
	}
	if full != "" {
		full = "a full backup: " + full
	}
	if err != nil {
		return man, full, err
	}
	run.ID, run.Size, run.Timeline, run.BeginLSN, run.EndLSN = man.ID, man.Size, man.Timeline, man.BeginLSN, man.EndLSN
	run.Parent = man.Parent
	if run.BeginWAL, err = backup.WALFile(man.Timeline, man.BeginLSN); err != nil {
		return man, full, err
	}
	if run.EndWAL, err = backup.WALFile(man.Timeline, man.EndLSN); err != nil {
		return man, full, err
	}
	last := run.EndWAL
	run.Message = fmt.Sprintf("waiting for WAL file %s, where the backup becomes consistent, to be archived", last)
	k.saveBackupRun(*run)
	deadline := time.Now().Add(walArchivedWithin)
	for {
		_, err := store.ArchivedSize(ctx, last)
		switch {
		case err == nil:
			// The primary lists its backups again for its report.
			_ = os.WriteFile(filepath.Join(k.c.SocketDir, backupDoneFile), []byte(man.ID), 0o600)
			return man, full, nil
		case !errors.Is(err, backup.ErrNotFound) && !errors.Is(err, fs.ErrNotExist):
			k.log("backup %s: checking the archive for %s: %v", man.ID, last, err)
		}
		if time.Now().After(deadline) {
			return man, full, fmt.Errorf("the backup %s was taken, but WAL file %s, which it needs, was not archived within %s: "+
				"see the MyDatabase's ContinuousArchiving condition", man.ID, last, walArchivedWithin)
		}
		select {
		case <-ctx.Done():
			return man, full, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

package instance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"example.com/myoperator/internal/backup"
	"example.com/myoperator/internal/contract"
)

// A major version upgrade of a stopped primary's data directory with
// pg_upgrade (instance upgrade, run by the operator's upgrade Job with the
// new image; the old major's binaries staged by StageBinaries). The volume
// holds, next to PGDATA:
//
//	PGDATA.upgrade  the new cluster, made by initdb, filled by pg_upgrade
//	PGDATA.old      the old cluster once the new one has taken its place
//
// Steps, each decided from what is on the volume, so that a run
// interrupted anywhere (the Job's pod retried) does the right thing:
//
//  1. PGDATA is on the new major already: done (a run after the swap).
//  2. PGDATA is missing and both others exist: the swap was interrupted
//     between its two renames (the first happens only after pg_upgrade
//     succeeded): finish it.
//  3. PGDATA's global/pg_control was renamed to pg_control.old: pg_upgrade
//     --link had begun linking the old cluster's files into the new one
//     and did not finish. This is past the point of no return: exit
//     UpgradeExitPastPointOfNoReturn, nothing is touched.
//  4. Otherwise the old cluster is intact: check that it is on the old major
//     and was shut down cleanly as a primary (pg_controldata), make the new
//     cluster afresh with the same data checksums, run pg_upgrade --check,
//     then pg_upgrade --link, then swap the directories.
//
// The point of no return is pg_upgrade's renaming of the old
// global/pg_control (its "Adding \".old\" suffix to old global/pg_control"
// step, right before linking): before it, a failure leaves the old data
// untouched (the new cluster is removed) and the exit is
// UpgradeExitOldDataUntouched; from it on, the old cluster's files are
// shared with the new one, which pg_upgrade itself then starts.

// UpgradeConfig is what instance upgrade is given.
type UpgradeConfig struct {
	PGData   string // PGDATA
	OldMajor string
	NewMajor string
	// Staged is the old major's staged binaries (StagedRoot).
	Staged string
	// Scratch is a writable directory for the library links.
	Scratch string
	// Copy uses pg_upgrade --copy instead of --link: slower, twice the
	// space, and the old cluster is never touched.
	Copy bool
	// Archive is the object store the database archives to
	// (spec.backup), nil without one: the new cluster's timeline is set
	// above every timeline it holds (newTimeline).
	Archive *backup.Config
}

// UpgradeError is why an upgrade failed, in plain words, and whether the old
// data is untouched.
type UpgradeError struct {
	Reason    string
	Untouched bool
}

func (e *UpgradeError) Error() string { return e.Reason }

// ExitCode is the contract with the operator (api/v1alpha1).
func (e *UpgradeError) ExitCode() int {
	if e.Untouched {
		return contract.UpgradeExitOldDataUntouched
	}
	return contract.UpgradeExitPastPointOfNoReturn
}

func untouched(format string, args ...any) error {
	return &UpgradeError{Reason: fmt.Sprintf(format, args...), Untouched: true}
}

// Upgrade upgrades the data directory from OldMajor to NewMajor, and
// returns the timeline the upgraded data is on. The archive, when the
// database has one, is read from the BACKUP_ variables.
func Upgrade(ctx context.Context, uc UpgradeConfig, log Logger) (int64, error) {
	if uc.Archive == nil {
		uc.Archive = storeFromEnv(contract.BackupStore)
	}
	procs := startReaper()
	defer procs.stop()
	u := &upgrader{uc: uc, log: log, procs: procs,
		scratch: uc.PGData + ".upgrade", old: uc.PGData + ".old",
		oldBin: OldBinDir(uc.Staged, uc.OldMajor)}
	if err := u.run(ctx); err != nil {
		return 0, err
	}
	return u.timelineOf(ctx, uc.PGData)
}

// timelineOf is the timeline of the last checkpoint of the new major's
// cluster at dir.
func (u *upgrader) timelineOf(ctx context.Context, dir string) (int64, error) {
	newBin, err := newBinDir()
	if err != nil {
		return 0, err
	}
	out, err := u.procs.run(ctx, []string{"LC_ALL=C"}, "", filepath.Join(newBin, "pg_controldata"), dir)
	if err != nil {
		return 0, fmt.Errorf("pg_controldata %s: %w", dir, err)
	}
	return strconv.ParseInt(controlFields(out)["Latest checkpoint's TimeLineID"], 10, 64)
}

type upgrader struct {
	uc           UpgradeConfig
	log          Logger
	procs        *reaper
	scratch, old string
	oldBin       string
	env          []string // LD_LIBRARY_PATH for the old binaries
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func majorOf(pgdata string) string {
	b, err := os.ReadFile(filepath.Join(pgdata, "PG_VERSION"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func (u *upgrader) run(ctx context.Context) error {
	uc := u.uc
	switch {
	case majorOf(uc.PGData) == uc.NewMajor && exists(uc.PGData+"/global/pg_control"):
		u.log("the data directory is on PostgreSQL %s already", uc.NewMajor)
		return nil
	case !exists(uc.PGData) && exists(u.old) && majorOf(u.scratch) == uc.NewMajor:
		u.log("finishing the swap of the data directories")
		return u.swapIn()
	case !exists(uc.PGData):
		return untouched("there is no data directory at %s on this volume", uc.PGData)
	case !exists(uc.PGData+"/global/pg_control") && exists(uc.PGData+"/global/pg_control.old"):
		return &UpgradeError{Reason: fmt.Sprintf("pg_upgrade was interrupted after it began linking the files of the old cluster "+
			"into the new one (%s/global/pg_control was renamed pg_control.old): this is past the point of no return; "+
			"see docs/upgrade.md, Recovering by hand", uc.PGData)}
	}
	if got := majorOf(uc.PGData); got != uc.OldMajor {
		return untouched("the data directory is on PostgreSQL %q, not %s as the upgrade expects", got, uc.OldMajor)
	}
	// A new cluster exists only once an earlier run found the old one
	// cleanly shut down.
	resumed := exists(u.scratch)
	if resumed {
		// That run's servers died with its pod: their lock files are
		// stale, and their PIDs may belong to anyone in this container.
		if err := os.Remove(uc.PGData + "/postmaster.pid"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return untouched("removing the old server's lock file left by an interrupted run: %v", err)
		}
	}
	if err := u.prepare(ctx); err != nil {
		return err
	}
	control, err := u.checkStopped(ctx, resumed)
	if err != nil {
		return err
	}
	timeline, err := u.newTimeline(ctx, control.timeline)
	if err != nil {
		return err
	}
	if err := u.initNew(ctx, control.checksums); err != nil {
		return err
	}
	u.log("pg_upgrade --check")
	if out, err := u.pgUpgrade(ctx, "--check"); err != nil {
		return u.failed("pg_upgrade --check", out, err, true)
	}
	u.log("pg_upgrade %s", u.mode())
	out, err := u.pgUpgrade(ctx, u.mode())
	pastNoReturn := !u.uc.Copy && !exists(uc.PGData+"/global/pg_control")
	if err != nil {
		return u.failed("pg_upgrade", out, err, !pastNoReturn)
	}
	if out, err := u.moveToTimeline(ctx, timeline); err != nil {
		return u.failed("pg_resetwal", out, err, !pastNoReturn)
	}
	for _, leftover := range []string{"delete_old_cluster.sh"} {
		_ = os.Remove(filepath.Join(filepath.Dir(uc.PGData), leftover))
	}
	if err := syncDir(u.scratch); err != nil {
		return &UpgradeError{Reason: err.Error()}
	}
	if err := os.Rename(uc.PGData, u.old); err != nil {
		return &UpgradeError{Reason: err.Error()}
	}
	return u.swapIn()
}

func (u *upgrader) mode() string {
	if u.uc.Copy {
		return "--copy"
	}
	return "--link"
}

// prepare removes a new cluster an earlier run left, and makes the library
// path of the old binaries.
func (u *upgrader) prepare(ctx context.Context) error {
	if err := os.RemoveAll(u.scratch); err != nil {
		return untouched("removing the new cluster an earlier attempt left: %v", err)
	}
	if _, err := os.Stat(filepath.Join(u.oldBin, "postgres")); err != nil {
		return untouched("the binaries of PostgreSQL %s were not staged: %v", u.uc.OldMajor, err)
	}
	dir, err := libraryPath(u.uc.Staged, filepath.Join(u.uc.Scratch, "old-libs"))
	if err != nil {
		return untouched("linking the libraries of PostgreSQL %s: %v", u.uc.OldMajor, err)
	}
	if dir != "" {
		u.env = []string{"LD_LIBRARY_PATH=" + dir}
	}
	if _, err := u.procs.run(ctx, u.env, "", filepath.Join(u.oldBin, "postgres"), "--version"); err != nil {
		return untouched("PostgreSQL %s's binaries do not run in the image of %s (%v): see the Job's log", u.uc.OldMajor, u.uc.NewMajor, err)
	}
	return nil
}

// oldControl is what the old cluster's pg_control says the upgrade needs.
type oldControl struct {
	checksums bool
	timeline  int64 // of its last checkpoint: the shutdown's
}

// checkStopped reads the old cluster's pg_control with the old
// pg_controldata: it must have been shut down cleanly as a primary (a
// standby's data, "shut down in recovery", means the primary moved during
// the shutdown). It returns whether it has data checksums, and its
// timeline.
func (u *upgrader) checkStopped(ctx context.Context, resumed bool) (oldControl, error) {
	out, err := u.procs.run(ctx, append([]string{"LC_ALL=C"}, u.env...), "", filepath.Join(u.oldBin, "pg_controldata"), u.uc.PGData)
	if err != nil {
		return oldControl{}, untouched("pg_controldata %s failed: %v", u.uc.PGData, err)
	}
	fields := controlFields(out)
	if state := fields["Database cluster state"]; state == "in production" && resumed {
		// An earlier run was killed (its pod lost) while pg_upgrade had the
		// old server up: the data was cleanly shut down before it, and
		// crash recovery replays only what that session wrote.
		u.log("the old cluster is %q after an interrupted run: recovering it in single-user mode", state)
		if _, err := u.procs.run(ctx, u.env, "", filepath.Join(u.oldBin, "postgres"), "--single", "-D", u.uc.PGData,
			"-c", "listen_addresses=", "postgres"); err != nil {
			return oldControl{}, untouched("recovering the old cluster after an interrupted run failed (%v): see the Job's log", err)
		}
		return u.checkStopped(ctx, false)
	} else if state != "shut down" {
		return oldControl{}, untouched("the old server was not shut down cleanly as a primary (pg_controldata says %q): "+
			"pg_upgrade needs a clean shutdown of the primary", state)
	}
	timeline, err := strconv.ParseInt(fields["Latest checkpoint's TimeLineID"], 10, 64)
	if err != nil {
		return oldControl{}, untouched("pg_controldata %s gives no timeline of the last checkpoint (%v)", u.uc.PGData, err)
	}
	return oldControl{checksums: fields["Data page checksum version"] != "0", timeline: timeline}, nil
}

// initNew makes the new cluster as the bootstrap makes one (initdb in
// bootstrap.go): UTF8, locale C, the same data checksums as the old one.
// pg_upgrade copies template0's locale from the old cluster anyway.
func (u *upgrader) initNew(ctx context.Context, checksums bool) error {
	args := []string{"--pgdata=" + u.scratch, "--username=postgres", "--encoding=UTF8", "--locale=C",
		"--auth-local=trust", "--auth-host=scram-sha-256"}
	switch {
	case checksums:
		args = append(args, "--data-checksums")
	case atoi(u.uc.NewMajor) >= 18:
		args = append(args, "--no-data-checksums") // on by default from 18
	}
	if _, err := u.procs.run(ctx, nil, "", "initdb", args...); err != nil {
		_ = os.RemoveAll(u.scratch)
		return untouched("initdb of the new cluster failed (%v): see the Job's log", err)
	}
	return nil
}

// pgUpgrade runs pg_upgrade in the volume's root (where it writes its
// script), as the postgres user, which the pod runs as, with the servers'
// sockets in the pod's scratch directory: a socket's lock file left on the
// volume by a run killed with its pod would stop the next one's servers.
// Its output is logged and returned.
func (u *upgrader) pgUpgrade(ctx context.Context, mode string) (string, error) {
	newBin, err := newBinDir()
	if err != nil {
		return "", err
	}
	cmd := []string{"--old-datadir=" + u.uc.PGData, "--new-datadir=" + u.scratch,
		"--old-bindir=" + u.oldBin, "--new-bindir=" + newBin, "--username=postgres",
		"--socketdir=" + u.uc.Scratch, mode}
	wd, _ := os.Getwd()
	if err := os.Chdir(filepath.Dir(u.uc.PGData)); err != nil {
		return "", err
	}
	defer func() { _ = os.Chdir(wd) }()
	out, err := u.procs.run(ctx, u.env, "", filepath.Join(newBin, "pg_upgrade"), cmd...)
	for line := range strings.Lines(out) {
		u.log("pg_upgrade: %s", strings.TrimRight(line, "\n"))
	}
	return out, err
}

// newBinDir is the directory of the new major's binaries: pg_upgrade's,
// found on PATH.
func newBinDir() (string, error) {
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		p := filepath.Join(dir, "pg_upgrade")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			resolved, err := filepath.EvalSymlinks(p)
			if err != nil {
				return "", err
			}
			return filepath.Dir(resolved), nil
		}
	}
	return "", untouched("this image has no pg_upgrade on PATH")
}

// failed turns pg_upgrade's failure into its reason. When the old data is
// untouched, the new cluster is removed.
func (u *upgrader) failed(step, out string, err error, oldUntouched bool) error {
	reason := pgUpgradeReason(out)
	if reason == "" {
		reason = err.Error()
	}
	if oldUntouched {
		_ = os.RemoveAll(u.scratch)
		return untouched("%s failed: %s", step, reason)
	}
	return &UpgradeError{Reason: fmt.Sprintf("%s failed past the point of no return (the old cluster's files are "+
		"linked into the new one): %s", step, reason)}
}

var quotedPath = regexp.MustCompile(`"?(/[^\s"]+)"?`)

// pgUpgradeReason picks the reason out of pg_upgrade's output: the step it
// failed at (a line ending in "fatal", or with "failed check:", or
// "*failure*") and what follows, with the first lines of the files it
// points to (the list of the columns at fault, the server's log). Without
// such a line, its last lines.
func pgUpgradeReason(out string) string {
	var lines []string
	for l := range strings.Lines(out) {
		if l = strings.TrimSpace(l); l != "" && l != "Failure, exiting" {
			lines = append(lines, l)
		}
	}
	start := -1
	for i, l := range lines {
		if strings.HasSuffix(l, "fatal") || strings.Contains(l, "failed check:") || l == "*failure*" {
			start = i
			break
		}
	}
	if start < 0 {
		start = max(0, len(lines)-5)
	}
	if start >= len(lines) {
		return ""
	}
	first := lines[start]
	if _, after, ok := strings.Cut(first, "failed check:"); ok {
		first = after
	}
	var b strings.Builder
	b.WriteString(strings.Join(strings.Fields(strings.TrimSuffix(first, "fatal")), " "))
	for _, l := range lines[start+1:] {
		if l == "*failure*" {
			continue
		}
		b.WriteString(" ")
		b.WriteString(l)
		for _, m := range quotedPath.FindAllStringSubmatch(l, -1) {
			// A log's cause is at its end; a list of objects at fault
			// starts at the top.
			if !strings.HasSuffix(m[1], ".txt") && !strings.HasSuffix(m[1], ".log") {
				continue // a binary of a command line, say
			}
			if lines := fileLines(m[1]); len(lines) > 0 {
				if strings.HasSuffix(m[1], ".log") {
					lines = lines[max(0, len(lines)-6):]
				} else {
					lines = lines[:min(len(lines), 8)]
				}
				fmt.Fprintf(&b, " [%s: %s]", filepath.Base(m[1]), strings.Join(lines, "; "))
			}
		}
	}
	return b.String()
}

// fileLines are the lines of a regular file of at most 1 MiB that are not
// empty, or none.
func fileLines(path string) []string {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > 1<<20 {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var lines []string
	for l := range strings.Lines(string(b)) {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// swapIn renames the new cluster into place (the old one is at PGDATA.old
// already). The old directory is kept: the instance manager removes it
// when it starts on the new major (removeOldCluster).
func (u *upgrader) swapIn() error {
	if err := os.Rename(u.scratch, u.uc.PGData); err != nil {
		return &UpgradeError{Reason: fmt.Sprintf("renaming the new cluster into place: %v", err)}
	}
	if err := syncDir(filepath.Dir(u.uc.PGData)); err != nil {
		return &UpgradeError{Reason: err.Error()}
	}
	u.log("the data directory is on PostgreSQL %s; the old cluster is in %s until the server starts", u.uc.NewMajor, u.old)
	return nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	if err := f.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}

// removeOldCluster removes the cluster a major upgrade left next to PGDATA
// once PGDATA is on another major: its files are shared with the new one
// (pg_upgrade --link), which makes it useless once the new server has
// started, as it is about to.
func removeOldCluster(c Config, log Logger) {
	old := c.PGData + ".old"
	if !exists(old) || majorOf(c.PGData) == "" || majorOf(old) == majorOf(c.PGData) {
		return
	}
	if err := os.RemoveAll(old); err != nil {
		log("removing the cluster of PostgreSQL %s left by the upgrade: %v", majorOf(old), err)
		return
	}
	log("removed the cluster of the previous major version left by the upgrade (%s)", old)
}

// WriteTerminationMessage leaves the reason of a failure where the kubelet
// takes the container's termination message from, bounded to its 4 KiB.
func WriteTerminationMessage(path, message string) {
	if len(message) > 4000 {
		message = message[:4000] + "…"
	}
	_ = os.WriteFile(path, []byte(message), 0o644)
}

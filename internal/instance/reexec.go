package instance

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	coordinationv1 "k8s.io/api/coordination/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
)

// An instance manager is replaced in place, without stopping its server:
// the operator streams a new binary into the pod (contract.ReplaceCommand),
// and the running instance manager re-executes itself as it, keeping the
// server as its child. The protocol between the replace command (run in the
// container by the operator, from the binary the container started with)
// and the running instance manager (of any version since) is files of the
// socket directory and one signal, and must not change:
//
//  1. replace writes the binary to nextFile, whole or not at all, and
//     checks that it runs here and is what the operator sent (its version
//     command prints the digest the operator named);
//  2. it sends SIGUSR1 to the process in pidFile;
//  3. that process, between two turns of its loop, when nothing it does
//     would be cut short (no base backup running; a primary that has just
//     renewed its Lease), moves nextFile to currentFile, writes what it
//     holds (handoverFile), and executes currentFile with its own
//     arguments and environment;
//  4. the new process adopts the server and that state, and writes its
//     digest to digestFile; replace returns when it reads the digest it
//     wrote, and fails after replaceWithin.
//
// What keeps a primary safe across it: the fence's standby is a
// connection of the instance manager, gone with the old process; the
// fence bridge (bridge.go) confirms commits meanwhile, and the new process
// starts the fence again. Each keeps the fence open only until the
// deadline of the last renewal, measured across the exec on the system's
// monotonic clock (a renewal made before the exec counts for no longer
// than it would have).
// A replica keeps its promise to the primary (failsafe.go) for as long as
// it gave it.
const (
	pidFile      = "instance-manager.pid"
	digestFile   = "instance-manager.digest"
	nextFile     = "instance-manager.next"
	currentFile  = "instance-manager"
	handoverFile = "instance-manager.handover.json"
)

// replaceWithin bounds how long replace waits for the new process: a
// second or two, unless the instance manager defers it (reexecDeferred).
const replaceWithin = 45 * time.Second

// SelfDigest is this program's Digest.
func SelfDigest() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	return contract.Digest(self)
}

// Replace is the replace command: it stages the binary read from in,
// which must have the given digest, and has the running instance manager
// of the socket directory re-execute itself as it (steps 1, 2 and 4).
func Replace(ctx context.Context, socketDir, digest string, in io.Reader) error {
	// The whole binary is read first, whatever follows: the operator's
	// stream ends only once it is sent.
	tmp, err := os.CreateTemp(socketDir, ".instance-manager-*")
	if err != nil {
		_, _ = io.Copy(io.Discard, in)
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(tmp, h), in)
	if err == nil {
		err = tmp.Chmod(0o555)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("receiving the binary: %w", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != digest {
		return fmt.Errorf("the binary received has digest %s, not %s: not replacing", got, digest)
	}
	pid, err := readPID(filepath.Join(socketDir, pidFile))
	if err != nil {
		return fmt.Errorf("no running instance manager that can be replaced in place: %w", err)
	}
	if running, _ := os.ReadFile(filepath.Join(socketDir, digestFile)); strings.TrimSpace(string(running)) == digest {
		return nil // replaced already
	}
	out, err := runVersion(ctx, tmp.Name())
	if err != nil || out != digest {
		return fmt.Errorf("the binary received does not run here (version said %q: %v): not replacing", out, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(socketDir, nextFile)); err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		return fmt.Errorf("signalling the instance manager (pid %d): %w", pid, err)
	}
	deadline := time.Now().Add(replaceWithin)
	for time.Now().Before(deadline) {
		if running, _ := os.ReadFile(filepath.Join(socketDir, digestFile)); strings.TrimSpace(string(running)) == digest {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("the instance manager did not re-execute within %s; its log says why", replaceWithin)
}

// runVersion runs a binary's version command, which prints its digest. It
// runs outside the instance manager (the replace command), with no reaper.
func runVersion(ctx context.Context, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "version").Output()
	return strings.TrimSpace(string(out)), err
}

// readPID reads the pid on the first line of a file (postmaster.pid has
// more lines).
func readPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(first))
}

// announce records this process's pid and digest (steps 2 and 4).
func (m *manager) announce() error {
	if err := writeFileAtomic(filepath.Join(m.c.SocketDir, pidFile), []byte(strconv.Itoa(os.Getpid())+"\n")); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(m.c.SocketDir, digestFile), []byte(m.digest+"\n"))
}

func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// handover is what the old process holds that the new one must not lose.
// Durations are measured at Mono, the system's monotonic clock in
// nanoseconds, which the exec does not reset.
type handover struct {
	Server    int        `json:"server"` // the postmaster's pid, 0 for none
	Started   time.Time  `json:"started"`
	Role      serverRole `json:"role"`
	Following string     `json:"following,omitempty"`
	Upstream  string     `json:"upstream,omitempty"`
	// Lease is the primary's Lease as it last renewed it, RenewedAgo how
	// long before Mono that renewal started.
	Lease      *coordinationv1.Lease `json:"lease,omitempty"`
	RenewedAgo time.Duration         `json:"renewedAgo"`
	// PromiseLeft is how long this instance's promise to the primary
	// still holds.
	PromiseLeft time.Duration `json:"promiseLeft"`
	Mono        int64         `json:"mono"`
	// Bridge is the primary's fence bridge (bridge.go), which the new
	// process stops.
	Bridge *bridge `json:"bridge,omitempty"`
}

func monotonicNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// reexecDeferred says why the process cannot re-execute now ("" if it can):
// a base backup would be cut short; a primary holds the Lease on its
// members' promises, or has not renewed within the last tick.
func (m *manager) reexecDeferred() string {
	if run := m.backups.backupRun.Load(); run != nil && run.Phase == string(databasev1alpha1.BackupRunning) {
		return "a base backup is running"
	}
	if m.pg.role == asPrimary && (!m.failsafeSince.IsZero() || time.Since(m.renewed) >= m.t.tick) {
		return "the Lease was not renewed within the last tick"
	}
	return ""
}

// reexec executes the staged binary in place of this process (step 3).
// It returns only when it could not; the process then runs on.
func (m *manager) reexec(ctx context.Context) error {
	next, current := filepath.Join(m.c.SocketDir, nextFile), filepath.Join(m.c.SocketDir, currentFile)
	digest, err := contract.Digest(next)
	if err != nil {
		return err
	}
	if out, err := m.procs.run(ctx, nil, "", next, "version"); err != nil || strings.TrimSpace(out) != digest {
		_ = os.Remove(next)
		return fmt.Errorf("the staged instance manager does not run (version said %q: %v)", strings.TrimSpace(out), err)
	}
	if err := os.Rename(next, current); err != nil {
		return err
	}
	h := handover{Role: m.pg.role, Following: m.pg.following, Upstream: m.pg.upstream, Mono: monotonicNow()}
	if m.pg.server != nil && !m.pg.server.exitedNow() {
		h.Server, h.Started = m.pg.server.cmd.Process.Pid, m.pg.server.started
	}
	if m.pg.role == asPrimary {
		h.Lease, h.RenewedAgo = m.leases.lease, time.Since(m.renewed)
		if h.Server != 0 && m.pg.stopFence != nil {
			if h.Bridge, err = m.pg.startBridge(); err != nil {
				m.log("re-executing without a fence bridge (%v): commits wait until the new process's fence streams", err)
			}
		}
	}
	h.PromiseLeft = m.failsafe.left()
	path := filepath.Join(m.c.SocketDir, handoverFile)
	b, err := json.Marshal(h)
	if err == nil {
		err = writeFileAtomic(path, b)
	}
	if err != nil {
		h.Bridge.stopIfAny("the exec did not happen")
		return err
	}
	m.log("re-executing as instance manager %s, keeping postgres (pid %d) running", digest, h.Server)
	// The server is a child of the thread that started it, and its
	// parent-death signal fires when that thread ends: so it was started
	// on the main thread, which the exec keeps.
	argv := append([]string{current}, os.Args[1:]...)
	if err := ctx.Err(); err != nil { // asked to stop meanwhile: the new process would not know
		_ = os.Remove(path)
		h.Bridge.stopIfAny("the exec did not happen")
		return err
	}
	onMainThread(func() { err = syscall.Exec(current, argv, m.c.environ) })
	_ = os.Remove(path)
	h.Bridge.stopIfAny("the exec did not happen")
	return fmt.Errorf("executing %s: %w", current, err)
}

// adopt takes over what the previous process handed over, if it did; a
// server is adopted only if it is this process's child and the data
// directory's postmaster.
func (m *manager) adopt() error {
	path := filepath.Join(m.c.SocketDir, handoverFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	_ = os.Remove(path)
	var h handover
	if err := json.Unmarshal(b, &h); err != nil {
		return fmt.Errorf("reading %s: %w", handoverFile, err)
	}
	since := time.Duration(monotonicNow() - h.Mono)
	m.failsafe.promise(h.PromiseLeft - since)
	if h.Server == 0 {
		return nil
	}
	if err := m.pg.ownServer(h.Server); err != nil {
		return fmt.Errorf("not adopting postgres (pid %d): %w", h.Server, err)
	}
	p, err := os.FindProcess(h.Server)
	if err != nil {
		return err
	}
	m.pg.server = &server{cmd: &exec.Cmd{Process: p}, exited: m.procs.watch(h.Server), started: h.Started}
	m.pg.role, m.pg.following, m.pg.upstream = h.Role, h.Following, h.Upstream
	m.pg.designated = h.Role == asPrimary && m.c.replicaDB() && m.c.standby()
	if h.Role == asPrimary && h.Lease != nil {
		m.leases.record(h.Lease)
		m.leases.lease = h.Lease
		m.renewed = time.Now().Add(-(h.RenewedAgo + since))
		m.fence.extend(m.renewed, m.t.deadline)
		// The quorum the Lease asked of the old process, at once: a fence
		// started without it would confirm commits no replica has
		// flushed until the first turn.
		m.fence.setQuorum(m.leases.view().quorum)
		if !m.pg.designated {
			m.pg.startFence()
		}
		if h.Bridge != nil {
			m.pg.retire(h.Bridge)
		}
	}
	m.log("adopted postgres (pid %d) as %v", h.Server, h.Role)
	return nil
}

// ownServer checks that pid is this process's child and the postmaster of
// PGDATA.
func (pg *pgServer) ownServer(pid int) error {
	if err := childOf(pid); err != nil {
		return err
	}
	if holder, err := readPID(pg.c.PGData + "/postmaster.pid"); err != nil || holder != pid {
		return fmt.Errorf("not the postmaster of %s", pg.c.PGData)
	}
	return nil
}

// childOf checks that pid is this process's child.
func childOf(pid int) error {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return err
	}
	// pid (comm) state ppid ...: comm may hold spaces, so read after ")".
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(fields) < 2 || fields[1] != strconv.Itoa(os.Getpid()) {
		return fmt.Errorf("not a child of this process")
	}
	return nil
}

// The main thread: the server's parent-death signal (startServer) fires
// when the thread that started it ends, and an exec ends every thread but
// the one that calls it. So the server is started, and the exec made, on
// one thread that never ends: the main thread, which ServeMainThread
// keeps (with runtime.LockOSThread in the command's init).
var mainCalls chan func()

// ServeMainThread runs f on a new goroutine and, on the calling one,
// which must be locked to the main thread, what onMainThread asks, until
// f returns.
func ServeMainThread(f func()) {
	mainCalls = make(chan func())
	done := make(chan struct{})
	go func() { f(); close(done) }()
	for {
		select {
		case call := <-mainCalls:
			call()
		case <-done:
			return
		}
	}
}

// onMainThread runs f on the main thread, or here when none is served (tests).
func onMainThread(f func()) {
	if mainCalls == nil {
		f()
		return
	}
	done := make(chan struct{})
	mainCalls <- func() { f(); close(done) }
	<-done
}

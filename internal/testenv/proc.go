package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Proc is a process a test suite started, stopped only through its PID.
type Proc struct {
	Name string
	Log  string // path of its combined output
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// StartProc starts bin with args, its output appended to logPath, and
// records its PID in pidfile (removed when it exits) so that a later run
// can stop it if this one is killed (RecordedPID).
func StartProc(name, logPath, pidfile, bin string, args ...string) (*Proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group: a Ctrl-C on go test reaches only the test
	// binary, which then stops it in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	_ = os.WriteFile(pidfile, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
	p := &Proc{Name: name, cmd: cmd, Log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = f.Close()
		_ = os.Remove(pidfile)
		close(p.done)
	}()
	return p, nil
}

// Pid is the process's ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Exited tells whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is how the process ended (nil while it runs).
func (p *Proc) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// Stop sends SIGTERM and waits; SIGKILL after the timeout.
func (p *Proc) Stop(timeout time.Duration) error {
	if p.Exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within %s after SIGTERM; killed it", p.Name, timeout)
	}
}

// RecordedPID returns the PID in pidfile if that process still runs bin.
func RecordedPID(pidfile, bin string) (int, bool) {
	b, err := os.ReadFile(pidfile)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.HasPrefix(string(cmdline), bin+"\x00") {
		return 0, false
	}
	return pid, true
}

// Tail returns the last n lines of a file.
func Tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	return LastLines(string(b), n)
}

// LastLines is the last n lines of s.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// GoBuild builds the package pkg of the module at repo into out.
func GoBuild(repo, out, pkg string) error {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = repo
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// Make runs a target of the Makefile at repo with this process's
// environment (KUBECONFIG, PATH), without the jobserver of an enclosing
// make.
func Make(repo, target string) (string, error) {
	cmd := exec.Command("make", "-s", "-C", repo, target)
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "MAKEFLAGS" && k != "MFLAGS" && k != "MAKELEVEL" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

package instance

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"example.com/myoperator/internal/contract"
)

// The fence bridge: a primary's commits go on while its instance manager
// re-executes (reexec.go).
//
// The fence's standby is a connection of the instance manager, and the
// exec closes it: without a bridge, commits wait from the exec until the
// new process has started its own (about half a second). So before the
// exec, the old process starts a second standby under the same
// application name, the bridge: a child process that runs the same
// witness (fence.go) with the fence as it stands, open until the deadline
// of the last renewal on the system's monotonic clock, and the same quorum.
// It never renews anything, so it confirms nothing the old process could
// not have confirmed: the fence closes for it at the same instant. The
// server, which takes either of two standbys of one name as the fence,
// goes on with the bridge when the old witness leaves; the new process
// stops the bridge once its own witness streams, or at once when the
// quorum it reads differs from the bridge's (a raised quorum must not be
// confirmed at the old one). A bridge that no one stops ends at its
// deadline: past it, it would stall commits as a standby that never
// confirms.
//
// The bridge is this binary (/proc/self/exe, the old one), so only an
// instance manager that has the bridge starts one; the new process, of
// any version, reaps it (every process reaps its children, reaper.go).

// BridgeCommand is the instance manager's subcommand that runs the bridge.
const BridgeCommand = "fence-bridge"

// bridgeReady bounds how long the old process waits for its bridge to
// stream before it re-executes without one.
const bridgeReady = 2 * time.Second

// BridgeReadyFD is the bridge's end of the pipe on which it says that it
// streams (the first of exec.Cmd.ExtraFiles).
const BridgeReadyFD = 3

// bridge is a running bridge, as the process that must stop it knows it.
type bridge struct {
	PID    int             `json:"pid"`
	Quorum contract.Quorum `json:"quorum"`

	once   sync.Once
	exited <-chan syscall.WaitStatus
	log    Logger
}

// startBridge starts a bridge and waits until it streams. The deadline
// is read on the monotonic clock before the time left, so that it is, if
// anything, early.
func (pg *pgServer) startBridge() (*bridge, error) {
	mono := monotonicNow()
	left := pg.fence.left()
	if left <= 0 {
		return nil, errors.New("the fence is shut")
	}
	quorum := pg.fence.quorumNow()
	q, err := json.Marshal(quorum)
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer func() { _ = r.Close() }()
	cmd := exec.Command("/proc/self/exe", BridgeCommand, "--until-mono", strconv.FormatInt(mono+int64(left), 10), "--quorum", string(q))
	cmd.Stdout, cmd.Stderr, cmd.Env, cmd.ExtraFiles = os.Stdout, os.Stderr, pg.c.environ, []*os.File{w}
	// Gone with the instance manager, as the server is (startServer).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	exited, err := pg.procs.start(cmd)
	_ = w.Close()
	if err != nil {
		return nil, err
	}
	b := &bridge{PID: cmd.Process.Pid, Quorum: quorum, exited: exited, log: pg.log}
	wait := min(bridgeReady, left)
	_ = r.SetReadDeadline(time.Now().Add(wait))
	if line, err := bufio.NewReader(r).ReadString('\n'); err != nil || line != "streaming\n" {
		b.stop("it did not stream within " + wait.Round(time.Millisecond).String())
		return nil, fmt.Errorf("the bridge did not stream within %s", wait.Round(time.Millisecond))
	}
	return b, nil
}

// stopIfAny stops b unless it is nil.
func (b *bridge) stopIfAny(why string) {
	if b != nil {
		b.stop(why)
	}
}

// stop ends the bridge, once, and waits for its exit.
func (b *bridge) stop(why string) {
	b.once.Do(func() {
		_ = syscall.Kill(b.PID, syscall.SIGTERM)
		select {
		case <-b.exited:
		case <-time.After(time.Second):
			_ = syscall.Kill(b.PID, syscall.SIGKILL)
			select {
			case <-b.exited:
			case <-time.After(time.Second):
			}
		}
		b.log("fence bridge (pid %d) stopped: %s", b.PID, why)
	})
}

// retire stops the bridge the previous process left once this process's
// witness streams, or at the bridge's deadline.
func (pg *pgServer) retire(b *bridge) {
	if err := childOf(b.PID); err != nil {
		pg.log("not stopping the fence bridge (pid %d): %v", b.PID, err)
		return
	}
	b.exited, b.log = pg.procs.watch(b.PID), pg.log
	pg.bridge = b
	go func() {
		if pg.fence.awaitStreaming(context.Background(), pg.fence.left()) {
			b.stop("this process's fence streams")
			return
		}
		b.stop("this process's fence did not stream before the deadline")
	}()
}

// RunBridge is the bridge's command: it confirms the local primary's WAL,
// with quorum, until the monotonic instant untilMono (nanoseconds) or a
// signal, and writes "streaming" to ready once it streams. A witness that
// fails closes ready at once, without "streaming": the instance manager
// that waits for it re-executes without a bridge rather than wait on.
func RunBridge(ctx context.Context, c Config, untilMono int64, quorum contract.Quorum, ready *os.File, log Logger) error {
	f := newFence(time.Now)
	f.until = time.Now().Add(time.Duration(untilMono - monotonicNow()))
	f.setQuorum(quorum)
	ctx, cancel := context.WithDeadline(ctx, f.until)
	defer cancel()
	waiting, witnessEnded := context.WithCancel(ctx)
	defer witnessEnded()
	done := make(chan error, 1)
	go func() {
		done <- witness(ctx, c, f)
		witnessEnded()
	}()
	if f.awaitStreaming(waiting, time.Until(f.until)) {
		_, _ = ready.WriteString("streaming\n")
		log("fence bridge streaming until the fence closes in %s", time.Until(f.until).Round(time.Millisecond))
	}
	_ = ready.Close()
	err := <-done
	if ctx.Err() != nil {
		return nil
	}
	return err
}

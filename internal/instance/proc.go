package instance

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Every child process is started and waited for through the reaper, which
// takes every exit there is (reaper.go): an exec.Cmd's own Wait would race
// it. These helpers stand in for exec.Cmd's Run and Output.

// killDelay is how long a program asked to stop (SIGTERM, on which initdb,
// pg_basebackup and pg_rewind remove what they made) has before SIGKILL.
const killDelay = 10 * time.Second

// run runs a program to completion with this process's environment plus
// env; stdin, when not empty, is its standard input. Its errors go to the
// container log; its standard output is returned.
func (r *reaper) run(ctx context.Context, env []string, stdin, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	// Our own pipes: exec.Cmd's would be closed only by its Wait.
	outR, outW, err := os.Pipe()
	if err != nil {
		return "", err
	}
	defer func() { _ = outR.Close() }()
	cmd.Stdout = outW
	var inW *os.File
	if stdin != "" {
		var inR *os.File
		if inR, inW, err = os.Pipe(); err != nil {
			_ = outW.Close()
			return "", err
		}
		cmd.Stdin = inR
		defer func() { _ = inR.Close() }()
	}
	exited, err := r.start(cmd)
	_ = outW.Close()
	if err != nil {
		if inW != nil {
			_ = inW.Close()
		}
		return "", fmt.Errorf("%s: %w", name, err)
	}
	if inW != nil {
		go func() { _, _ = io.Copy(inW, strings.NewReader(stdin)); _ = inW.Close() }()
	}
	read := make(chan string, 1)
	go func() { b, _ := io.ReadAll(outR); read <- string(b) }()
	ws := waitOrStop(ctx, cmd.Process, exited)
	out := <-read
	if code := exitCode(ws); code != 0 {
		return out, fmt.Errorf("%s: exit status %d", name, code)
	}
	if ctx.Err() != nil {
		return out, ctx.Err()
	}
	return out, nil
}

// exec starts cmd and returns a function that waits for its exit
// (backup.Exec), stopping it as waitOrStop does when ctx ends first.
func (r *reaper) exec(ctx context.Context, cmd *exec.Cmd) (func() error, error) {
	exited, err := r.start(cmd)
	if err != nil {
		return nil, err
	}
	return func() error {
		if code := exitCode(waitOrStop(ctx, cmd.Process, exited)); code != 0 {
			return fmt.Errorf("exit status %d", code)
		}
		return ctx.Err()
	}, nil
}

// waitOrStop waits for a process to exit; when ctx ends first it sends
// SIGTERM, and SIGKILL killDelay later.
func waitOrStop(ctx context.Context, p *os.Process, exited <-chan syscall.WaitStatus) syscall.WaitStatus {
	defer func() { _ = p.Release() }()
	done := ctx.Done()
	var kill <-chan time.Time
	for {
		select {
		case ws := <-exited:
			return ws
		case <-done:
			done = nil
			_ = p.Signal(syscall.SIGTERM)
			kill = time.After(killDelay)
		case <-kill:
			_ = p.Signal(syscall.SIGKILL)
		}
	}
}

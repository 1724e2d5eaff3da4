/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package instance

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Logger writes one line to the container log.
type Logger func(format string, args ...any)

// NewLogger logs each line with a UTC timestamp and the pod's name.
func NewLogger(pod string) Logger {
	return func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s mydatabase[%s]: %s\n", time.Now().UTC().Format(time.RFC3339), pod, fmt.Sprintf(format, args...))
	}
}

// Run prepares the data directory if it has none, then runs PostgreSQL
// until it exits, and returns its exit code. A signal before the server
// runs ends the bootstrap (its scratch directory is redone next time); once
// it runs:
//   - SIGTERM, what the kubelet sends to stop a container, becomes a fast
//     shutdown (SIGINT): PostgreSQL's own meaning of SIGTERM is a smart
//     shutdown, which would wait for every client to leave;
//   - SIGINT and SIGQUIT are passed on (fast and immediate shutdown);
//   - SIGHUP is passed on (reload).
func Run(ctx context.Context, c Config, log Logger) (int, error) {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP)
	defer signal.Stop(signals)
	bootCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	bootDone := make(chan struct{})
	var stoppedBy os.Signal
	go func() {
		defer close(bootDone)
		select {
		case s := <-signals:
			stoppedBy = s
			log("received %s while preparing the data directory: stopping", signalName(s))
			cancel()
		case <-bootCtx.Done():
		}
	}()
	args, err := c.prepare(bootCtx, log)
	cancel()
	<-bootDone
	switch {
	case stoppedBy != nil:
		// Asked to stop before the server ran: never start it.
		return 1, fmt.Errorf("stopped by %s before the server started", signalName(stoppedBy))
	case err != nil:
		return 1, err
	case ctx.Err() != nil:
		return 1, ctx.Err()
	}

	role := "replica"
	if c.Primary() {
		role = "primary"
	}
	log("starting postgres as %s", role)
	cmd := exec.Command("postgres", args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	// The environment holds no password: ConfigFromEnv removed them.
	cmd.Env = os.Environ()
	// Reap before the server can leave orphans: as PID 1 of the container,
	// this process inherits every process whose parent dies.
	r := startReaper()
	defer r.stop()
	exited, err := r.start(cmd)
	if err != nil {
		return 1, fmt.Errorf("starting postgres: %w", err)
	}
	server := cmd.Process.Pid
	done := ctx.Done()
	for {
		select {
		case s := <-signals:
			forward := s
			if s == syscall.SIGTERM {
				forward = syscall.SIGINT
				log("received SIGTERM: fast shutdown")
			}
			_ = syscall.Kill(server, forward.(syscall.Signal))
		case ws := <-exited:
			code := exitCode(ws)
			log("postgres exited with code %d", code)
			return code, nil
		case <-done:
			done = nil // once
			_ = syscall.Kill(server, syscall.SIGINT)
		}
	}
}

// prepare makes the data directory if there is none and returns the
// server's arguments.
func (c Config) prepare(ctx context.Context, log Logger) ([]string, error) {
	if err := c.writePassfile(); err != nil {
		return nil, fmt.Errorf("writing the replication password file: %w", err)
	}
	if !c.initialised() {
		var err error
		if c.Primary() {
			err = c.initPrimary(ctx, log)
		} else {
			err = c.cloneReplica(ctx, log)
		}
		if err != nil {
			return nil, err
		}
	}
	args := []string{"-D", c.PGData,
		"-c", "config_file=" + c.ConfigDir + "/" + postgresConf, "-c", "hba_file=" + c.ConfigDir + "/" + hbaConf,
		"-c", "unix_socket_directories=" + c.SocketDir, "-c", "port=" + c.Port}
	if c.Primary() {
		return args, nil
	}
	if err := os.WriteFile(c.PGData+"/standby.signal", nil, 0o600); err != nil {
		return nil, err
	}
	extra, err := c.keepPrimaryMinimums(ctx, log, args)
	if err != nil {
		return nil, err
	}
	args = append(args, extra...)
	return append(args, "-c", fmt.Sprintf("primary_conninfo=host=%s port=%s user=replicator passfile=%s application_name=%s",
		c.PrimaryHost, c.PrimaryPort, c.passfile(), c.PodName)), nil
}

func signalName(s os.Signal) string {
	if sig, ok := s.(syscall.Signal); ok {
		return unix.SignalName(sig)
	}
	return s.String()
}

func exitCode(ws syscall.WaitStatus) int {
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	default:
		return 1
	}
}

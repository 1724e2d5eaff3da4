package instance

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"example.com/myoperator/internal/backup"
	"example.com/myoperator/internal/contract"

	"example.com/myoperator/internal/instance/pgmetrics"
)

// Logger writes one line to the container log.
type Logger func(format string, args ...any)

// NewLogger logs each line with a UTC timestamp and the pod's name.
func NewLogger(pod string) Logger {
	return func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s mydatabase[%s]: %s\n", time.Now().UTC().Format(time.RFC3339Nano), pod, fmt.Sprintf(format, args...))
	}
}

// Run runs the HA loop (manager.go) until a signal ends it:
//   - SIGTERM, what the kubelet sends to stop a container, and SIGINT stop
//     the server with a fast shutdown (PostgreSQL's own meaning of SIGTERM
//     is a smart shutdown, which would wait for every client to leave),
//     then give up the Lease if this instance held it, so that a replica
//     takes over at once; a bootstrap under way is abandoned (its scratch
//     directory is redone next time);
//   - SIGHUP is passed on to the server (reload);
//   - SIGUSR1 asks it to re-execute itself as a new binary, keeping the
//     server running (reexec.go).
//
// It returns 0 after a clean stop.
func Run(ctx context.Context, c Config, log Logger) (int, error) {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1)
	defer signal.Stop(signals)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	reload, replace := make(chan struct{}, 1), make(chan struct{}, 1)
	go func() {
		for s := range signals {
			asked := reload
			switch s {
			case syscall.SIGHUP:
			case syscall.SIGUSR1:
				asked = replace
			default:
				log("received %s: stopping", signalName(s))
				cancel()
				continue
			}
			select {
			case asked <- struct{}{}:
			default:
			}
		}
	}()

	self, err := os.Executable()
	if err != nil {
		return 1, err
	}
	c.Self = self
	removeOldCluster(c, log)
	if c.Backup != nil {
		if err := backup.WriteConfig(c.backupConfigFile(), *c.Backup); err != nil {
			return 1, fmt.Errorf("writing the object store's configuration: %w", err)
		}
	}
	m, err := newManager(c, log)
	if err != nil {
		return 1, err
	}
	defer m.procs.stop()
	// Adopted first: after a re-execution, commits wait until the fence's
	// standby runs again (adopt starts it), and the digest of this binary
	// takes a while.
	if err := m.adopt(); err != nil {
		log("%v", err)
	}
	if m.digest, err = contract.Digest(self); err != nil {
		return 1, err
	}
	if err := m.announce(); err != nil {
		log("this instance manager cannot be replaced in place: %v", err)
	}
	if c.MetricsAddress != "" {
		go m.serveMetrics(ctx)
	}
	if c.Backup != nil {
		m.backups.loadBackupRun()
		go m.backups.watchBackups(ctx)
		go m.backups.takeRequestedBackups(ctx)
	}
	for {
		m.loop(ctx, reload, replace)
		if ctx.Err() != nil {
			return m.shutdown(), nil
		}
		// reexec returns only when it could not execute the new binary.
		log("not replaced: %v", m.reexec(ctx))
	}
}

// serveMetrics serves the server's metrics, and the failsafe endpoint
// (failsafe.go), until ctx ends. It never stops
// the instance: a port it cannot listen on is logged, and the database
// runs without metrics.
func (m *manager) serveMetrics(ctx context.Context) {
	collector := pgmetrics.NewCollector(m.pg.connect, m.c.CustomQueries, m.log)
	more := map[string]http.Handler{failsafePath: m.failsafeHandler(m.leases.promiseFor, time.Now)}
	if err := pgmetrics.Serve(ctx, m.c.MetricsAddress, collector, more); err != nil {
		m.log("serving metrics on %s: %v", m.c.MetricsAddress, err)
	}
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

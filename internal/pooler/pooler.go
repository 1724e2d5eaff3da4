// Package pooler is the pooler manager: PID 1 of a MyDatabasePooler's
// PgBouncer container (`instance pooler`), as the instance manager is of a
// database container. It writes PgBouncer's configuration from what the
// operator gives it (contract.Pooler, and the pooler's certificates),
// runs PgBouncer as its child, and reloads it (SIGHUP: no client is
// disconnected) whenever either changes in its mounted volume. A
// read-write pooler in transaction mode pauses PgBouncer through each
// switchover (follow.go).
//
// PgBouncer authenticates clients with auth_query, as contract.PoolerRole,
// which logs in with the pooler's client certificate: the passwords stay in
// PostgreSQL (internal/instance, pooler.go).
package pooler

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/instance/pgmetrics"
)

// Config is where the pooler manager finds what it needs.
type Config struct {
	// ConfigPath is the contract.Pooler JSON; TLSDir the pooler's Secret;
	// RunDir a writable directory.
	ConfigPath, TLSDir, RunDir string
	// Port PgBouncer listens on (contract.PoolerPort in a pod).
	Port int
	// PgBouncer is the executable; "pgbouncer" on the PATH by default.
	PgBouncer string
	// Poll is how often the mounted files are read for a change.
	Poll time.Duration
	// MetricsAddress is where /metrics is served (metrics.go); "" for
	// nowhere.
	MetricsAddress string

	// consolePassword is ConsoleUser's, for this run, and pauses
	// PgBouncer's pause (Run makes both).
	consolePassword string
	pauses          *pauses
}

// ConfigFromEnv reads the container's environment (specs.PoolerDeployment).
func ConfigFromEnv() (Config, error) {
	c := Config{ConfigPath: os.Getenv(contract.PoolerConfigEnv), TLSDir: os.Getenv(contract.PoolerTLSEnv),
		RunDir: os.Getenv(contract.PoolerRunEnv), Port: contract.PoolerPort, PgBouncer: "pgbouncer", Poll: 2 * time.Second,
		MetricsAddress: os.Getenv(contract.PoolerMetricsEnv)}
	if c.ConfigPath == "" || c.TLSDir == "" || c.RunDir == "" {
		return c, fmt.Errorf("%s, %s and %s must all be set", contract.PoolerConfigEnv, contract.PoolerTLSEnv, contract.PoolerRunEnv)
	}
	if s := os.Getenv(contract.PoolerPortEnv); s != "" {
		port, err := strconv.Atoi(s)
		if err != nil || port < 1 || port > 65535 {
			return c, fmt.Errorf("%s=%q is not a port", contract.PoolerPortEnv, s)
		}
		c.Port = port
	}
	return c, nil
}

// The certificate files copied from the Secret into RunDir/tls: PgBouncer
// reads them again on every reload, and a copy is a consistent set even
// while the kubelet swaps the volume's contents.
var tlsFiles = []string{"tls.crt", "tls.key", "ca.crt", contract.PoolerClientCertKey, contract.PoolerClientKeyKey, contract.PoolerServerCAKey}

// files are PgBouncer's files, by path under RunDir.
type files map[string][]byte

// Render reads the configuration and the certificates and returns
// PgBouncer's files: pgbouncer.ini, the auth file (ConsoleUser's password
// alone: the clients' come from the auth query), and the certificates
// under tls/.
func (c Config) Render() (files, error) {
	p, err := c.pooler()
	if err != nil {
		return nil, err
	}
	out := files{"userlist.txt": nil}
	if c.consolePassword != "" {
		out["userlist.txt"] = fmt.Appendf(nil, "%q %q\n", ConsoleUser, c.consolePassword)
	}
	for _, name := range tlsFiles {
		b, err := os.ReadFile(filepath.Join(c.TLSDir, name))
		if err != nil {
			return nil, err
		}
		out[filepath.Join("tls", name)] = b
	}
	out["pgbouncer.ini"] = []byte(c.ini(p))
	return out, nil
}

// pooler reads the operator's configuration.
func (c Config) pooler() (contract.Pooler, error) {
	var p contract.Pooler
	raw, err := os.ReadFile(c.ConfigPath)
	if err != nil {
		return p, err
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return p, fmt.Errorf("%s: %w", c.ConfigPath, err)
	}
	if p.Host == "" || p.Port == 0 {
		return p, fmt.Errorf("%s names no server host and port", c.ConfigPath)
	}
	return p, nil
}

// ini is pgbouncer.ini. The operator's settings come first in
// p.Settings' place; those the pooler manager owns (addresses,
// authentication, TLS) cannot be overridden: they are written after, and
// the keys are refused if present.
func (c Config) ini(p contract.Pooler) string {
	tls := func(name string) string { return filepath.Join(c.RunDir, "tls", name) }
	owned := [][2]string{
		{"listen_addr", "*"},
		{"listen_port", strconv.Itoa(c.Port)},
		{"unix_socket_dir", c.RunDir},
		{"auth_type", "scram-sha-256"},
		{"auth_file", filepath.Join(c.RunDir, "userlist.txt")},
		{"auth_user", contract.PoolerRole},
		{"auth_query", "SELECT username, password FROM " + contract.PoolerLookup + "($1)"},
		{"admin_users", ConsoleUser},
		{"client_tls_sslmode", cmp.Or(p.ClientTLS, "prefer")},
		{"client_tls_cert_file", tls("tls.crt")},
		{"client_tls_key_file", tls("tls.key")},
		// No client certificate is asked for; without a CA file PgBouncer
		// loads the system's, which a minimal image does not have
		// ("TLS setup failed: failed to load CA").
		{"client_tls_ca_file", tls("ca.crt")},
		{"server_tls_sslmode", "verify-full"},
		{"server_tls_ca_file", tls(contract.PoolerServerCAKey)},
		{"server_tls_cert_file", tls(contract.PoolerClientCertKey)},
		{"server_tls_key_file", tls(contract.PoolerClientKeyKey)},
		// JDBC sends it; PgBouncer refuses unknown startup parameters.
		{"ignore_startup_parameters", "extra_float_digits"},
		// A connection to a server that vanished (a node lost with the
		// old primary) is dropped within about 25 s rather than the
		// kernel's two hours of keepalive or fifteen minutes of
		// retransmissions.
		{"tcp_keepalive", "1"}, {"tcp_keepidle", "10"}, {"tcp_keepintvl", "5"}, {"tcp_keepcnt", "3"},
		{"tcp_user_timeout", "25000"},
		// After a failed connection to the server PgBouncer waits this
		// long before the next try (15 s by default): the new primary of
		// a failover is reached a second after it is ready, not fifteen.
		{"server_login_retry", "1"},
	}
	var b strings.Builder
	b.WriteString("; Written by the MyDatabase pooler manager from the operator's configuration.\n[databases]\n")
	fmt.Fprintf(&b, "* = host=%s port=%d auth_user=%s\n\n[pgbouncer]\n", p.Host, p.Port, contract.PoolerRole)
	isOwned := func(k string) bool { return slices.ContainsFunc(owned, func(kv [2]string) bool { return kv[0] == k }) }
	for _, k := range slices.Sorted(maps.Keys(p.Settings)) {
		if !isOwned(k) && !strings.ContainsAny(k+p.Settings[k], "\n\r") {
			fmt.Fprintf(&b, "%s = %s\n", k, p.Settings[k])
		}
	}
	for _, kv := range owned {
		fmt.Fprintf(&b, "%s = %s\n", kv[0], kv[1])
	}
	return b.String()
}

// write puts fs under RunDir, each file replaced atomically, and reports
// whether any changed.
func (c Config) write(fs files) (bool, error) {
	changed := false
	for _, name := range slices.Sorted(maps.Keys(fs)) {
		path := filepath.Join(c.RunDir, name)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, fs[name]) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return changed, err
		}
		tmp := path + ".new"
		if err := os.WriteFile(tmp, fs[name], 0o600); err != nil {
			return changed, err
		}
		if err := os.Rename(tmp, path); err != nil {
			return changed, err
		}
		changed = true
	}
	return changed, nil
}

// Run writes PgBouncer's files, starts it, and reloads it on every change
// until ctx ends (then it shuts PgBouncer down: SIGINT, which lets running
// transactions finish, then SIGTERM after stopGrace) or PgBouncer exits.
// It returns PgBouncer's exit code.
func Run(ctx context.Context, c Config, log func(string, ...any)) (int, error) {
	c.consolePassword, c.pauses = newConsolePassword(), &pauses{}
	fs, err := c.Render()
	if err != nil {
		return 1, err
	}
	if _, err := c.write(fs); err != nil {
		return 1, err
	}
	cmd := exec.Command(cmp.Or(c.PgBouncer, "pgbouncer"), filepath.Join(c.RunDir, "pgbouncer.ini"))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return 1, fmt.Errorf("starting PgBouncer: %w", err)
	}
	log("started PgBouncer (pid %d) for %s", cmd.Process.Pid, c.ConfigPath)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if c.MetricsAddress != "" {
		go func() {
			if err := pgmetrics.Serve(ctx, c.MetricsAddress, &collector{c: c}, nil); err != nil {
				log("serving metrics on %s: %v", c.MetricsAddress, err)
			}
		}()
	}
	go c.follow(ctx, log)
	poll := time.NewTicker(cmp.Or(c.Poll, 2*time.Second))
	defer poll.Stop()
	var renderErr string
	answered := false
	for {
		select {
		case err := <-exited:
			return exitCode(err), fmt.Errorf("PgBouncer exited: %v", err)
		case <-ctx.Done():
			return stop(cmd, exited, log), nil
		case <-poll.C:
		}
		fs, err := c.Render()
		if err != nil {
			// A half-written volume, or a Secret the operator is about
			// to fix: PgBouncer keeps what it has.
			if err.Error() != renderErr {
				log("keeping PgBouncer's configuration: %v", err)
				renderErr = err.Error()
			}
			continue
		}
		renderErr = ""
		changed, err := c.write(fs)
		if err != nil {
			log("writing PgBouncer's configuration: %v", err)
			continue
		}
		if changed {
			log("the configuration or the certificates changed: reloading PgBouncer")
			_ = cmd.Process.Signal(syscall.SIGHUP)
		}
		// Signals only once PgBouncer answers: before it handles SIGUSR1,
		// the signal would end it.
		if !answered {
			probe, cancel := context.WithTimeout(ctx, 5*time.Second)
			answered = c.onConsole(probe, "SHOW VERSION") == nil
			cancel()
		}
		if p, err := c.pooler(); err == nil && answered {
			c.pauses.hold(cmd.Process, p.Paused, log)
		}
	}
}

// stopGrace is how long a shutdown lets PgBouncer's clients finish their
// transactions before it is told to stop at once (within the pod's 30 s).
const stopGrace = 20 * time.Second

func stop(cmd *exec.Cmd, exited <-chan error, log func(string, ...any)) int {
	log("stopping PgBouncer: running transactions may finish")
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-exited:
		return exitCode(err)
	case <-time.After(stopGrace):
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	return exitCode(<-exited)
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) && ee.ExitCode() >= 0 {
		return ee.ExitCode()
	}
	return 1
}

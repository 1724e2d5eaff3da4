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
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// bootstrapSQL creates the application's role and database and the
// replication role. psql reads the values from its environment with
// \getenv, so that no password is ever on a command line.
const bootstrapSQL = `\getenv app_user POSTGRES_USER
\getenv app_password POSTGRES_PASSWORD
\getenv app_db POSTGRES_DB
\getenv replication_password REPLICATION_PASSWORD
CREATE ROLE :"app_user" LOGIN PASSWORD :'app_password';
CREATE DATABASE :"app_db" OWNER :"app_user";
REVOKE ALL ON DATABASE :"app_db" FROM PUBLIC;
CREATE ROLE replicator WITH REPLICATION LOGIN PASSWORD :'replication_password';
`

// initialised tells whether PGDATA holds a data directory.
func (c Config) initialised() bool {
	fi, err := os.Stat(c.PGData + "/PG_VERSION")
	return err == nil && fi.Size() > 0
}

// writePassfile writes the replication password where libpq reads it
// (mode 0600), escaped as the password file format wants.
func (c Config) writePassfile() error {
	p := strings.NewReplacer(`\`, `\\`, `:`, `\:`).Replace(c.ReplicationPassword)
	tmp := c.passfile() + ".tmp"
	if err := os.WriteFile(tmp, []byte("*:*:*:replicator:"+p+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, c.passfile())
}

// initPrimary makes a new data directory with the roles and database of
// the spec. All of it happens in a scratch directory, renamed into place
// at the end.
func (c Config) initPrimary(ctx context.Context, log Logger) error {
	scratch := c.PGData + ".init"
	log("initialising a new primary in %s", c.PGData)
	if err := os.RemoveAll(scratch); err != nil {
		return err
	}
	if err := run(ctx, nil, "initdb", "--pgdata="+scratch, "--username=postgres", "--encoding=UTF8", "--locale=C",
		"--data-checksums", "--auth-local=trust", "--auth-host=scram-sha-256"); err != nil {
		return err
	}
	if err := c.bootstrap(ctx, scratch); err != nil {
		return err
	}
	if err := os.Rename(scratch, c.PGData); err != nil {
		return err
	}
	log("primary initialised")
	return nil
}

// bootstrap runs bootstrapSQL on a private server of the scratch data
// directory: no TCP listener, and its socket in the scratch directory (mode
// 0700), not in the socket directory where the probes would take it for the
// real server and report the pod ready too soon. The server is this
// process's child, not pg_ctl's daemon, so that it is stopped whatever
// happens, a signal during the bootstrap included.
func (c Config) bootstrap(ctx context.Context, scratch string) error {
	server := exec.Command("postgres", "-D", scratch,
		"-c", "listen_addresses=", "-c", "unix_socket_directories="+scratch, "-c", "port="+c.Port)
	server.Stderr = os.Stderr
	if err := server.Start(); err != nil {
		return fmt.Errorf("starting a private server on %s: %w", scratch, err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = server.Wait(); close(exited) }()
	defer func() {
		select {
		case <-exited:
		default:
			_ = server.Process.Signal(syscall.SIGINT) // fast shutdown
			<-exited
		}
	}()
	for run(ctx, nil, "pg_isready", "--quiet", "--host="+scratch, "--port="+c.Port) != nil {
		select {
		case <-exited:
			return fmt.Errorf("the private server on %s exited at start: %v", scratch, waitErr)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	env := []string{"POSTGRES_USER=" + c.User, "POSTGRES_DB=" + c.Database,
		"POSTGRES_PASSWORD=" + c.Password, "REPLICATION_PASSWORD=" + c.ReplicationPassword}
	return runStdin(ctx, env, bootstrapSQL, "psql", "--no-psqlrc", "--quiet", "--set=ON_ERROR_STOP=1",
		"--host="+scratch, "--port="+c.Port, "--username=postgres", "--dbname=postgres")
}

// cloneReplica copies the primary with pg_basebackup into a scratch
// directory, renamed into place when complete.
func (c Config) cloneReplica(ctx context.Context, log Logger) error {
	scratch := c.PGData + ".clone"
	if err := os.RemoveAll(scratch); err != nil {
		return err
	}
	for run(ctx, nil, "pg_isready", "--quiet", "--host="+c.PrimaryHost, "--port="+c.PrimaryPort) != nil {
		log("waiting for the primary at %s:%s", c.PrimaryHost, c.PrimaryPort)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
	log("cloning the primary at %s:%s", c.PrimaryHost, c.PrimaryPort)
	if err := run(ctx, []string{"PGPASSFILE=" + c.passfile()}, "pg_basebackup", "--pgdata="+scratch,
		"--host="+c.PrimaryHost, "--port="+c.PrimaryPort, "--username=replicator", "--no-password",
		"--wal-method=stream", "--checkpoint=fast"); err != nil {
		return err
	}
	if err := os.Rename(scratch, c.PGData); err != nil {
		return err
	}
	log("replica cloned")
	return nil
}

// hotStandbyMinimums are the settings a standby may not run lower than the
// primary whose WAL it replays, by their names in pg_controldata's output.
var hotStandbyMinimums = map[string]string{
	"max_connections setting":      "max_connections",
	"max_worker_processes setting": "max_worker_processes",
	"max_wal_senders setting":      "max_wal_senders",
	"max_prepared_xacts setting":   "max_prepared_transactions",
	"max_locks_per_xact setting":   "max_locks_per_transaction",
}

// keepPrimaryMinimums returns the -c options that raise a standby's
// settings to the primary's. PostgreSQL aborts recovery if a standby runs
// with less; the primary's values, as of the last change replayed, are in
// pg_control. So lowering one (the replicas restart first) or re-creating
// the MyDatabase from an older manifest never leaves a replica failing at
// every start. The standby takes its own value at the first restart after
// the primary has run with it.
func (c Config) keepPrimaryMinimums(ctx context.Context, log Logger, args []string) ([]string, error) {
	out, err := output(ctx, []string{"LC_ALL=C"}, "pg_controldata", c.PGData)
	if err != nil {
		return nil, err
	}
	var extra []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		field, value, ok := strings.Cut(sc.Text(), ":")
		name, known := hotStandbyMinimums[strings.TrimSpace(field)]
		if !ok || !known {
			continue
		}
		recorded, err := strconv.Atoi(strings.TrimSpace(value))
		if err != nil {
			return nil, fmt.Errorf("pg_controldata: %s: %w", field, err)
		}
		conf, err := output(ctx, nil, "postgres", append(append([]string{}, args...), "-C", name)...)
		if err != nil {
			return nil, err
		}
		configured, err := strconv.Atoi(strings.TrimSpace(conf))
		if err != nil {
			return nil, fmt.Errorf("postgres -C %s: %w", name, err)
		}
		if recorded > configured {
			log("%s: keeping the primary's %d until it runs with the configured %d", name, recorded, configured)
			extra = append(extra, "-c", fmt.Sprintf("%s=%d", name, recorded))
		}
	}
	return extra, sc.Err()
}

// run runs a program to completion with this process's environment plus
// env: its errors go to the container log, its standard output (initdb's
// progress) nowhere.
func run(ctx context.Context, env []string, name string, args ...string) error {
	return runStdin(ctx, env, "", name, args...)
}

func runStdin(ctx context.Context, env []string, stdin, name string, args ...string) error {
	cmd := command(ctx, env, name, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// output runs a program and returns its standard output.
func output(ctx context.Context, env []string, name string, args ...string) (string, error) {
	out, err := command(ctx, env, name, args...).Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return string(out), nil
}

// command prepares a program with this process's environment plus env, its
// errors in the container log. When ctx ends it gets SIGTERM, on which
// initdb and pg_basebackup remove what they made, and SIGKILL 10 s later.
func command(ctx context.Context, env []string, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// Command instance is the instance manager of MyDatabase pods
// (internal/instance). It ships in the operator's image; the pod's init
// container copies it into an emptyDir shared with the database container,
// so that the official postgres image runs it as PID 1 unchanged.
//
//	instance install DEST   copy this binary to DEST (the init container)
//	instance run            prepare the data directory, run PostgreSQL (the database container)
//	instance backup         take a base backup of this container's server into spec.backup's
//	                        object store; prints its manifest (JSON)
//	instance verify         restore a base backup and the archive after it into PGDATA on a
//	                        server no client reaches, check it (pg_verifybackup, the end of the
//	                        archive, pg_amcheck), and print the result (contract.Verification, JSON),
//	                        also to VERIFY_RESULT_FILE; exit 0 Passed, 1 Failed (the backup or
//	                        archive is damaged), 2 Error (could not verify). Reads RESTORE_* as a
//	                        restore does (RESTORE_BACKUP_ID empty: the latest), PGDATA, PGPORT
//	                        (optional: names the socket), TMPDIR (its private directory)
//	instance wal-push --config FILE PATH       archive_command
//	instance wal-fetch [--strict] --config FILE NAME DEST
//	                                           restore_command (exit 1: not archived; 126, which stops
//	                                           recovery with an error: no key decrypts it, or with
//	                                           --strict any other failure)
//	instance stage --major N DEST              copy this image's PostgreSQL N into DEST (an upgrade's init container)
//	instance upgrade --old-major N --new-major M --staged DEST [--copy]
//	                                           pg_upgrade PGDATA from N to M (the upgrade Job)
//	instance pooler                            run PgBouncer as its child, reloading it on every change
//	                                           of its configuration or certificates (a MyDatabasePooler's pod)
//	instance version                           print this binary's digest (SHA-256), its version
//	instance replace --digest HEX              replace the running instance manager by the binary
//	                                           on stdin, keeping the server running (run by the operator)
//	instance fence-bridge --until-mono NS --quorum JSON
//	                                           hold a primary's fence while its instance manager
//	                                           re-executes (started by the instance manager)
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"example.com/myoperator/internal/backup"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/instance"
	"example.com/myoperator/internal/pooler"
)

// The instance manager starts its server, and re-executes itself, on the
// main thread (internal/instance, reexec.go).
func init() { runtime.LockOSThread() }

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "install":
		if len(os.Args) != 3 {
			usage()
		}
		if err := install(os.Args[2]); err != nil {
			fmt.Fprintf(os.Stderr, "instance install: %v\n", err)
			os.Exit(1)
		}
	case "run":
		c, err := instance.ConfigFromEnv()
		log := instance.NewLogger(c.PodName)
		if err != nil {
			log("%v", err)
			os.Exit(1)
		}
		instance.ServeMainThread(func() {
			code, err := instance.Run(context.Background(), c, log)
			if err != nil {
				log("%v", err)
			}
			os.Exit(code)
		})
	case "version":
		digest, err := instance.SelfDigest()
		if err != nil {
			fmt.Fprintf(os.Stderr, "instance version: %v\n", err)
			os.Exit(1)
		}
		fmt.Println(digest)
	case "replace":
		flags := flag.NewFlagSet("replace", flag.ExitOnError)
		digest := flags.String("digest", "", "the SHA-256 of the binary on stdin")
		_ = flags.Parse(os.Args[2:])
		if *digest == "" || flags.NArg() != 0 {
			usage()
		}
		if err := instance.Replace(context.Background(), os.Getenv(contract.EnvSocketDir), *digest, os.Stdin); err != nil {
			fmt.Fprintf(os.Stderr, "instance replace: %v\n", err)
			os.Exit(1)
		}
	case instance.BridgeCommand:
		os.Exit(fenceBridge(os.Args[2:]))
	case "backup":
		m, err := instance.Backup(context.Background())
		if err != nil {
			fmt.Fprintf(os.Stderr, "instance backup: %v\n", err)
			os.Exit(1)
		}
		_ = json.NewEncoder(os.Stdout).Encode(m)
	case contract.VerifyCommand:
		if len(os.Args) != 2 {
			usage()
		}
		instance.ServeMainThread(func() { os.Exit(verify()) })
	case walPush, walFetch:
		os.Exit(wal(os.Args[1], os.Args[2:]))
	case "stage", "upgrade":
		os.Exit(upgrade(os.Args[1], os.Args[2:]))
	case "pooler":
		os.Exit(runPooler())
	default:
		usage()
	}
}

// wal runs archive_command or restore_command: exit 0 done, 1 failed (or,
// for wal-fetch, not archived), recoveryFatal for a wal-fetch of a file
// no key decrypts, and the reason on stderr, which the server
// logs. wal-push also leaves it for the instance manager's report.
//
// PostgreSQL takes every exit status of restore_command below 126 as "not
// archived": recovery ends there and the server promotes. A restore
// (--strict) must not end at a file the store holds but could not give
// back (unreachable, refused, corrupt): wal-fetch tries again, and then
// exits recoveryFatal, which stops recovery with an error instead. A standby is not
// strict: it goes back to streaming and asks again, and a failover must
// not wait for the store.
func wal(verb string, args []string) int {
	flags := flag.NewFlagSet(verb, flag.ContinueOnError)
	config := flags.String("config", "", "the object store's configuration (written by instance run)")
	strict := flags.Bool("strict", false, "wal-fetch: exit 126, not 1, for any failure but a file not archived")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if want := map[string]int{walPush: 1, walFetch: 2}[verb]; flags.NArg() != want {
		usage()
	}
	attempts := 1
	if *strict {
		attempts = len(strictRetries) + 1
	}
	var err error
	for attempt := range attempts {
		if attempt > 0 {
			fmt.Fprintf(os.Stderr, "instance %s: %v; trying again in %s\n", verb, err, strictRetries[attempt-1])
			time.Sleep(strictRetries[attempt-1])
		}
		if err = walCommand(verb, *config, flags.Args()); err == nil || errors.Is(err, backup.ErrNotFound) || errors.Is(err, backup.ErrWrongKey) {
			break
		}
	}
	switch verb {
	case walPush:
		instance.RecordArchiveResult(*config, err)
	case walFetch:
		instance.RecordFetchResult(*config, flags.Arg(0), err)
	}
	switch {
	case verb == walFetch && errors.Is(err, backup.ErrNotFound):
		return 1 // not an error: recovery asks for what may not exist
	case verb == walFetch && errors.Is(err, backup.ErrWrongKey):
		// Archived, but no key decrypts it: recovery must stop there, not
		// take it for the end of the archive and promote without it.
		fmt.Fprintf(os.Stderr, "instance %s: %v\n", verb, err)
		return recoveryFatal
	case err != nil && *strict:
		fmt.Fprintf(os.Stderr, "instance %s: %v: recovery stops here rather than end before the archive does\n", verb, err)
		return recoveryFatal
	case err != nil:
		fmt.Fprintf(os.Stderr, "instance %s: %v\n", verb, err)
		return 1
	}
	return 0
}

// strictRetries are the pauses before a strict wal-fetch tries again.
var strictRetries = []time.Duration{time.Second, 3 * time.Second}

func walCommand(verb, config string, args []string) error {
	cfg, err := backup.ReadConfig(config)
	if err != nil {
		return err
	}
	store, err := backup.Open(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if verb == walPush {
		return store.PushWAL(ctx, args[0])
	}
	return store.FetchWAL(ctx, args[0], args[1])
}

// The archive and restore commands.
const (
	walPush  = "wal-push"
	walFetch = "wal-fetch"
)

// recoveryFatal is the exit status of a wal-fetch that recovery must not
// go past: PostgreSQL takes a restore_command's exit status above 125 (a
// shell's "command not found") as fatal and stops, where any other
// failure means "not archived", the end of the archive.
const recoveryFatal = 126

// verify runs `instance verify` until it ends or SIGTERM, and writes its
// result to standard output and to VERIFY_RESULT_FILE when set (the
// container's termination message). A result that cannot be written
// there is still printed and logged, and the exit code says it.
func verify() int {
	log := instance.NewLogger(os.Getenv(contract.EnvPodName))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	v := instance.Verify(ctx, log)
	out := v.Encode()
	_, _ = os.Stdout.Write(out)
	if file := os.Getenv(contract.EnvVerifyResultFile); file != "" {
		if err := os.WriteFile(file, out, 0o644); err != nil {
			log("writing the result to %s: %v", file, err)
		}
	}
	log("verification %s: %s", v.Result, v.Message)
	return contract.VerificationExitCode[v.Result]
}

// fenceBridge runs the fence bridge (internal/instance, bridge.go) until
// its deadline or SIGTERM; it says on BridgeReadyFD when it streams.
func fenceBridge(args []string) int {
	flags := flag.NewFlagSet(instance.BridgeCommand, flag.ContinueOnError)
	until := flags.Int64("until-mono", 0, "when the fence closes, on CLOCK_MONOTONIC in nanoseconds")
	quorum := flags.String("quorum", "{}", "the quorum the fence confirms at (contract.Quorum, JSON)")
	if err := flags.Parse(args); err != nil || flags.NArg() != 0 {
		usage()
	}
	c, err := instance.ConfigFromEnv()
	log := instance.NewLogger(c.PodName)
	var q contract.Quorum
	if err == nil {
		err = json.Unmarshal([]byte(*quorum), &q)
	}
	if err != nil {
		log("fence bridge: %v", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := instance.RunBridge(ctx, c, *until, q, os.NewFile(instance.BridgeReadyFD, "ready"), log); err != nil {
		log("fence bridge: %v", err)
		return 1
	}
	return 0
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: instance install DEST | run | backup | "+contract.VerifyCommand+" | "+
		walPush+" --config FILE PATH | "+walFetch+" --config FILE NAME DEST | "+
		"stage --major N DEST | upgrade --old-major N --new-major M --staged DEST [--copy] | "+
		"pooler | version | replace --digest HEX | "+instance.BridgeCommand+" --until-mono NS --quorum JSON")
	os.Exit(2)
}

// install copies this executable to dest, whole or not at all.
func install(dest string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(self)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.CreateTemp(filepath.Dir(dest), ".instance-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(out.Name()) }()
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	if err := out.Chmod(0o555); err != nil {
		_ = out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(out.Name(), dest)
}

// runPooler is PID 1 of a pooler pod (internal/pooler) until SIGTERM.
func runPooler() int {
	log := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, time.Now().UTC().Format(time.RFC3339)+" pooler: "+format+"\n", args...)
	}
	c, err := pooler.ConfigFromEnv()
	if err != nil {
		log("%v", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	code, err := pooler.Run(ctx, c, log)
	if err != nil {
		log("%v", err)
	}
	return code
}

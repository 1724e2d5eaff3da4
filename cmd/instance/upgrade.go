package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/instance"
)

// terminationLog is where the kubelet reads a container's termination
// message (the default terminationMessagePath).
const terminationLog = "/dev/termination-log"

// upgrade runs the two commands of a major version upgrade's Job: stage
// (the old image's init container) and upgrade (the new image's
// container). The reason of a failure goes to the termination message, for
// the operator to put in status; the exit code says whether the old data
// is untouched (internal/contract, UpgradeExit*). Success leaves the
// timeline the upgraded data starts on there instead.
func upgrade(verb string, args []string) int {
	flags := flag.NewFlagSet(verb, flag.ContinueOnError)
	major := flags.String("major", "", "stage: the PostgreSQL major of this image")
	oldMajor := flags.String("old-major", "", "upgrade: the major the data is on")
	newMajor := flags.String("new-major", "", "upgrade: the major of this image")
	staged := flags.String("staged", "", "upgrade: where stage put the old major's binaries")
	copyMode := flags.Bool("copy", false, "upgrade: pg_upgrade --copy instead of --link")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	log := instance.NewLogger(os.Getenv(contract.EnvPodName))
	fail := func(err error, code int) int {
		log("%s: %v", verb, err)
		instance.WriteTerminationMessage(terminationLog, err.Error())
		return code
	}
	if verb == "stage" {
		if *major == "" || flags.NArg() != 1 {
			usage()
		}
		if err := instance.StageBinaries(*major, flags.Arg(0)); err != nil {
			return fail(err, 1)
		}
		return 0
	}
	if *oldMajor == "" || *newMajor == "" || *staged == "" || flags.NArg() != 0 {
		usage()
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	timeline, err := instance.Upgrade(ctx, instance.UpgradeConfig{PGData: os.Getenv(contract.EnvPGData),
		OldMajor: *oldMajor, NewMajor: *newMajor, Staged: instance.StagedRoot(*staged, *oldMajor),
		Scratch: os.TempDir(), Copy: *copyMode}, log)
	if ue := (*instance.UpgradeError)(nil); errors.As(err, &ue) {
		return fail(ue, ue.ExitCode())
	}
	if err != nil {
		return fail(err, 1)
	}
	log("upgraded from PostgreSQL %s to %s, on timeline %d", *oldMajor, *newMajor, timeline)
	instance.WriteTerminationMessage(terminationLog, fmt.Sprintf("%s%d", contract.UpgradeTimelinePrefix, timeline))
	return 0
}

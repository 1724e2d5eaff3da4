// kubectl-mydb is the kubectl plugin of MyDatabases: with this binary on
// PATH, `kubectl mydb status NAME` and the other verbs of internal/plugin
// work.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"example.com/myoperator/internal/plugin"
)

func main() {
	// The plugin talks to the user, not to a log: without a logger,
	// controller-runtime's client prints a warning with a stack trace
	// 30 s into a command (a psql session, a --wait).
	ctrllog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := plugin.NewCommand(plugin.Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}).ExecuteContext(ctx)
	stop()
	if err == nil {
		return
	}
	if exit, ok := errors.AsType[*plugin.ExitError](err); ok {
		os.Exit(exit.Code)
	}
	fmt.Fprintln(os.Stderr, "error:", err)
	os.Exit(1)
}

package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// pollInterval is how often --wait reads the MyDatabase.
const pollInterval = time.Second

func newSwitchoverCommand(env *Env) *cobra.Command {
	var waitFor time.Duration
	cmd := &cobra.Command{
		Use:   "switchover NAME [TARGET]",
		Short: "Ask for a planned switchover (spec.switchover); TARGET is a pod such as NAME-1, or the most advanced ready replica",
		Long: `Sets spec.switchover {to: TARGET, requestedAt: now}. The operator makes
the primary hand over to TARGET with no commit lost, and reports on it in
status.switchover (see docs/high-availability.md). With --wait, waits until
status.switchover reports this request Succeeded or Failed.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			target := ""
			if len(args) == 2 {
				target = args[1]
			}
			return env.switchover(cmd.Context(), args[0], target, waitFor)
		},
	}
	cmd.Flags().DurationVar(&waitFor, "wait", 0, "wait up to this long for the switchover to succeed or fail (e.g. --wait=2m)")
	return cmd
}

// switchoverPatch is the merge patch that asks for one switchover.
func switchoverPatch(target string, at time.Time) ([]byte, error) {
	return json.Marshal(map[string]any{"spec": map[string]any{
		"switchover": databasev1alpha1.SwitchoverSpec{To: target, RequestedAt: metav1.NewTime(at.UTC().Truncate(time.Second))},
	}})
}

func (e *Env) switchover(ctx context.Context, name, target string, waitFor time.Duration) error {
	db, err := e.getDB(ctx, name)
	if err != nil {
		return err
	}
	at := e.Now().UTC().Truncate(time.Second)
	patch, err := switchoverPatch(target, at)
	if err != nil {
		return err
	}
	if err := e.c.Patch(ctx, db, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("setting spec.switchover: %w", err)
	}
	to := target
	if to == "" {
		to = "the most advanced ready replica"
	}
	e.printf(e.Stdout, "Switchover of %s/%s to %s requested at %s (spec.switchover).\n", db.Namespace, db.Name, to, at.Format(time.RFC3339))
	if waitFor <= 0 {
		e.printf(e.Stdout, "Follow it with: kubectl mydb status %s -n %s\n", db.Name, db.Namespace)
		return nil
	}
	sw, err := e.waitSwitchover(ctx, name, at, waitFor)
	if err != nil {
		return err
	}
	e.printf(e.Stdout, "Switchover %s: %s -> %s. %s\n", sw.Phase, sw.From, sw.To, sw.Message)
	if sw.Phase == databasev1alpha1.SwitchoverFailed {
		return errors.New("the switchover failed")
	}
	return nil
}

// waitSwitchover waits until status.switchover reports the request made at
// `at` as Succeeded or Failed.
func (e *Env) waitSwitchover(ctx context.Context, name string, at time.Time, timeout time.Duration) (*databasev1alpha1.SwitchoverStatus, error) {
	var last *databasev1alpha1.SwitchoverStatus
	err := wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		db, err := e.getDB(ctx, name)
		if err != nil {
			return false, err
		}
		last = db.Status.Switchover
		return switchoverDone(last, at), nil
	})
	if err != nil {
		state := "status.switchover does not report this request yet"
		if last != nil && last.RequestedAt != nil && last.RequestedAt.Time.Equal(at) {
			state = fmt.Sprintf("status.switchover: %s %s -> %s: %s", last.Phase, last.From, last.To, last.Message)
		}
		return nil, fmt.Errorf("the switchover did not finish within %s (%s)", timeout, state)
	}
	return last, nil
}

// switchoverDone tells whether sw reports the request made at `at` as over.
func switchoverDone(sw *databasev1alpha1.SwitchoverStatus, at time.Time) bool {
	if sw == nil || sw.RequestedAt == nil || !sw.RequestedAt.Time.Equal(at) {
		return false
	}
	return sw.Phase == databasev1alpha1.SwitchoverSucceeded || sw.Phase == databasev1alpha1.SwitchoverFailed
}

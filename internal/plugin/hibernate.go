package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

func newHibernateCommand(env *Env) *cobra.Command {
	var waitFor time.Duration
	var off bool
	cmd := &cobra.Command{
		Use:   "hibernate NAME",
		Short: "Stop every server and keep the data (spec.hibernate); --off starts them again",
		Long: `Sets spec.hibernate to true: the operator moves the primary to ordinal 0,
waits for a running backup, then stops every server cleanly, the primary
last, keeping the volumes, Secrets, Services and WAL archive
(docs/hibernation.md). --off sets it back to false: the servers start again
on the same data with the same primary. With --wait, waits until no server
runs (Hibernated), or, with --off, until the MyDatabase is Ready again.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return env.hibernate(cmd.Context(), args[0], !off, waitFor)
		},
	}
	cmd.Flags().BoolVar(&off, "off", false, "resume: set spec.hibernate to false")
	cmd.Flags().DurationVar(&waitFor, "wait", 0, "wait up to this long for it to finish (e.g. --wait=5m)")
	return cmd
}

func (e *Env) hibernate(ctx context.Context, name string, on bool, waitFor time.Duration) error {
	db, err := e.getDB(ctx, name)
	if err != nil {
		return err
	}
	if db.Spec.Paused {
		return fmt.Errorf("MyDatabase %s/%s is paused (spec.paused): the operator would not stop or start anything", db.Namespace, db.Name)
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"hibernate": on}}) // a map always marshals
	if err := e.c.Patch(ctx, db, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("setting spec.hibernate: %w", err)
	}
	what := "Hibernation"
	if !on {
		what = "Resume"
	}
	e.printf(e.Stdout, "%s of %s/%s requested (spec.hibernate %t).\n", what, db.Namespace, db.Name, on)
	if waitFor <= 0 {
		e.printf(e.Stdout, "Follow it with: kubectl mydb status %s -n %s\n", db.Name, db.Namespace)
		return nil
	}
	generation := db.Generation // after the patch
	state, err := poll(ctx, waitFor, func(ctx context.Context) (bool, string, error) {
		if db, err = e.getDB(ctx, name); err != nil {
			return false, "", err
		}
		done, state := hibernateDone(db, generation, on)
		return done, state, nil
	})
	if err != nil {
		return fmt.Errorf("%s did not finish within %s: %s", what, waitFor, state)
	}
	if on {
		e.printf(e.Stdout, "Hibernated: no server of %s runs; %s resumes as the primary.\n", name, db.Status.Hibernation.Primary)
	} else {
		e.printf(e.Stdout, "Resumed: %s is Ready.\n", name)
	}
	return nil
}

// hibernateDone tells whether the MyDatabase has acted on generation and
// reached what spec.hibernate asks: the phase Hibernated, or Ready.
func hibernateDone(db *databasev1alpha1.MyDatabase, generation int64, on bool) (bool, string) {
	want := databasev1alpha1.PhaseReady
	if on {
		want = databasev1alpha1.PhaseHibernated
	}
	state := fmt.Sprintf("MyDatabase phase %s, observed generation %d of %d", db.Status.Phase, db.Status.ObservedGeneration, generation)
	if h := db.Status.Hibernation; h != nil && h.Message != "" && on {
		state += ": " + h.Message
	}
	return db.Status.ObservedGeneration >= generation && db.Status.Phase == want, state
}

package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"example.com/myoperator/internal/specs"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// RestartedAtAnnotation is the pod annotation restart sets, through
// spec.podAnnotations, as `kubectl rollout restart` does on a Deployment's
// template.
const RestartedAtAnnotation = "kubectl.kubernetes.io/restartedAt"

func newRestartCommand(env *Env) *cobra.Command {
	var waitFor time.Duration
	cmd := &cobra.Command{
		Use:   "restart NAME",
		Short: "Rolling restart: replicas one at a time, then a switchover, then the old primary",
		Long: `Sets spec.podAnnotations["` + RestartedAtAnnotation + `"] to now. The new pod
template makes the operator's rolling update restart the servers one at a
time, only while all are ready: the replicas first, then a switchover to an
updated replica, then the old primary (internal/controller/mydatabase,
rollout.go). With --wait, waits until every pod runs the new template and the
MyDatabase is Ready again.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return env.restart(cmd.Context(), args[0], waitFor)
		},
	}
	cmd.Flags().DurationVar(&waitFor, "wait", 0, "wait up to this long for the restart to finish (e.g. --wait=5m)")
	return cmd
}

// restartPatch is the merge patch that asks for a rolling restart; it adds
// one key to spec.podAnnotations and leaves the others alone.
func restartPatch(at time.Time) ([]byte, error) {
	return json.Marshal(map[string]any{"spec": map[string]any{
		"podAnnotations": map[string]string{RestartedAtAnnotation: at.UTC().Format(time.RFC3339)},
	}})
}

func (e *Env) restart(ctx context.Context, name string, waitFor time.Duration) error {
	db, err := e.getDB(ctx, name)
	if err != nil {
		return err
	}
	if db.Spec.Paused {
		return fmt.Errorf("MyDatabase %s/%s is paused (spec.paused): the operator would not restart anything", db.Namespace, db.Name)
	}
	at := e.Now()
	patch, err := restartPatch(at)
	if err != nil {
		return err
	}
	if err := e.c.Patch(ctx, db, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("setting spec.podAnnotations: %w", err)
	}
	stamp := at.UTC().Format(time.RFC3339)
	e.printf(e.Stdout, "Rolling restart of %s/%s requested (spec.podAnnotations %s=%s).\n", db.Namespace, db.Name, RestartedAtAnnotation, stamp)
	if waitFor <= 0 {
		e.printf(e.Stdout, "Follow it with: kubectl mydb status %s -n %s\n", db.Name, db.Namespace)
		return nil
	}
	generation := db.Generation // after the patch
	state, err := poll(ctx, waitFor, func(ctx context.Context) (bool, string, error) {
		return e.restartDone(ctx, name, generation, stamp)
	})
	if err != nil {
		return fmt.Errorf("the restart did not finish within %s: %s", waitFor, state)
	}
	e.printf(e.Stdout, "Restarted: every pod runs the new template and %s is Ready.\n", name)
	return nil
}

// restartDone tells whether every pod of the MyDatabase runs the template
// that carries stamp and the MyDatabase is Ready for its generation.
func (e *Env) restartDone(ctx context.Context, name string, generation int64, stamp string) (bool, string, error) {
	db, err := e.getDB(ctx, name)
	if err != nil {
		return false, "", err
	}
	if db.Status.ObservedGeneration < generation || db.Status.Phase != databasev1alpha1.PhaseReady {
		return false, fmt.Sprintf("MyDatabase phase %s, observed generation %d of %d", db.Status.Phase, db.Status.ObservedGeneration, generation), nil
	}
	sts := &appsv1.StatefulSet{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Name}, sts); err != nil {
		return false, "", err
	}
	if sts.Spec.Template.Annotations[RestartedAtAnnotation] != stamp || sts.Status.ObservedGeneration < sts.Generation {
		return false, "the StatefulSet does not have the new template yet", nil
	}
	pods, err := e.podsOf(ctx, db)
	if err != nil {
		return false, "", err
	}
	updated := 0
	for i := range pods {
		p := &pods[i]
		if p.Labels[appsv1.ControllerRevisionHashLabelKey] == sts.Status.UpdateRevision && specs.PodReady(p) && p.DeletionTimestamp == nil {
			updated++
		}
	}
	state := fmt.Sprintf("%d of %d pods run the new template and are ready", updated, len(pods))
	return updated == len(pods) && int32(len(pods)) == ptrOr(sts.Spec.Replicas, 1), state, nil
}

// poll calls check every pollInterval until it says done, fails, or
// timeout passes; it returns the state check said last.
func poll(ctx context.Context, timeout time.Duration, check func(context.Context) (bool, string, error)) (string, error) {
	var state string
	err := wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		var done bool
		var err error
		done, state, err = check(ctx)
		return done, err
	})
	return state, err
}

func ptrOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

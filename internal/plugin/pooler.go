package plugin

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

func newPoolerCommand(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pooler",
		Short: "Pause or resume a MyDatabasePooler's traffic (spec.pgbouncer.paused)",
	}
	for _, verb := range []struct {
		name   string
		paused bool
		long   string
	}{
		{"pause", true, `Sets spec.pgbouncer.paused on the MyDatabasePooler NAME: each PgBouncer pod
pauses once the pooler's ConfigMap reaches it (the kubelet refreshes it
within about a minute). Running transactions (in session mode, sessions)
finish; then new ones wait, up to spec.pgbouncer.queryWaitTimeoutSeconds,
with the clients still connected. A switchover needs no pause by hand: a
rw pooler in transaction mode pauses through each by itself.`},
		{"resume", false, `Sets spec.pgbouncer.paused back to false: each PgBouncer pod resumes once the
pooler's ConfigMap reaches it, and the waiting transactions run.`},
	} {
		cmd.AddCommand(&cobra.Command{
			Use:   verb.name + " NAME",
			Short: fmt.Sprintf("Set spec.pgbouncer.paused to %t", verb.paused),
			Long:  verb.long,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return env.pausePooler(cmd.Context(), args[0], verb.paused)
			},
		})
	}
	return cmd
}

func (e *Env) pausePooler(ctx context.Context, name string, paused bool) error {
	if err := e.connect(); err != nil {
		return err
	}
	p := &databasev1alpha1.MyDatabasePooler{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.namespace, Name: name}, p); err != nil {
		return fmt.Errorf("MyDatabasePooler %s/%s: %w", e.namespace, name, err)
	}
	if p.Spec.Paused {
		return fmt.Errorf("MyDatabasePooler %s/%s has spec.paused: the operator would not pass the change on to its pods; set spec.paused to false first", p.Namespace, p.Name)
	}
	if p.Spec.PgBouncer.Paused == paused {
		e.printf(e.Stdout, "MyDatabasePooler %s/%s has spec.pgbouncer.paused %t already.\n", p.Namespace, p.Name, paused)
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"pgbouncer": map[string]any{"paused": paused}}}) // a map always marshals
	if err := e.c.Patch(ctx, p, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("setting spec.pgbouncer.paused: %w", err)
	}
	what, metric := "Pause", 1
	if !paused {
		what, metric = "Resume", 0
	}
	e.printf(e.Stdout, "%s of %s/%s requested (spec.pgbouncer.paused %t): each PgBouncer pod acts on it within about a minute,\n", what, p.Namespace, p.Name, paused)
	e.printf(e.Stdout, "when the pooler's ConfigMap reaches it; its log says so, and its metric pgbouncer_paused{reason=\"hand\"} is %d then.\n", metric)
	return nil
}

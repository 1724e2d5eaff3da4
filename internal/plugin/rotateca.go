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

func newRotateCACommand(env *Env) *cobra.Command {
	var waitFor time.Duration
	cmd := &cobra.Command{
		Use:   "rotate-ca NAME",
		Short: "Ask for a new CA without downtime (spec.tls.caRotation.requestedAt)",
		Long: `Sets spec.tls.caRotation.requestedAt to now. The operator makes a new CA
and trusts it beside the old one in every ca.crt it writes (Trusting), then
issues every certificate again from it and deletes the old key (Reissuing),
then drops the old CA (Succeeded), each step once every server reports the
files before it loaded and spec.tls.caRotation.trustPeriod (10m by default)
has passed: clients that read ca.crt from a Secret must read it again within
that period (docs/security.md, CA rotation). status.tls.caRotation shows the
phase. With --wait, waits until this request Succeeded.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return env.rotateCA(cmd.Context(), args[0], waitFor)
		},
	}
	cmd.Flags().DurationVar(&waitFor, "wait", 0, "wait up to this long for the rotation to succeed (e.g. --wait=30m)")
	return cmd
}

// rotateCAPatch is the merge patch that asks for one CA rotation; it
// leaves spec.tls's other fields and caRotation's maxAge and trustPeriod
// alone.
func rotateCAPatch(at time.Time) ([]byte, error) {
	return json.Marshal(map[string]any{"spec": map[string]any{"tls": map[string]any{
		"caRotation": map[string]string{"requestedAt": caRequest(at)},
	}}})
}

// caRequest is a request as the operator records it (UTC seconds).
func caRequest(at time.Time) string { return at.UTC().Truncate(time.Second).Format(time.RFC3339) }

func (e *Env) rotateCA(ctx context.Context, name string, waitFor time.Duration) error {
	db, err := e.getDB(ctx, name)
	if err != nil {
		return err
	}
	if db.Spec.Paused {
		return fmt.Errorf("MyDatabase %s/%s is paused (spec.paused): the operator would not rotate its CA", db.Namespace, db.Name)
	}
	if st := caRotationOf(db); st != nil && st.Phase != databasev1alpha1.CARotationSucceeded {
		e.printf(e.Stdout, "A CA rotation is under way (%s); this request starts another once it succeeds.\n", st.Phase)
	}
	at := e.Now()
	patch, err := rotateCAPatch(at)
	if err != nil {
		return err
	}
	if err := e.c.Patch(ctx, db, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("setting spec.tls.caRotation.requestedAt: %w", err)
	}
	request := caRequest(at)
	e.printf(e.Stdout, "CA rotation of %s/%s requested (spec.tls.caRotation.requestedAt %s).\n", db.Namespace, db.Name, request)
	if waitFor <= 0 {
		e.printf(e.Stdout, "Follow it with: kubectl mydb status %s -n %s (TLS: CA rotation)\n", db.Name, db.Namespace)
		return nil
	}
	state, err := poll(ctx, waitFor, func(ctx context.Context) (bool, string, error) {
		db, err := e.getDB(ctx, name)
		if err != nil {
			return false, "", err
		}
		done, state := rotateCADone(db, request)
		return done, state, nil
	})
	if err != nil {
		return fmt.Errorf("the CA rotation did not finish within %s: %s", waitFor, state)
	}
	e.printf(e.Stdout, "CA rotated: every certificate of %s comes from the new CA, which every ca.crt carries alone.\n", name)
	return nil
}

// rotateCADone tells whether the rotation of request has succeeded, and
// where it stands.
func rotateCADone(db *databasev1alpha1.MyDatabase, request string) (bool, string) {
	st := caRotationOf(db)
	switch {
	case st == nil || st.Request != request:
		return false, "the operator has not started the rotation of this request yet"
	case st.Phase != databasev1alpha1.CARotationSucceeded:
		return false, fmt.Sprintf("%s: %s", st.Phase, st.Message)
	}
	return true, string(st.Phase)
}

func caRotationOf(db *databasev1alpha1.MyDatabase) *databasev1alpha1.CARotationStatus {
	if db.Status.TLS == nil {
		return nil
	}
	return db.Status.TLS.CARotation
}

package v1alpha1_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestPasswordRotationValidation: spec.passwordRotation takes times, and a
// rotation of the application user's password only with the generated
// Secret, on create and on update.
func TestPasswordRotationValidation(t *testing.T) {
	const at = "2026-11-30T20:00:00Z"
	ctx := context.Background()
	for name, tc := range map[string]struct {
		spec map[string]any
		want string
	}{
		"request not a time":        {map[string]any{"passwordRotation.userRequestedAt": "soon"}, "spec.passwordRotation.userRequestedAt"},
		"user rotation, own Secret": {map[string]any{"credentials.secretName": "mine", "passwordRotation.userRequestedAt": at}, "passwordRotation.userRequestedAt rotates the generated Secret only"},
	} {
		t.Run("create: "+name, func(t *testing.T) {
			err := env.Client.Create(ctx, manifest("rotation-invalid", tc.spec), client.DryRunAll)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("create: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	own := map[string]any{"credentials.secretName": "mine"}
	i := 0
	for name, tc := range map[string]struct {
		from, to map[string]any
		want     string // empty: the update must be accepted
	}{
		"user rotation, own Secret":       {own, map[string]any{"passwordRotation.userRequestedAt": at}, "passwordRotation.userRequestedAt rotates the generated Secret only"},
		"user rotation, generated Secret": {nil, map[string]any{"passwordRotation.userRequestedAt": at}, ""},
	} {
		i++
		t.Run("update: "+name, func(t *testing.T) {
			obj := manifest(fmt.Sprintf("rotation-update-%d", i), tc.from)
			if err := env.Client.Create(ctx, obj); err != nil {
				t.Fatalf("create: %v", err)
			}
			t.Cleanup(func() { _ = env.Client.Delete(ctx, obj) })
			updated := manifest(obj.GetName(), merge(tc.from, tc.to))
			updated.SetResourceVersion(obj.GetResourceVersion())
			err := env.Client.Update(ctx, updated, client.DryRunAll)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("update refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("update: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestCARotationValidation: spec.tls.caRotation takes a time and
// durations; maxAge is at least a day (a shorter one would keep the CA
// rotating), trustPeriod at most 30 days; trustPeriod defaults to 10m.
func TestCARotationValidation(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		spec map[string]any
		want string // empty: accepted
	}{
		"a request":             {map[string]any{"tls.caRotation.requestedAt": "2026-12-06T00:00:00Z"}, ""},
		"a yearly rotation":     {map[string]any{"tls.caRotation.maxAge": "8760h"}, ""},
		"no trust period":       {map[string]any{"tls.caRotation.trustPeriod": "0s"}, ""},
		"request not a time":    {map[string]any{"tls.caRotation.requestedAt": "soon"}, "spec.tls.caRotation.requestedAt"},
		"maxAge under a day":    {map[string]any{"tls.caRotation.maxAge": "1h"}, "caRotation.maxAge must be at least 24h"},
		"trust period too long": {map[string]any{"tls.caRotation.trustPeriod": "1000h"}, "caRotation.trustPeriod must be at most 720h"},
	} {
		t.Run(name, func(t *testing.T) {
			obj := manifest("carotation", tc.spec)
			err := env.Client.Create(ctx, obj, client.DryRunAll)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("create: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	obj := manifest("carotation-default", map[string]any{"tls.caRotation.maxAge": "8760h"})
	if err := env.Client.Create(ctx, obj, client.DryRunAll); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedString(obj.Object, "spec", "tls", "caRotation", "trustPeriod"); got != "10m" {
		t.Errorf("trustPeriod defaulted to %q, want 10m", got)
	}
}

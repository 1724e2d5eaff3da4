package conditions

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

var (
	before = time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	now    = before.Add(time.Minute)
)

func cond(typ string, s metav1.ConditionStatus, reason string, gen int64, at time.Time) metav1.Condition {
	return metav1.Condition{Type: typ, Status: s, Reason: reason, Message: reason + " message",
		ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(at)}
}

// TestSet: each state from nothing and from each other state; the
// conditions as they are written, and as kstatus reads them.
func TestSet(t *testing.T) {
	reconciling := []metav1.Condition{cond(Reconciling, metav1.ConditionTrue, "Working", 1, before),
		cond(Ready, metav1.ConditionFalse, "Working", 1, before)}
	stalled := []metav1.Condition{cond(Stalled, metav1.ConditionTrue, "Stuck", 1, before),
		cond(Ready, metav1.ConditionFalse, "Stuck", 1, before)}
	current := []metav1.Condition{cond(Ready, metav1.ConditionTrue, "Done", 1, before)}
	for name, tc := range map[string]struct {
		from    []metav1.Condition
		summary Summary
		want    []metav1.Condition
		kstatus status.Status
	}{
		"new, in progress": {nil, Summary{InProgress, "Working", "Working message"},
			[]metav1.Condition{cond(Reconciling, metav1.ConditionTrue, "Working", 2, now), cond(Ready, metav1.ConditionFalse, "Working", 2, now)},
			status.InProgressStatus},
		"new, stalled": {nil, Summary{Failed, "Stuck", "Stuck message"},
			[]metav1.Condition{cond(Stalled, metav1.ConditionTrue, "Stuck", 2, now), cond(Ready, metav1.ConditionFalse, "Stuck", 2, now)},
			status.FailedStatus},
		"new, current": {nil, Summary{Current, "Done", "Done message"},
			[]metav1.Condition{cond(Ready, metav1.ConditionTrue, "Done", 2, now)}, status.CurrentStatus},
		"new, held": {nil, Summary{Held, "Paused", "Paused message"},
			[]metav1.Condition{cond(Ready, metav1.ConditionFalse, "Paused", 2, now)}, status.InProgressStatus},
		"in progress, still: the transition times hold": {reconciling, Summary{InProgress, "Other", "Other message"},
			[]metav1.Condition{cond(Reconciling, metav1.ConditionTrue, "Other", 2, before), cond(Ready, metav1.ConditionFalse, "Other", 2, before)},
			status.InProgressStatus},
		"in progress, then stalled": {reconciling, Summary{Failed, "Stuck", "Stuck message"},
			[]metav1.Condition{cond(Ready, metav1.ConditionFalse, "Stuck", 2, before), cond(Stalled, metav1.ConditionTrue, "Stuck", 2, now)},
			status.FailedStatus},
		"stalled, then current": {stalled, Summary{Current, "Done", "Done message"},
			[]metav1.Condition{cond(Ready, metav1.ConditionTrue, "Done", 2, now)}, status.CurrentStatus},
		"current, then in progress": {current, Summary{InProgress, "Working", "Working message"},
			[]metav1.Condition{cond(Ready, metav1.ConditionFalse, "Working", 2, now), cond(Reconciling, metav1.ConditionTrue, "Working", 2, now)},
			status.InProgressStatus},
		"stalled, then held": {stalled, Summary{Held, "Paused", "Paused message"},
			[]metav1.Condition{cond(Ready, metav1.ConditionFalse, "Paused", 2, before)}, status.InProgressStatus},
	} {
		t.Run(name, func(t *testing.T) {
			got := append([]metav1.Condition(nil), tc.from...)
			Set(&got, 2, now, tc.summary)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			if k := kstatusOf(t, got); k != tc.kstatus {
				t.Errorf("kstatus %s, want %s", k, tc.kstatus)
			}
		})
	}
}

// kstatusOf is how kubectl wait, Flux and Argo CD read an object of
// generation 2, fully observed, with these conditions.
func kstatusOf(t *testing.T, conds []metav1.Condition) status.Status {
	t.Helper()
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata"`
		Status            struct {
			ObservedGeneration int64              `json:"observedGeneration"`
			Conditions         []metav1.Condition `json:"conditions"`
		} `json:"status"`
	}{TypeMeta: metav1.TypeMeta{APIVersion: "example.com/v1", Kind: "Thing"},
		ObjectMeta: metav1.ObjectMeta{Name: "x", Generation: 2}})
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: raw}
	list := make([]any, 0, len(conds))
	for _, c := range conds {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&c)
		if err != nil {
			t.Fatal(err)
		}
		list = append(list, m)
	}
	if err := unstructured.SetNestedField(u.Object, int64(2), "status", "observedGeneration"); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedSlice(u.Object, list, "status", "conditions"); err != nil {
		t.Fatal(err)
	}
	res, err := status.Compute(u)
	if err != nil {
		t.Fatal(err)
	}
	return res.Status
}

// TestCauseIsAnError: a Cause stops a pass as an error and is found again
// through the wrapping of the functions it returns through.
func TestCauseIsAnError(t *testing.T) {
	err := fmt.Errorf("aligning: %w", &Cause{"Stuck", "do this"})
	var c *Cause
	if !errors.As(err, &c) || c.Reason != "Stuck" || c.Error() != "do this" {
		t.Errorf("errors.As gave %+v from %v", c, err)
	}
}

// TestTheAPINamesTheSameTypes: users read the types by the API's names.
func TestTheAPINamesTheSameTypes(t *testing.T) {
	got := []string{databasev1alpha1.ConditionReady, databasev1alpha1.ConditionReconciling, databasev1alpha1.ConditionStalled}
	if diff := cmp.Diff([]string{Ready, Reconciling, Stalled}, got); diff != "" {
		t.Errorf("the API's condition types (-want +got):\n%s", diff)
	}
}

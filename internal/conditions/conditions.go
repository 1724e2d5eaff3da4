// Package conditions says, in one way for every kind the operator owns,
// what a reconcile pass concluded: the kstatus conditions Ready,
// Reconciling and Stalled, as Flux's runtime/conditions does.
//
//   - Ready is always present: True once what the spec asks for is done.
//   - Reconciling is present (True) only while the operator works towards
//     the spec; Ready is then False.
//   - Stalled is present (True) only when a person must act; Ready is then
//     False, and the message says what to do.
//
// kstatus (and so kubectl wait, Flux and Argo CD) reads an object with
// Ready True and neither of the others as Current, with Reconciling as
// InProgress and with Stalled as Failed. A controller computes one
// Summary per pass and Sets it: the three conditions never contradict
// each other, and a pass that concludes what the last one did changes
// nothing (no write).
//
// The package knows no kind of ours: the reasons are the API's
// constants, passed in.
package conditions

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The condition types. kstatus gives them their meaning, so the names
// are its own (api/v1alpha1 declares the same strings for users).
const (
	Ready       = "Ready"
	Reconciling = "Reconciling"
	Stalled     = "Stalled"
)

// State is what a pass concluded about an object, in kstatus's terms.
type State int

const (
	// Held: the operator does not act on the spec on purpose (paused,
	// being deleted): Ready False, neither Reconciling nor Stalled. The
	// zero State, so that a Summary left unset never claims Ready.
	Held State = iota
	// Current: what the spec asks for is done: Ready True.
	Current
	// InProgress: the operator works towards the spec, or retries a
	// transient error: Ready False, Reconciling True.
	InProgress
	// Failed: only a person can unblock the object: Ready False, Stalled
	// True.
	Failed
)

// Summary is what a pass concluded: a State and its reason and message,
// which every condition it sets carries.
type Summary struct {
	State   State
	Reason  string
	Message string
}

// Set writes s into conds: Ready, and Reconciling or Stalled when s's
// state calls for it (the other is removed). Each condition carries
// generation, the generation it speaks of, and now as its transition
// time when its status changes; a condition whose status holds keeps its
// transition time, so that an unchanged pass compares equal.
//
// Reconciling or Stalled is set before Ready: a new object's conditions
// list them in that order.
func Set(conds *[]metav1.Condition, generation int64, now time.Time, s Summary) {
	set := func(typ string, status metav1.ConditionStatus) {
		meta.SetStatusCondition(conds, metav1.Condition{Type: typ, Status: status, Reason: s.Reason,
			Message: s.Message, ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now)})
	}
	for typ, state := range map[string]State{Reconciling: InProgress, Stalled: Failed} {
		if s.State != state {
			meta.RemoveStatusCondition(conds, typ)
		}
	}
	switch s.State {
	case InProgress:
		set(Reconciling, metav1.ConditionTrue)
	case Failed:
		set(Stalled, metav1.ConditionTrue)
	}
	ready := metav1.ConditionFalse
	if s.State == Current {
		ready = metav1.ConditionTrue
	}
	set(Ready, ready)
}

// Cause is why a pass did not get to Current: a reason constant of the
// API and a message that says what to do, or what is awaited. As an
// error, it stops a pass that a person must unblock (Failed): the
// controller reports it rather than retrying with backoff.
type Cause struct{ Reason, Message string }

func (c *Cause) Error() string { return c.Message }

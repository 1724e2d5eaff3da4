package instance

import "testing"

// TestDeclaredKeeper: the worker takes the latest of the turns' offers,
// never an older one, and the report carries its outcome only while this
// instance is the primary.
func TestDeclaredKeeper(t *testing.T) {
	k := newDeclaredKeeper()
	k.offer(declaredWork{primary: true, annotation: "first"})
	k.offer(declaredWork{primary: true, annotation: "second"})
	if w := <-k.work; w.annotation != "second" {
		t.Errorf("the worker took %q, want the latest offer", w.annotation)
	}
	select {
	case w := <-k.work:
		t.Errorf("a second offer %q waits: the worker would apply an older declaration", w.annotation)
	default:
	}
	if outcome, of := k.outcome(true); outcome != nil || of != "" {
		t.Errorf("an outcome before any pass: %v %q", outcome, of)
	}
	k.last.Store(&declaredOutcome{of: "digest", outcome: map[string]string{"role/analyst": ""}})
	if outcome, of := k.outcome(false); outcome != nil || of != "" {
		t.Errorf("a replica reports %v %q", outcome, of)
	}
	outcome, of := k.outcome(true)
	if of != "digest" || len(outcome) != 1 {
		t.Errorf("the primary reports %v %q", outcome, of)
	}
	outcome["role/analyst"] = "changed by the reader"
	if again, _ := k.outcome(true); again["role/analyst"] != "" {
		t.Error("the report shares the worker's map")
	}
}

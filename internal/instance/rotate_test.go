package instance

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParsePasswordSources(t *testing.T) {
	for in, want := range map[string][]passwordSource{
		"":                               nil,
		"app=a-rotation":                 {{"app", "a-rotation"}},
		"app=mine,replicator=r-rotation": {{"app", "mine"}, {"replicator", "r-rotation"}},
	} {
		got, err := parsePasswordSources(in)
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(passwordSource{})); diff != "" {
			t.Errorf("%q (-want +got):\n%s", in, diff)
		}
	}
	for _, bad := range []string{"app", "=x", "app=", "app=x,,replicator"} {
		if _, err := parsePasswordSources(bad); err == nil && bad != "app=x,,replicator" {
			t.Errorf("%q accepted", bad)
		}
	}
}

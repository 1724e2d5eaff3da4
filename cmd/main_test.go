package main

import (
	"slices"
	"testing"
)

func TestSplitNamespaces(t *testing.T) {
	for in, want := range map[string][]string{
		"":                 nil,
		"team-a":           {"team-a"},
		" team-a , team-b": {"team-a", "team-b"},
		"team-a,,team-a,":  {"team-a"},
	} {
		if got := splitNamespaces(in); !slices.Equal(got, want) {
			t.Errorf("splitNamespaces(%q) = %q, want %q", in, got, want)
		}
	}
}

package main

import "testing"

func TestScaleRequested(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"-n", "500"}, false},
		{[]string{"-scale"}, true},
		{[]string{"-rounds", "1", "--scale"}, true},
		{[]string{"-scale=true"}, true},
		{[]string{"--scale=1"}, true},
		{[]string{"-scale=false"}, false},
		{[]string{"-scaled"}, false},
		{[]string{"--", "-scale"}, false},
	} {
		if got := scaleRequested(c.args); got != c.want {
			t.Errorf("scaleRequested(%q) = %t, want %t", c.args, got, c.want)
		}
	}
}

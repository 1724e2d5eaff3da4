package contract

import (
	"maps"
	"testing"
)

func TestPoolerApp(t *testing.T) {
	for _, tc := range []struct {
		app    string
		id     string
		paused bool
		ok     bool
	}{
		{PoolerApp("1a2b3c4d", false), "1a2b3c4d", false, true},
		{PoolerApp("1a2b3c4d", true), "1a2b3c4d", true, true},
		{PoolerApp("", false), "", false, true}, // a pooler manager before IDs
		{PoolerApp("", true), "", true, true},
		{PoolerProbeApp, "", false, false}, // looks for a new primary: not a control connection
		{"mydatabase-pooler resuming", "", false, false},
		{"psql", "", false, false},
		{"mydatabase-pooler 1A2B3C4D", "", false, false},
	} {
		id, paused, ok := ParsePoolerApp(tc.app)
		if id != tc.id || paused != tc.paused || ok != tc.ok {
			t.Errorf("ParsePoolerApp(%q) = %q, %v, %v; want %q, %v, %v", tc.app, id, paused, ok, tc.id, tc.paused, tc.ok)
		}
	}
	if id := PoolerID("0f6d2e3c-9a51-4c5e-8f5e-3b1a2c4d5e6f"); id != "0f6d2e3c" {
		t.Errorf("PoolerID = %q", id)
	}
	if app := PoolerApp(PoolerID("0f6d2e3c-9a51-4c5e-8f5e-3b1a2c4d5e6f"), true); len(app) > 63 {
		t.Errorf("%q is longer than an application_name may be", app)
	}
}

func TestPoolersPaused(t *testing.T) {
	paused := map[string]int{"0f6d2e3c": 2, "9a51aaaa": 1, "": 1}
	value := FormatPoolersPaused(paused)
	if value != "1,0f6d2e3c=2,9a51aaaa=1" {
		t.Errorf("FormatPoolersPaused = %q", value)
	}
	if got := ParsePoolersPaused(value); !maps.Equal(got, paused) {
		t.Errorf("ParsePoolersPaused(%q) = %v, want %v", value, got, paused)
	}
	// What a primary before pooler IDs wrote, none, and garbage.
	for value, want := range map[string]map[string]int{
		"2":              {"": 2},
		"0":              {},
		"":               {},
		"x=1,0f6d2e3c=z": {},
	} {
		if got := ParsePoolersPaused(value); !maps.Equal(got, want) {
			t.Errorf("ParsePoolersPaused(%q) = %v, want %v", value, got, want)
		}
	}
}

package contract

import "testing"

// TestPodOrdinal: a pod is a server of set only by its name; no name reads
// as two MyDatabases' pods.
func TestPodOrdinal(t *testing.T) {
	for _, tc := range []struct {
		set, pod string
		ordinal  int32
		ok       bool
	}{
		{"db", "db-0", 0, true},
		{"db", "db-12", 12, true},
		{"db", "db-1-0", 0, false}, // MyDatabase db-1's
		{"db-1", "db-1-0", 0, true},
		{"db-1", "db-10", 0, false}, // MyDatabase db's
		{"db", "db-01", 0, false},
		{"db", "db-+1", 0, false},
		{"db", "db--1", 0, false},
		{"db", "db-", 0, false},
		{"db", "db-4294967296", 0, false},
		{"db", "db-0-pooler", 0, false},
		{"db", "other-0", 0, false},
		{"db", "db0", 0, false},
	} {
		if n, ok := PodOrdinal(tc.set, tc.pod); n != tc.ordinal || ok != tc.ok {
			t.Errorf("PodOrdinal(%q, %q) = %d, %v; want %d, %v", tc.set, tc.pod, n, ok, tc.ordinal, tc.ok)
		}
	}
	for pod, set := range map[string]string{"db-0": "db", "db-1-10": "db-1", "db": "", "db-x": "", "db-01": ""} {
		if got := PodSet(pod); got != set {
			t.Errorf("PodSet(%q) = %q, want %q", pod, got, set)
		}
	}
}

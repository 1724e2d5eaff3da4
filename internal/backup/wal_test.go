package backup

import (
	"testing"
)

func TestTimelineOf(t *testing.T) {
	for name, want := range map[string]int64{
		"000000010000000000000003":                 1,
		"0000000A0000000000000003.partial":         10,
		"0000000B.history":                         11,
		"000000030000000000000004.00000028.backup": 3,
		"backup.json":                              0,
		"0000000G.history":                         0,
		"00000002":                                 0,
	} {
		if got := timelineOf(name); got != want {
			t.Errorf("timelineOf(%q) = %d, want %d", name, got, want)
		}
	}
}

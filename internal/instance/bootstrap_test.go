package instance

import "testing"

func TestTimelineEnd(t *testing.T) {
	history := "1\t0/3000158\tno recovery target specified\n\n2\t0/5086BF0\tno recovery target specified\n"
	for tli, want := range map[int64]struct {
		end   uint64
		found bool
	}{1: {0x3000158, true}, 2: {0x5086BF0, true}, 3: {0, false}} {
		end, found := timelineEnd(history, tli)
		if end != want.end || found != want.found {
			t.Errorf("timeline %d: ended at %x (%t), want %x (%t)", tli, end, found, want.end, want.found)
		}
	}
}

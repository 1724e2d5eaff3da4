package backup

import (
	"slices"
	"testing"
	"time"
)

func TestExpired(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	// Daily backups, the oldest 10 days ago.
	var list []Manifest
	for i := 10; i >= 0; i-- {
		list = append(list, Manifest{ID: time.Duration(i).String(), FinishedAt: now.Add(-time.Duration(i) * day)})
	}
	ids := func(ms []Manifest) []string {
		out := make([]string, 0, len(ms))
		for _, m := range ms {
			out = append(out, m.ID)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		r    Retention
		want []string // the IDs deleted: days ago, as a Duration's String
	}{
		{"no rule keeps everything", Retention{}, nil},
		{"keep 3", Retention{Keep: 3}, []string{"10ns", "9ns", "8ns", "7ns", "6ns", "5ns", "4ns", "3ns"}},
		// A window of 3.5 days reaches back to 3.5 days ago: the backups of
		// days 3..0, and day 4's, from which a restore to the window's
		// start begins.
		{"window 84h", Retention{Window: 84 * time.Hour}, []string{"10ns", "9ns", "8ns", "7ns", "6ns", "5ns"}},
		// A backup that finished at the window's start is not one a restore
		// to that time starts from (Choose takes those that finished
		// before): the one before it is kept too.
		{"a window on a backup's end", Retention{Window: 2 * day}, []string{"10ns", "9ns", "8ns", "7ns", "6ns", "5ns", "4ns"}},
		{"both: either rule keeps", Retention{Window: day, Keep: 5}, []string{"10ns", "9ns", "8ns", "7ns", "6ns", "5ns"}},
		{"the newest is always kept", Retention{Window: time.Hour}, []string{"10ns", "9ns", "8ns", "7ns", "6ns", "5ns", "4ns", "3ns", "2ns"}},
		{"keep more than there are", Retention{Keep: 50}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ids(tc.r.Expired(list, now)); !slices.Equal(got, tc.want) {
				t.Errorf("deleted %v, want %v", got, tc.want)
			}
		})
	}
	if got := (Retention{Keep: 1}).Expired([]Manifest{{ID: "only"}}, now); len(got) != 0 {
		t.Errorf("the only backup deleted: %v", got)
	}
}

func TestParseWindow(t *testing.T) {
	for in, want := range map[string]time.Duration{"7d": 7 * 24 * time.Hour, "36h": 36 * time.Hour} {
		if got, err := ParseWindow(in); err != nil || got != want {
			t.Errorf("ParseWindow(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "7", "d", "0d", "-1h", "7w", "1.5d"} {
		if _, err := ParseWindow(in); err == nil {
			t.Errorf("ParseWindow(%q) accepted", in)
		}
	}
}

func TestWALFileAndPruning(t *testing.T) {
	for _, tc := range []struct {
		tl   int64
		lsn  string
		want string
	}{
		{1, "0/2000028", "000000010000000000000002"},
		{2, "0/FF000000", "0000000200000000000000FF"},
		{3, "1/0", "000000030000000100000000"},
		{3, "A/3E000060", "000000030000000A0000003E"},
	} {
		if got, err := WALFile(tc.tl, tc.lsn); err != nil || got != tc.want {
			t.Errorf("WALFile(%d, %s) = %s, %v; want %s", tc.tl, tc.lsn, got, err, tc.want)
		}
	}
	first := "000000020000000000000010"
	for name, want := range map[string]bool{
		"00000001000000000000000F":                 true,  // before, an older timeline
		"00000002000000000000000F.partial":         true,  // before
		"00000001000000000000000A.00000028.backup": true,  // a backup history file before
		"000000010000000000000010":                 false, // the same position
		"000000030000000000000011":                 false, // after
		"00000002.history":                         false, // history files stay
		"0000000100000001000000FF":                 false, // a later "log" number
		"backup.json":                              false,
	} {
		if got := segmentBefore(name, first); got != want {
			t.Errorf("segmentBefore(%s) = %t, want %t", name, got, want)
		}
	}
	for _, tc := range []struct {
		names         []string
		last          string
		missing, next string
	}{
		{[]string{"000000020000000000000010.zst", "000000020000000000000011.zst"}, "000000020000000000000010", "", ""}, // no hole
		{[]string{"000000020000000000000010.zst"}, "000000020000000000000010", "", ""},                                 // the end
		{[]string{"000000020000000000000013.zst", "000000020000000000000012.zst"}, "000000020000000000000010", "000000020000000000000011", "000000020000000000000012"},
		{[]string{"0000000200000001000000FF.zst", "000000020000000200000001.zst"}, "0000000200000001000000FF", "000000020000000200000000", "000000020000000200000001"}, // across a "log" number
		{[]string{"000000020000000200000000.zst"}, "0000000200000001000000FF", "", ""},
		{[]string{"000000030000000000000012.zst", "000000010000000000000013.zst"}, "000000020000000000000010", "", ""}, // other timelines
		{[]string{"000000020000000000000012.partial.zst", "000000020000000000000012.00000028.backup.zst", "00000002.history.zst"}, "000000020000000000000010", "", ""},
		{[]string{"000000020000000000000012.zst.age"}, "000000020000000000000010", "000000020000000000000011", "000000020000000000000012"},
	} {
		if missing, next := gapAfter(tc.names, tc.last); missing != tc.missing || next != tc.next {
			t.Errorf("gapAfter(%v, %s) = %q, %q; want %q, %q", tc.names, tc.last, missing, next, tc.missing, tc.next)
		}
	}
}

package backup

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestReadyAfter: the segments pushed ahead are those after the file that
// PostgreSQL marked ready, in order, at most n; never a history, backup
// history or partial file, nor one already archived (.done).
func TestReadyAfter(t *testing.T) {
	wal := t.TempDir()
	status := filepath.Join(wal, "archive_status")
	if err := os.Mkdir(status, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{
		"000000010000000000000001.done", "000000010000000000000002.ready", "000000010000000000000003.ready",
		"00000002.history.ready", "000000010000000000000004.00000028.backup.ready", "000000010000000000000005.partial.ready",
		"000000010000000000000006.done", "000000010000000000000007.ready", "000000010000000000000008.ready",
		"000000020000000000000008.ready",
	} {
		if err := os.WriteFile(filepath.Join(status, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(wal, "000000010000000000000002")
	for n, want := range map[int][]string{
		0: nil,
		1: {"000000010000000000000003"},
		3: {"000000010000000000000003", "000000010000000000000007", "000000010000000000000008"},
		9: {"000000010000000000000003", "000000010000000000000007", "000000010000000000000008", "000000020000000000000008"},
	} {
		var got []string
		for _, p := range readyAfter(file, n) {
			if filepath.Dir(p) != wal {
				t.Errorf("%s is not beside %s", p, file)
			}
			got = append(got, filepath.Base(p))
		}
		if !slices.Equal(got, want) {
			t.Errorf("readyAfter(%d) = %v, want %v", n, got, want)
		}
	}
	if got := readyAfter(filepath.Join(t.TempDir(), "000000010000000000000002"), 3); got != nil {
		t.Errorf("without archive_status: %v", got)
	}
}

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

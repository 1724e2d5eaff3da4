package instance

import (
	"strings"
	"testing"
	"time"
)

// TestRestoreProgress: a restore reports the last WAL file fetched, and
// is stalled once recovery has asked for the same missing file for
// restoreStallAfter, as a server in standby mode would forever.
func TestRestoreProgress(t *testing.T) {
	at := time.Unix(1_000_000, 0)
	p := restoreProgress{id: "20261203T120000Z"}
	st := p.see(fetchRecord{Name: "000000010000000000000004", Found: true}, at)
	if st.Stalled || st.LastWAL != "000000010000000000000004" || !strings.Contains(st.Message, "last fetched WAL file 000000010000000000000004") {
		t.Fatalf("after a fetch: %+v", st)
	}
	missing := fetchRecord{Name: "000000010000000000000005"}
	st = p.see(missing, at.Add(5*time.Second))
	if st.Stalled || st.LastWAL != "000000010000000000000004" || !strings.Contains(st.Message, "does not hold") {
		t.Fatalf("a file the archive does not hold, just now: %+v", st)
	}
	st = p.see(missing, at.Add(5*time.Second+restoreStallAfter))
	if !st.Stalled || !strings.Contains(st.Message, "no new WAL file for 1m0s") || !strings.Contains(st.Message, "000000010000000000000005") {
		t.Fatalf("asked for the same missing file for %s: %+v", restoreStallAfter, st)
	}
	st = p.see(fetchRecord{Name: "000000010000000000000005", Found: true}, at.Add(2*restoreStallAfter))
	if st.Stalled || st.LastWAL != "000000010000000000000005" {
		t.Fatalf("the file arrived: %+v", st)
	}
}

func TestMajorOfVersion(t *testing.T) {
	for out, want := range map[string]string{
		"postgres (PostgreSQL) 17.6 (Debian 17.6-1.pgdg120+1)\n": "17",
		"postgres (PostgreSQL) 15.10 (Debian 15.10-0+deb12u1)\n": "15",
		"postgres (PostgreSQL) 18beta1\n":                        "18",
		"postgres (PostgreSQL) 16 devel\n":                       "16",
		"command not found":                                      "",
	} {
		got, err := majorOfVersion(out)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("majorOfVersion(%q) = %q, %v; want %q", out, got, err, want)
		}
	}
}

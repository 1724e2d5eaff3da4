package backup

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestChoose(t *testing.T) {
	at := func(h int) time.Time { return time.Date(2026, 12, 1, h, 0, 0, 0, time.UTC) }
	// a: before a major upgrade's time (no major recorded), b of 15, c and
	// d of 17.
	backups := []Manifest{{ID: "a", FinishedAt: at(1)}, {ID: "b", FinishedAt: at(2), Major: "15"},
		{ID: "c", FinishedAt: at(3), Major: "17"}, {ID: "d", FinishedAt: at(4), Major: "17"}}
	for name, tc := range map[string]struct {
		id     string
		target time.Time
		major  string
		want   string // "" for ErrNoBackup
	}{
		"the latest":                                {"", time.Time{}, "", "d"},
		"the latest before the target":              {"", at(2).Add(time.Minute), "", "b"},
		"none before the target":                    {"", at(1), "", ""},
		"by id":                                     {"a", time.Time{}, "", "a"},
		"an id that does not exist":                 {"z", time.Time{}, "", ""},
		"by id, whatever the target time":           {"c", at(1), "", "c"},
		"the latest of the major":                   {"", time.Time{}, "15", "b"},
		"one of no recorded major fits any":         {"", at(2), "17", "a"},
		"none of the major before the target":       {"", at(3), "16", "a"},
		"by id, of another major":                   {"c", time.Time{}, "15", ""},
		"the latest of the major before the target": {"", at(4), "17", "c"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := Choose(backups, tc.id, tc.target, tc.major)
			if tc.want == "" {
				if !errors.Is(err, ErrNoBackup) {
					t.Fatalf("chose %q (err %v), want ErrNoBackup", got.ID, err)
				}
				return
			}
			if err != nil || got.ID != tc.want {
				t.Fatalf("chose %q (err %v), want %q", got.ID, err, tc.want)
			}
		})
	}
}

// TestUntarStaysInside: an archive entry that would land outside the
// directory is refused.
func TestUntarStaysInside(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range []string{"PG_VERSION", "../escaped"} {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: 2, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte("15")); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	err := untar(tar.NewReader(&buf), t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "escapes") {
		t.Fatalf("untar of ../escaped: %v, want it refused", err)
	}
}

// TestUntarLeavesOutWhatMustNotSurvive: a base backup taken on a standby
// holds its standby.signal; the restored data directory must not, nor the
// other files a restore leaves out, while everything else arrives.
func TestUntarLeavesOutWhatMustNotSurvive(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	entries := []struct {
		name string
		dir  bool
	}{
		{"PG_VERSION", false}, {"backup_label", false}, {"standby.signal", false}, {"recovery.signal", false},
		{"postmaster.pid", false}, {"postmaster.opts", false}, {"postgresql.auto.conf", false},
		{"global", true}, {"global/pg_control", false},
		{"pg_wal", true}, {"pg_wal/archive_status", true}, {"pg_wal/000000010000000000000003", false},
		{"pg_replslot", true}, {"pg_replslot/member_1", true}, {"pg_replslot/member_1/state", false},
	}
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o600, Typeflag: tar.TypeReg, Size: 1}
		if e.dir {
			h = &tar.Header{Name: e.name + "/", Mode: 0o700, Typeflag: tar.TypeDir}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if !e.dir {
			if _, err := tw.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := untar(tar.NewReader(&buf), dir); err != nil {
		t.Fatal(err)
	}
	var got []string
	err := filepath.WalkDir(dir, func(path string, _ os.DirEntry, err error) error {
		if rel, _ := filepath.Rel(dir, path); rel != "." {
			got = append(got, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"PG_VERSION", "backup_label", "global", "global/pg_control", "pg_replslot", "pg_wal",
		"pg_wal/archive_status", "postgresql.auto.conf"}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("restored %q, want %q", got, want)
	}
}

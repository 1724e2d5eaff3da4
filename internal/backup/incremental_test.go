package backup

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// chainOf is backups named a, b, c, ... finished a day apart, each built
// on the backup its parents entry names ("" for a full one), of major 17
// with their backup_manifest kept.
func chainOf(parents ...string) []Manifest {
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var out []Manifest
	for i, p := range parents {
		out = append(out, Manifest{ID: string(rune('a' + i)), Parent: p, Major: "17", PGManifest: true,
			FinishedAt: start.Add(time.Duration(i) * 24 * time.Hour)})
	}
	return out
}

func idsOf(ms []Manifest) string {
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.ID)
	}
	return strings.Join(ids, ",")
}

func TestNextParent(t *testing.T) {
	noManifest := chainOf("", "a")
	noManifest[1].PGManifest = false
	upgraded := chainOf("", "a")
	upgraded[0].Major, upgraded[1].Major = "15", "15"
	for _, tc := range []struct {
		name      string
		backups   []Manifest
		fullEvery int
		major     string
		parent    string // "" : full
		why       string // part of the reason a backup is full
	}{
		{"off", chainOf(""), 0, "17", "", ""},
		{"a chain grows on its newest", chainOf("", "a"), 4, "17", "b", ""},
		{"a chain of fullEvery backups ends", chainOf("", "a", "b", "c"), 4, "17", "", "holds 4 backups"},
		{"the next chain starts after a full", chainOf("", "a", "b", "c", ""), 4, "17", "e", ""},
		{"the first backup", nil, 4, "17", "", "first backup of PostgreSQL 17"},
		{"PostgreSQL 15", chainOf(""), 4, "15", "", "PostgreSQL 15 takes full backups only"},
		{"PostgreSQL 16", chainOf(""), 4, "16", "", "need PostgreSQL 17"},
		{"no backup of this major (before a major upgrade)", upgraded, 4, "17", "", "first backup of PostgreSQL 17"},
		{"no backup_manifest kept", noManifest, 4, "17", "", "no backup_manifest of the newest backup, b"},
		{"a chain the store lacks a backup of", chainOf("", "x"), 4, "17", "", "which the store does not hold"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent, why := NextParent(tc.backups, tc.fullEvery, tc.major)
			got := ""
			if parent != nil {
				got = parent.ID
			}
			if got != tc.parent || !strings.Contains(why, tc.why) || (tc.why == "" && why != "") {
				t.Errorf("parent %q, why %q; want %q, %q", got, why, tc.parent, tc.why)
			}
		})
	}
}

func TestChain(t *testing.T) {
	backups := chainOf("", "a", "b", "", "d")
	for m, want := range map[int]string{0: "a", 2: "a,b,c", 3: "d", 4: "d,e"} {
		if got, err := Chain(backups, backups[m]); err != nil || idsOf(got) != want {
			t.Errorf("Chain(%s) = %s, %v; want %s", backups[m].ID, idsOf(got), err, want)
		}
	}
	if _, err := Chain(backups[1:], backups[2]); !errors.Is(err, ErrNoBackup) || !strings.Contains(err.Error(), "incremental on backup a") {
		t.Errorf("a chain without its full backup: %v", err)
	}
	// A store someone else can write may hold manifests that loop.
	loop := []Manifest{{ID: "a", Parent: "b"}, {ID: "b", Parent: "a"}}
	if _, err := Chain(loop, loop[0]); !errors.Is(err, ErrNoBackup) {
		t.Errorf("a loop: %v", err)
	}
}

func TestExpiredKeepsWhatKeptBackupsBuildOn(t *testing.T) {
	// Two chains, a-b-c and d-e, a day apart each; day 4 (e) is now.
	backups := chainOf("", "a", "b", "", "d")
	now := backups[4].FinishedAt
	for _, tc := range []struct {
		name string
		r    Retention
		want string // deleted
	}{
		{"keep 1: the newest and its full backup", Retention{Keep: 1}, "a,b,c"},
		{"keep 3: c, d, e and all c builds on", Retention{Keep: 3}, ""},
		{"a window that reaches b: a with it", Retention{Window: 60 * time.Hour}, ""},
		{"a window that reaches d: the first chain goes", Retention{Window: 12 * time.Hour}, "a,b,c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expired := tc.r.Expired(backups, now)
			if idsOf(expired) != tc.want {
				t.Errorf("deleted %s, want %s", idsOf(expired), tc.want)
			}
			for _, m := range backups {
				if slices.Contains(expired, m) {
					continue
				}
				if _, err := Chain(slices.DeleteFunc(slices.Clone(backups), func(b Manifest) bool { return slices.Contains(expired, b) }), m); err != nil {
					t.Errorf("kept backup %s no longer restores: %v", m.ID, err)
				}
			}
		})
	}
}

func TestReadPGManifest(t *testing.T) {
	small := `{"PostgreSQL-Backup-Manifest-Version": 2, "WAL-Ranges": [{"Timeline": 3, "Start-LSN": "0/2000028", "End-LSN": "0/2000100"}]}`
	var f streamFacts
	if err := f.readPGManifest(strings.NewReader(small)); err != nil || string(f.pgManifest) != small || f.Ranges[0].Timeline != 3 {
		t.Fatalf("small manifest: %v, kept %d bytes, ranges %+v", err, len(f.pgManifest), f.Ranges)
	}
	// One too large to keep still gives its WAL range.
	large := strings.Replace(small, `"WAL-Ranges"`, `"Files": ["`+strings.Repeat("x", maxPGManifest)+`"], "WAL-Ranges"`, 1)
	f = streamFacts{}
	if err := f.readPGManifest(bytes.NewReader([]byte(large))); err != nil || f.pgManifest != nil || f.Ranges[0].End != "0/2000100" {
		t.Fatalf("large manifest: %v, kept %d bytes, ranges %+v", err, len(f.pgManifest), f.Ranges)
	}
}

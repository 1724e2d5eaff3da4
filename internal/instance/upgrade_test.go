package instance

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPgUpgradeReason: the reason is pg_upgrade's failed step and what it
// says after it, with the first lines of the file it points to.
func TestPgUpgradeReason(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "tables_using_reg.txt")
	if err := os.WriteFile(list, []byte("In database: postgres\n  public.t.x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		out  string
		want []string // substrings, in order
	}{
		"a failed check (17)": {
			out: "Performing Consistency Checks\n-----------------------------\nChecking cluster versions    ok\n" +
				"Checking data type usage     failed check: Checking for reg* data types in user tables\n\n" +
				"Data type checks failed: \nYour installation contains one of the reg* data types in user tables.\n\n" +
				"A list of the problem columns is in the file:\n    " + list + "\n\nFailure, exiting\n",
			want: []string{"Checking for reg* data types in user tables", "Your installation contains", "[tables_using_reg.txt: In database: postgres; public.t.x]"},
		},
		"a fatal step (15, 16)": {
			out:  "Checking for reg* data types in user tables                 fatal\n\nYour installation contains one of the reg* data types\nFailure, exiting\n",
			want: []string{"Checking for reg* data types in user tables Your installation contains one of the reg* data types"},
		},
		"a server that would not start": {
			out:  "Checking cluster versions    ok\n\n*failure*\nConsult the last few lines of \"" + list + "\" for\nthe probable cause of the failure.\nFailure, exiting\n",
			want: []string{"Consult the last few lines of", "[tables_using_reg.txt: In database: postgres"},
		},
		"nothing recognisable: the last lines": {
			out:  "a\nb\nc\nd\ne\nf\ng\n",
			want: []string{"c d e f g"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := pgUpgradeReason(tc.out)
			rest := got
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("reason %q\nlacks %q (in order)", got, w)
				}
				rest = rest[i+len(w):]
			}
			if strings.Contains(got, "Failure, exiting") {
				t.Errorf("reason %q keeps pg_upgrade's last line", got)
			}
		})
	}
}

// TestUpgradeDecidesFromTheVolume: what instance upgrade does without any
// binary, from the directories on the volume alone.
func TestUpgradeDecidesFromTheVolume(t *testing.T) {
	write := func(t *testing.T, path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cases := map[string]struct {
		files     map[string]string // below the volume
		untouched bool
		wantErr   string // "" for success
		wantMajor string // PG_VERSION of pgdata after
	}{
		"already upgraded": {files: map[string]string{"pgdata/PG_VERSION": "17\n", "pgdata/global/pg_control": ""}, wantMajor: "17"},
		"swap interrupted": {files: map[string]string{"pgdata.old/PG_VERSION": "15\n", "pgdata.upgrade/PG_VERSION": "17\n",
			"pgdata.upgrade/global/pg_control": ""}, wantMajor: "17"},
		"past the point of no return": {files: map[string]string{"pgdata/PG_VERSION": "15\n", "pgdata/global/pg_control.old": "",
			"pgdata.upgrade/PG_VERSION": "17\n"}, wantErr: "past the point of no return", wantMajor: "15"},
		"another major": {files: map[string]string{"pgdata/PG_VERSION": "16\n", "pgdata/global/pg_control": ""},
			untouched: true, wantErr: `on PostgreSQL "16", not 15`, wantMajor: "16"},
		"no data": {files: map[string]string{}, untouched: true, wantErr: "there is no data directory"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			vol := t.TempDir()
			for f, c := range tc.files {
				write(t, filepath.Join(vol, f), c)
			}
			u := &upgrader{uc: UpgradeConfig{PGData: vol + "/pgdata", OldMajor: "15", NewMajor: "17"},
				log: func(string, ...any) {}, scratch: vol + "/pgdata.upgrade", old: vol + "/pgdata.old"}
			err := u.run(t.Context())
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			if ue, ok := err.(*UpgradeError); ok && ue.Untouched != tc.untouched {
				t.Errorf("untouched %v, want %v", ue.Untouched, tc.untouched)
			}
			if got := majorOf(vol + "/pgdata"); got != tc.wantMajor {
				t.Errorf("pgdata on %q, want %q", got, tc.wantMajor)
			}
		})
	}
}

// TestGlibcIsNeverStaged: the new image's glibc runs the old binaries.
func TestGlibcIsNeverStaged(t *testing.T) {
	for soname, want := range map[string]bool{
		"libc.so.6": true, "libm.so.6": true, "ld-linux-x86-64.so.2": true, "ld-linux-aarch64.so.1": true, "libnss_files.so.2": true,
		"libssl.so.3": false, "libicuuc.so.72": false, "libstdc++.so.6": false, "libcrypt.so.1": false,
	} {
		if got := glibc(soname); got != want {
			t.Errorf("glibc(%q) = %v, want %v", soname, got, want)
		}
	}
}

// TestLibraryPathKeepsOnlyMissingSonames: a staged library the image has
// by soname is never put on LD_LIBRARY_PATH, one it lacks is.
func TestLibraryPathKeepsOnlyMissingSonames(t *testing.T) {
	staged := t.TempDir()
	for _, l := range []string{"libc.so.6", "libsurely-not-in-this-image.so.72"} {
		if err := os.MkdirAll(filepath.Join(staged, stagedLibs), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(staged, stagedLibs, l), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := libraryPath(staged, filepath.Join(t.TempDir(), "links"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "libsurely-not-in-this-image.so.72" {
		t.Fatalf("linked %v, want only the soname this machine lacks", names)
	}
}

func TestWALFileOnTimeline(t *testing.T) {
	for redo, want := range map[string]string{
		"00000001000000000000000B": "00000004000000000000000C",
		"0000000100000002000000FF": "000000040000000300000000",
		"000000010000000000000000": "000000040000000000000001",
	} {
		if got, err := walFileOnTimeline(redo, 4); err != nil || got != want {
			t.Errorf("walFileOnTimeline(%q, 4) = %q, %v; want %q", redo, got, err, want)
		}
	}
	for _, redo := range []string{"", "0000000100000000000000", "00000001ZZ00000000000000"} {
		if _, err := walFileOnTimeline(redo, 4); err == nil {
			t.Errorf("walFileOnTimeline(%q) took it for a WAL file", redo)
		}
	}
}

func TestTimelineAfter(t *testing.T) {
	for newest, want := range map[int64]int64{1: 2, 4: 5, math.MaxUint32 - 1: math.MaxUint32} {
		if got, err := timelineAfter(newest); err != nil || got != want {
			t.Errorf("timelineAfter(%d) = %d, %v; want %d", newest, got, err, want)
		}
	}
	if got, err := timelineAfter(math.MaxUint32); err == nil {
		t.Errorf("timelineAfter(FFFFFFFF) = %d: a timeline PostgreSQL cannot have", got)
	}
}

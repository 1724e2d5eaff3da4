package instance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// walFixture is a data directory whose pg_wal holds a segment and an
// archive_status marker, and a WAL volume, with the Config for them.
func walFixture(t *testing.T) (Config, map[string]string) {
	t.Helper()
	base := t.TempDir()
	c := Config{PGData: filepath.Join(base, "data", "pgdata"), WALDir: filepath.Join(base, "wal", "pg_wal")}
	files := map[string]string{
		"000000010000000000000003":                      "segment",
		"00000002.history":                              "history",
		"archive_status/000000010000000000000003.ready": "",
	}
	for name, content := range files {
		path := filepath.Join(c.PGData, "pg_wal", name)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(c.WALDir), 0o700); err != nil {
		t.Fatal(err)
	}
	return c, files
}

// assertPlaced checks that pg_wal links to the WAL directory, which holds
// exactly the files.
func assertPlaced(t *testing.T, c Config, files map[string]string) {
	t.Helper()
	link := filepath.Join(c.PGData, "pg_wal")
	if target, err := os.Readlink(link); err != nil || target != c.WALDir {
		t.Fatalf("pg_wal links to %q (%v), want %s", target, err, c.WALDir)
	}
	found := 0
	err := filepath.WalkDir(link+"/", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		found++
		rel, _ := filepath.Rel(link, path)
		got, err := os.ReadFile(path)
		if want, ok := files[rel]; !ok || string(got) != want || err != nil {
			t.Errorf("pg_wal/%s holds %q (%v), want %q (listed: %v)", rel, got, err, want, ok)
		}
		return nil
	})
	if err != nil || found != len(files) {
		t.Errorf("pg_wal holds %d files (%v), want %d", found, err, len(files))
	}
	if _, err := os.Lstat(link + movingSuffix); !os.IsNotExist(err) {
		t.Errorf("pg_wal%s is left behind (%v)", movingSuffix, err)
	}
}

func TestPlaceWALMovesTheWALOnce(t *testing.T) {
	c, files := walFixture(t)
	if moved, err := c.placeWAL(); err != nil || !moved {
		t.Fatalf("placeWAL = %v, %v; want moved", moved, err)
	}
	assertPlaced(t, c, files)
	if moved, err := c.placeWAL(); err != nil || moved {
		t.Fatalf("placeWAL again = %v, %v; want nothing to do", moved, err)
	}
	assertPlaced(t, c, files)
	if moved, err := (Config{PGData: c.PGData}).placeWAL(); err != nil || moved {
		t.Errorf("placeWAL without a WAL volume = %v, %v; want nothing to do", moved, err)
	}
}

// Every state a move cut short can leave ends with the WAL of pg_wal, and
// none of what the WAL volume held before, in place.
func TestPlaceWALAfterAMoveCutShort(t *testing.T) {
	for name, cut := range map[string]func(t *testing.T, c Config){
		"during the copy": func(t *testing.T, c Config) {
			writeFile(t, c.WALDir+".new/000000010000000000000003", "half a seg")
		},
		"with the WAL volume holding another server's WAL": func(t *testing.T, c Config) {
			writeFile(t, c.WALDir+"/000000010000000000000009", "stale")
		},
		"with pg_wal set aside": func(t *testing.T, c Config) {
			writeFile(t, c.WALDir+"/000000010000000000000003", "segment")
			link := filepath.Join(c.PGData, "pg_wal")
			if err := os.Rename(link, link+movingSuffix); err != nil {
				t.Fatal(err)
			}
		},
		"with the link made, pg_wal set aside": func(t *testing.T, c Config) {
			link := filepath.Join(c.PGData, "pg_wal")
			if err := copyTree(link, c.WALDir, func(string) {}); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(link, link+movingSuffix); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(c.WALDir, link); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			c, files := walFixture(t)
			cut(t, c)
			if _, err := c.placeWAL(); err != nil {
				t.Fatal(err)
			}
			assertPlaced(t, c, files)
		})
	}
}

func TestPlaceWALRefusesALinkElsewhereOrDangling(t *testing.T) {
	c, _ := walFixture(t)
	if _, err := c.placeWAL(); err != nil {
		t.Fatal(err)
	}
	other := Config{PGData: c.PGData, WALDir: filepath.Join(t.TempDir(), "pg_wal")}
	if _, err := other.placeWAL(); err == nil || !strings.Contains(err.Error(), "not to the WAL volume's") {
		t.Errorf("placeWAL with pg_wal linked elsewhere: %v, want a refusal", err)
	}
	if err := os.RemoveAll(c.WALDir); err != nil {
		t.Fatal(err)
	}
	if _, err := c.placeWAL(); err == nil || !strings.Contains(err.Error(), "which is gone") {
		t.Errorf("placeWAL with the WAL volume emptied: %v, want a refusal", err)
	}
	if _, err := (Config{PGData: c.PGData}).placeWAL(); err == nil || !strings.Contains(err.Error(), "give it spec.walStorage again") {
		t.Errorf("placeWAL without the WAL volume the data was made with: %v, want a refusal", err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

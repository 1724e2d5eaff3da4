package backup

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Fuzz targets for what an instance manager reads from the object store,
// whose owner (or anyone with its credentials) can write anything there:
// backup manifests, the base backup's tar stream, and the names of WAL
// and history files in a listing. docs/security.md lists every target;
// make fuzz runs them.

// FuzzWALNames: the segment WALFile names is 24 upper-case hex digits of
// the timeline and the segment that holds lsn, or an error; and pruning
// before it (segmentBefore) deletes only files named as segments, never a
// history file and never the segment itself, whatever a listing holds.
func FuzzWALNames(f *testing.F) {
	f.Add(int64(1), "0/2000028", "00000001000000000000000F")
	f.Add(int64(3), "A/3E000060", "00000002.history")
	f.Add(int64(2), "0/FF000000", "00000001000000000000000A.00000028.backup")
	f.Add(int64(0x100000000), "1/0", "backup.json")
	f.Add(int64(-1), "0/1garbage", "0000000200000000000000FF.partial")
	f.Add(int64(2), "0/5000000", "000000010000000000000003.zst.age")
	f.Add(int64(2), "0/5000000", "00000002.history.zst.age")
	f.Fuzz(func(t *testing.T, timeline int64, lsn, listed string) {
		name, err := WALFile(timeline, lsn)
		if err != nil {
			if name != "" {
				t.Fatalf("WALFile(%d, %q) refused it (%v) but named %q", timeline, lsn, err, name)
			}
			return
		}
		if len(name) != 24 || strings.Trim(name, "0123456789ABCDEF") != "" {
			t.Fatalf("WALFile(%d, %q) = %q, not a segment's name", timeline, lsn, name)
		}
		tli, _ := strconv.ParseUint(name[:8], 16, 32)
		hi, _ := strconv.ParseUint(name[8:16], 16, 32)
		lo, _ := strconv.ParseUint(name[16:], 16, 32)
		if int64(tli) != timeline || lo >= 0x100 {
			t.Fatalf("WALFile(%d, %q) = %q", timeline, lsn, name)
		}
		start := hi<<32 | lo*segmentSize
		if again, err := WALFile(timeline, lsnString(start)); err != nil || again != name {
			t.Fatalf("WALFile(%d, %q) = %q, but the segment's start %s is in %q, %v", timeline, lsn, name, lsnString(start), again, err)
		}
		if segmentBefore(name, name) {
			t.Fatalf("pruning before %s deletes %s itself", name, name)
		}
		// As PruneWAL reads a listing: the object's name, plain or
		// encrypted, without its suffixes.
		file := walName(listed)
		if segmentBefore(file, name) && (len(file) < 24 || strings.Trim(file[:24], "0123456789ABCDEF") != "" ||
			strings.HasSuffix(file, ".history") || file[8:24] >= name[8:24]) {
			t.Fatalf("pruning before %s deletes %q", name, listed)
		}
	})
}

func lsnString(pos uint64) string {
	return strconv.FormatUint(pos>>32, 16) + "/" + strconv.FormatUint(pos&0xFFFFFFFF, 16)
}

// FuzzManifests: whatever manifests the store holds (any JSON at any
// key under base/, as Backups lists them), a backup's objects stay under
// this database's path, retention never deletes the newest backup, and a
// restore chooses one of them or says that none fits.
func FuzzManifests(f *testing.F) {
	m := func(id string, finished time.Time) string {
		b, _ := json.Marshal(Manifest{ID: id, StartedAt: finished.Add(-time.Minute), FinishedAt: finished, Timeline: 1,
			BeginLSN: "0/2000028", EndLSN: "0/2000138", Size: 4 << 20})
		return string(b)
	}
	day := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Add("20260102T030405Z", m("20260102T030405Z", day), "20260103T030405Z", m("20260103T030405Z", day.Add(24*time.Hour)),
		"x", `{"id":"x"}`, 1, "7d", "")
	f.Add("a", `{"id":"../../other/base/b","finishedAt":"9999-12-31T23:59:59Z"}`, "..", `{"id":".."}`, "c", `null`, 0, "36h", "20260102T030405Z")
	// Found by the engine: two manifests of one ID (a backup directory
	// copied) had retention delete the newest backup.
	f.Add("0", "{}", "1", "null", "2", "{}", 0, "1h", "0")
	// Encrypted backups name their archive base.tar.zst.age.
	f.Add("e", `{"id":"e","encryption":{"recipient":"age1x"}}`, "f", `{"id":"../f","encryption":{}}`, "g", `{"id":"g","encryption":null}`, 1, "", "e")
	f.Fuzz(func(t *testing.T, dirA, a, dirB, b, dirC, c string, keep int, window, id string) {
		s := &Store{prefix: "backups/orders"}
		var backups []Manifest
		listed := map[string]bool{}
		for dir, body := range map[string]string{dirA: a, dirB: b, dirC: c} {
			key := s.key("base", dir, manifestName)
			var m Manifest
			if listed[key] || !strings.HasPrefix(key, s.key("base")+"/") || json.Unmarshal([]byte(body), &m) != nil {
				continue // a listing under base/ holds each key once
			}
			listed[key] = true
			if manifestAt(key, m) {
				backups = append(backups, m)
			}
		}
		slices.SortFunc(backups, func(a, b Manifest) int { return a.FinishedAt.Compare(b.FinishedAt) })
		for _, m := range backups {
			if k := s.archiveKey(m); !strings.HasPrefix(k, s.key("base")+"/") {
				t.Fatalf("backup %q is stored at %s, outside the database's path", m.ID, k)
			}
		}
		w, err := ParseWindow(window)
		if err != nil && w != 0 {
			t.Fatalf("ParseWindow(%q) refused it (%v) but returned %s", window, err, w)
		}
		r := Retention{Window: w, Keep: max(keep, 0)}
		expired := r.Expired(backups, time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC))
		for _, e := range expired {
			if len(backups) > 0 && e.ID == backups[len(backups)-1].ID {
				t.Fatalf("retention %+v deletes the newest backup %q of %+v", r, e.ID, backups)
			}
		}
		if len(expired) > len(backups) {
			t.Fatalf("retention deletes %d of %d backups", len(expired), len(backups))
		}
		chosen, err := Choose(backups, id, time.Time{}, "")
		if err != nil {
			if !errors.Is(err, ErrNoBackup) {
				t.Fatalf("Choose: %v", err)
			}
			return
		}
		if !slices.Contains(backups, chosen) || (id != "" && chosen.ID != id) {
			t.Fatalf("Choose(%q) = %+v, not one of %+v", id, chosen, backups)
		}
	})
}

// FuzzBaseBackupStream: any stream in place of pg_basebackup's tar output
// reads to its end or fails; it never panics, and a WAL range read from it
// comes from a backup_manifest entry.
func FuzzBaseBackupStream(f *testing.F) {
	f.Add(tarOf(f, entry{name: "PG_VERSION", body: "17\n"}, entry{name: "backup_manifest",
		body: `{"PostgreSQL-Backup-Manifest-Version":1,"Files":[],"WAL-Ranges":[{"Timeline":1,"Start-LSN":"0/2000028","End-LSN":"0/2000138"}],"Manifest-Checksum":"00"}`}))
	f.Add(tarOf(f, entry{name: "backup_manifest", body: `{"WAL-Ranges":[{"Timeline":"x"}]}`}))
	f.Add([]byte("not a tar stream"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		var facts streamFacts
		err := readManifest(bytes.NewReader(stream), &facts)
		if err == nil && len(facts.Ranges) > 0 && !bytes.Contains(stream, []byte("backup_manifest")) {
			t.Fatalf("WAL ranges %+v from a stream without a backup_manifest", facts.Ranges)
		}
		if err == nil && facts.major != "" && !bytes.Contains(stream, []byte("PG_VERSION")) {
			t.Fatalf("major %q from a stream without a PG_VERSION", facts.major)
		}
	})
}

// FuzzUntar: a base backup archive from the store writes nothing outside
// the data directory, whatever its entries' names, types and link
// targets, and never the files a restore leaves out.
func FuzzUntar(f *testing.F) {
	f.Add("PG_VERSION", byte(tar.TypeReg), "", "global", byte(tar.TypeDir), "", "global/pg_control", byte(tar.TypeReg), "")
	f.Add("PG_VERSION", byte(tar.TypeReg), "", "../escaped", byte(tar.TypeReg), "", "/abs", byte(tar.TypeReg), "")
	f.Add("pg_tblspc", byte(tar.TypeDir), "", "pg_tblspc/16384", byte(tar.TypeSymlink), "../../outside", "pg_tblspc/16384/x", byte(tar.TypeReg), "")
	f.Add("link", byte(tar.TypeSymlink), "..", "link/escaped", byte(tar.TypeReg), "", "standby.signal", byte(tar.TypeReg), "")
	f.Add("pg_wal", byte(tar.TypeDir), "", "pg_wal/000000010000000000000003", byte(tar.TypeReg), "", "dev", byte(tar.TypeChar), "")
	f.Fuzz(func(t *testing.T, n1 string, t1 byte, l1, n2 string, t2 byte, l2, n3 string, t3 byte, l3 string) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "data")
		stream := tarOf(t, entry{n1, t1, l1, "1"}, entry{n2, t2, l2, "2"}, entry{n3, t3, l3, "3"})
		if stream == nil {
			t.Skip() // not a tar entry archive/tar writes
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		_ = untar(tar.NewReader(bytes.NewReader(stream)), dir)
		outside, err := os.ReadDir(parent)
		if err != nil {
			t.Fatal(err)
		}
		if len(outside) != 1 {
			t.Fatalf("untar wrote outside the data directory: %v", outside)
		}
		err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, path)
			typ := byte(tar.TypeReg)
			if d.IsDir() {
				typ = tar.TypeDir
			}
			if rel != "." && leftOut(rel, typ) {
				t.Errorf("the restore wrote %s, which it leaves out", rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

type entry struct {
	name     string
	typ      byte
	linkname string
	body     string
}

// tarOf is a tar stream of entries; nil when archive/tar cannot write one
// of them.
func tarOf(tb testing.TB, entries ...entry) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		if e.typ == 0 {
			e.typ = tar.TypeReg
		}
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.linkname, Mode: 0o600}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if tw.WriteHeader(h) != nil {
			return nil
		}
		if e.typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if tw.Close() != nil {
		return nil
	}
	return buf.Bytes()
}

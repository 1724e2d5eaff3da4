package instance

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"example.com/myoperator/internal/contract"
)

func TestWALBounds(t *testing.T) {
	for _, c := range []struct {
		size      uint64
		slot, wal string
	}{
		{0, "128MB", "64MB"},
		{256 << 20, "128MB", "64MB"},
		{1 << 30, "256MB", "256MB"}, // the default 1Gi volume
		{100 << 30, "25600MB", "1024MB"},
	} {
		if got := slotBound(c.size); got != c.slot {
			t.Errorf("slotBound(%d) = %s, want %s", c.size, got, c.slot)
		}
		if got := walSizeBound(c.size); got != c.wal {
			t.Errorf("walSizeBound(%d) = %s, want %s", c.size, got, c.wal)
		}
	}
}

func TestWALBoundArgsLeaveSpecParametersAlone(t *testing.T) {
	dir := t.TempDir()
	c := Config{ConfigDir: dir, PGData: dir}
	conf := filepath.Join(dir, contract.PostgresConfFile)
	for _, tc := range []struct {
		conf string
		want []string // the settings on the command line
	}{
		{"wal_keep_size = '128MB'\n", []string{"max_slot_wal_keep_size", "max_wal_size"}},
		{"max_slot_wal_keep_size = '5GB'\nwal_keep_size = '128MB'\n", []string{"max_wal_size"}},
		{"max_wal_size = '4GB'\n", []string{"max_slot_wal_keep_size"}},
		{"max_wal_size = '4GB'\nmax_slot_wal_keep_size = -1\n", nil},
	} {
		if err := os.WriteFile(conf, []byte(tc.conf), 0o600); err != nil {
			t.Fatal(err)
		}
		var got []string
		args := c.walBoundArgs()
		for i := 0; i+1 < len(args); i += 2 {
			if args[i] != "-c" {
				t.Fatalf("walBoundArgs = %q, want -c pairs", args)
			}
			name, _, _ := strings.Cut(args[i+1], "=")
			got = append(got, name)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("with postgresql.conf %q: walBoundArgs sets %q, want %q: spec.parameters decide", tc.conf, got, tc.want)
		}
	}
}

func TestStorageCountsTheWALFiles(t *testing.T) {
	dir := t.TempDir()
	c := Config{PGData: dir}
	if err := os.MkdirAll(filepath.Join(dir, "pg_wal", "archive_status"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, size := range map[string]int{"000000010000000000000001": 16 << 20, "000000010000000000000002": 16 << 20, "00000002.history": 42} {
		if err := os.WriteFile(filepath.Join(dir, "pg_wal", name), make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "pg_wal", "archive_status", "000000010000000000000001.ready"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "base.file"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	s := c.storage()
	if s == nil {
		t.Fatal("storage = nil")
	}
	if s.WALBytes != 32<<20+42 {
		t.Errorf("walBytes = %d, want %d: the segments and the history file, nothing outside pg_wal", s.WALBytes, 32<<20+42)
	}
	if s.CapacityBytes <= 0 || s.AvailableBytes <= 0 || s.AvailableBytes > s.CapacityBytes {
		t.Errorf("capacity %d, available %d", s.CapacityBytes, s.AvailableBytes)
	}
	if (Config{PGData: filepath.Join(dir, "missing")}).storage() != nil {
		t.Error("storage of a missing data directory is not nil")
	}
}

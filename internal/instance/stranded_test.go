package instance

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestRemoved(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "58P01", Message: "requested WAL segment 000000010000000000000004 has already been removed"}, true},
		{&pgconn.PgError{Code: "XX000", Message: "requested WAL segment 000000020000000000000007 has already been removed"}, true},
		{&pgconn.PgError{Code: "55000", Message: "requested starting point 0/5000000 on timeline 1 is not in this server's history"}, false},
		{errors.New("dial tcp: connection refused"), false},
		{nil, false},
	} {
		if got := removed(tc.err); got != tc.want {
			t.Errorf("removed(%v) = %t, want %t", tc.err, got, tc.want)
		}
	}
}

func TestNotInHistory(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "XX000", Message: "requested starting point 0/5000000 on timeline 1 is not in this server's history"}, true},
		{&pgconn.PgError{Code: "58P01", Message: "requested WAL segment 000000010000000000000004 has already been removed"}, false},
		{&pgconn.PgError{Code: "XX000", Message: "requested starting point 0/6000000 is ahead of the WAL flush position of this server 0/5000000"}, false},
		{errors.New("dial tcp: connection refused"), false},
		{nil, false},
	} {
		if got := notInHistory(tc.err); got != tc.want {
			t.Errorf("notInHistory(%v) = %t, want %t", tc.err, got, tc.want)
		}
	}
}

func TestSegmentTimeline(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"000000020000000000000006", "000000030000000000000006", "000000020000000000000007", "00000003.history"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const size = 16 << 20
	for _, tc := range []struct {
		lsn  uint64
		want int64
	}{
		{0x60200B0, 3}, // segment 6: both timelines hold it, the newest wins
		{0x70000A0, 2}, // segment 7: only timeline 2's, whatever history file is there
		{0x7000000, 3}, // the end of segment 6
		{0x80000A0, 0}, // segment 8: none
		{0, 0},
	} {
		if got := segmentTimeline(dir, tc.lsn, size); got != tc.want {
			t.Errorf("segmentTimeline(%X) = %d, want %d", tc.lsn, got, tc.want)
		}
	}
}

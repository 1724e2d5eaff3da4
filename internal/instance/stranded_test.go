package instance

import (
	"errors"
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

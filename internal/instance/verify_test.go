package instance

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"

	"example.com/myoperator/internal/backup"
	"example.com/myoperator/internal/contract"
)

// TestVerifyResultOfErrors: what a read of the store says of the object
// (damaged: Failed) and what it says of the store or this container
// (Error), as readFailure wraps it.
func TestVerifyResultOfErrors(t *testing.T) {
	const key = "db/base/20261203T120000Z/base.tar.zst"
	for name, tc := range map[string]struct {
		err  error
		want string
	}{
		"no key decrypts it":     {&backup.KeyError{What: "base backup 20261203T120000Z", Source: `Secret "backup-key"`}, contract.VerificationFailed},
		"it does not decompress": {fmt.Errorf("object store: %s: %w", key, zstd.ErrMagicMismatch), contract.VerificationFailed},
		"it is missing":          {backup.ErrNotFound, contract.VerificationFailed},
		"the store's NoSuchKey": {fmt.Errorf("object store: %s: %w", key, minio.ErrorResponse{Code: minio.NoSuchKey}),
			contract.VerificationFailed},
		"the store refused the credentials": {fmt.Errorf("object store: %s: %w", key, minio.ErrorResponse{Code: "AccessDenied"}),
			contract.VerificationError},
		"the store out of reach": {fmt.Errorf("object store: %s: %w", key, &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}),
			contract.VerificationError},
		"the disk full": {&fs.PathError{Op: "write", Path: "/data/base/1/1259", Err: syscall.ENOSPC}, contract.VerificationError},
		"a stop":        {fmt.Errorf("reading: %w", context.Canceled), contract.VerificationError},
	} {
		t.Run(name, func(t *testing.T) {
			err := readFailure("base backup 20261203T120000Z", tc.err)
			if got := resultOf(err); got != tc.want {
				t.Fatalf("%v: %s, want %s", err, got, tc.want)
			}
			if !strings.Contains(err.Error(), "base backup 20261203T120000Z") {
				t.Errorf("%q does not name the object", err)
			}
		})
	}
	if got := resultOf(nil); got != contract.VerificationPassed {
		t.Errorf("no error: %s", got)
	}
	if got := resultOf(fmt.Errorf("checking: %w", failed("a check"))); got != contract.VerificationFailed {
		t.Errorf("a wrapped failure: %s", got)
	}
}

// TestAmcheckVerdict: pg_amcheck's exit codes (0 all passed, 2 corruption
// found, 1 could not check) and its warning of a database skipped.
func TestAmcheckVerdict(t *testing.T) {
	corrupt := "heap table \"app.public.stamped\", block 0, offset 1:\n    xmin 42 precedes relation freeze threshold"
	for name, tc := range map[string]struct {
		code, listed int
		output       string
		checked      int
		want         string
		says         string
	}{
		"all passed":       {0, 3, "", 3, contract.VerificationPassed, ""},
		"corruption found": {2, 3, corrupt, 3, contract.VerificationFailed, "app.public.stamped"},
		"could not check": {1, 3, `pg_amcheck: error: connection to server failed`, 3, contract.VerificationError,
			"connection to server failed"},
		"a database skipped": {0, 3, `pg_amcheck: warning: skipping database "app": amcheck is not installed`, 2,
			contract.VerificationError, "skipped 1 of 3"},
	} {
		t.Run(name, func(t *testing.T) {
			checked, err := amcheckVerdict(tc.code, tc.output, tc.listed)
			if checked != tc.checked || resultOf(err) != tc.want {
				t.Fatalf("%d databases, %s (%v); want %d, %s", checked, resultOf(err), err, tc.checked, tc.want)
			}
			if err != nil && !strings.Contains(err.Error(), tc.says) {
				t.Errorf("%q does not say %q", err, tc.says)
			}
		})
	}
}

// TestReachedEnd: recovery must go at least to the backup's end LSN.
func TestReachedEnd(t *testing.T) {
	m := backup.Manifest{ID: "20261203T120000Z", EndLSN: "0/3000100"}
	for reached, want := range map[string]string{
		"0/3000100":  contract.VerificationPassed,
		"0/5000000":  contract.VerificationPassed,
		"0/30000FF":  contract.VerificationFailed,
		"not an LSN": contract.VerificationError,
	} {
		if got := resultOf(reachedEnd(reached, m)); got != want {
			t.Errorf("reached %q: %s, want %s", reached, got, want)
		}
	}
}

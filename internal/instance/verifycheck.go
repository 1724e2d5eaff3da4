package instance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"example.com/myoperator/internal/backup"
)

// whyStopped says why the private server exited before it promoted.
// PostgreSQL stops recovery with an error at a WAL file wal-fetch --strict
// could not give back (exit 126), and when the archive ends before the
// backup's data is consistent; anything else (memory, disk, a setting, or
// data PostgreSQL cannot read) is in the server's log alone, and is
// Error: this cannot tell the backup's fault from the container's.
func (v *verifier) whyStopped(ctx context.Context) error {
	r, ok := v.pg.c.lastFetch()
	if ok && r.Error != "" {
		return v.fetchAgain(ctx, r)
	}
	if err := v.missingWAL(ctx, r.LastSegment); err != nil {
		return err
	}
	what := "before it fetched any WAL file"
	if ok {
		what = r.describe()
	}
	return fmt.Errorf("%v, and the archive holds every WAL file base backup %s needs (%s): the server's log above says why; "+
		"it may be the restored data (a damaged backup) or this container (memory, disk)", errRecoveryStopped, v.backup.ID, what)
}

// fetchAgain asks the store once more for the WAL file recovery stopped
// at, r's, to tell a damaged file from a store that failed for a while.
func (v *verifier) fetchAgain(ctx context.Context, r fetchRecord) error {
	dest := filepath.Join(v.pg.c.SocketDir, "fetched-again")
	err := v.store.FetchWAL(ctx, r.Name, dest)
	_ = os.Remove(dest)
	switch {
	case err == nil:
		return fmt.Errorf("recovery stopped at WAL file %s, which the store did not give back (%s) but gave back intact when asked again: "+
			"the store failed for a while, and this says nothing of the archive", r.Name, r.Error)
	case errors.Is(err, backup.ErrNotFound):
		return fmt.Errorf("recovery stopped at WAL file %s, which the store did not give back (%s), and which it no longer holds: "+
			"was it deleted meanwhile?", r.Name, r.Error)
	case damaged(err):
		return failed("WAL file %s does not restore: %v; recovery of base backup %s cannot go past it: "+
			"no restore reaches any write after it", r.Name, err, v.backup.ID)
	}
	return fmt.Errorf("the store failed while recovery fetched WAL file %s: %w", r.Name, err)
}

// missingWAL fails a backup whose archive lacks a WAL file its recovery
// needs before the data is consistent: the first or last of the backup's
// own, or the one after last (the last segment recovery fetched) while a
// later one is there.
func (v *verifier) missingWAL(ctx context.Context, last string) error {
	m := v.backup
	for _, lsn := range []string{m.BeginLSN, m.EndLSN} {
		name, err := backup.WALFile(m.Timeline, lsn)
		if err != nil {
			return failed("base backup %s: its manifest is damaged: %v", m.ID, err)
		}
		if _, err := v.store.ArchivedSize(ctx, name); errors.Is(err, backup.ErrNotFound) {
			return failed("the archive lacks WAL file %s, which base backup %s needs to be consistent (its WAL runs from %s to %s)",
				name, m.ID, m.BeginLSN, m.EndLSN)
		} else if err != nil {
			return err
		}
	}
	if last == "" {
		return nil
	}
	missing, next, err := v.store.Gap(ctx, last)
	if err != nil {
		return err
	}
	if missing != "" {
		return failed("recovery of base backup %s stopped after WAL file %s, where the archive lacks %s but holds %s: the archive has a hole",
			m.ID, last, missing, next)
	}
	return nil
}

// amcheck runs pg_amcheck on every database of the restored server:
// heap tables and B-tree indexes, amcheck installed where it is missing
// (in the restored copy only).
func (v *verifier) amcheck(ctx context.Context) error {
	c := v.pg.c
	conn, err := v.pg.connectAt(ctx, c.SocketDir)
	if err != nil {
		return err
	}
	// The databases pg_amcheck --all checks: those that take connections,
	// and are not left invalid by a DROP DATABASE cut short.
	var listed int
	err = conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datallowconn AND datconnlimit <> -2").Scan(&listed)
	_ = conn.Close(context.Background())
	if err != nil {
		return err
	}
	out, code, err := v.pg.runCaptured(ctx, "pg_amcheck", "--all", "--install-missing",
		"--host="+c.SocketDir, "--port="+c.Port, "--username=postgres", "--no-password")
	if err != nil {
		return err
	}
	checked, verdict := amcheckVerdict(code, out, listed)
	v.result.Databases = checked
	return verdict
}

// amcheckVerdict reads pg_amcheck's exit code and output (standard output
// and error) over listed databases: how many it checked, and the verdict.
// It exits 0 when every check passed, 2 when a check found corruption
// (reported on standard output), and 1 when it could not run them all
// (a connection, a query); it warns of a database it skips.
func amcheckVerdict(code int, output string, listed int) (int, error) {
	output = strings.TrimSpace(output)
	skipped := strings.Count(output, "skipping database")
	checked := max(listed-skipped, 0)
	switch {
	case code == 2:
		return checked, failed("pg_amcheck found corruption in the restored data: %s", output)
	case code != 0:
		return checked, fmt.Errorf("pg_amcheck could not check every database (exit status %d), which may be this container "+
			"or damage that stopped a check: %s", code, output)
	case skipped > 0:
		return checked, fmt.Errorf("pg_amcheck skipped %d of %d databases: %s", skipped, listed, output)
	}
	return checked, nil
}

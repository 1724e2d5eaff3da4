package instance

import (
	"context"
	"errors"
	"fmt"
	"os"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// The server's side of the loop's changes of role (database, seams.go):
// following a new primary, and reserving timelines before a promotion.

// follow restarts the server as a replica of holder: cloned when there is
// no data or its replay stalls without a primary (errReplayStalled),
// rewound otherwise.
func (pg *pgServer) follow(ctx context.Context, holder string, ready bool) error {
	if pg.role != stopped && !ready {
		return nil // still starting: its position is not known yet
	}
	r, err := pg.kube.report(ctx, holder)
	if err != nil {
		return err
	}
	if r == nil || r.Address == "" || r.Role != databasev1alpha1.RolePrimary {
		return nil // it has not reported as primary yet
	}
	stalled := false
	if pg.c.initialised() {
		// A running replica's last answer is not where its data stands: it
		// goes on receiving what the old primary writes until that one
		// stops, and a primary being fenced writes on (never acknowledged)
		// past the point the new primary forked from. Only the stopped
		// data tells whether it must be rewound.
		pg.stop()
		seen, err := pg.dataPosition(ctx)
		switch {
		case errors.Is(err, errReplayStalled):
			// Where this data ends cannot be known without a primary, and
			// the primary holds every acknowledged commit: a copy of it
			// replaces the data, once complete.
			control, cerr := pg.controlData(ctx)
			if cerr != nil {
				return cerr
			}
			seen, stalled = serverState{systemID: control["Database system identifier"]}, true
			pg.log("%v: cloning the primary again", err)
		case err != nil:
			return err
		}
		*pg.lastSeen = seen
	}
	if pg.c.initialised() && r.SystemID != "" && pg.lastSeen.systemID != "" && r.SystemID != pg.lastSeen.systemID {
		// Data of another database (a volume kept from an earlier
		// MyDatabase of the same name, say): never rewound or cloned over.
		return fmt.Errorf("this data directory belongs to database system %s, the primary %s runs %s: "+
			"not replacing it; move the volume away to let this instance clone the primary", pg.lastSeen.systemID, holder, r.SystemID)
	}
	if !pg.c.initialised() || stalled {
		err = pg.cloneReplica(ctx, r.Address)
	} else {
		// A former primary, and even a replica, can hold WAL the new
		// primary lacks: what a fenced primary wrote (never acknowledged)
		// after the new one forked its timeline.
		h, derr := pg.diverged(ctx, r.Address, *pg.lastSeen)
		if derr != nil {
			return derr
		}
		switch h {
		case forked:
			var conninfo string
			if conninfo, err = pg.replicationConninfo(ctx, r.Address); err == nil {
				err = pg.rewind(ctx, conninfo, "the primary at "+r.Address, func() error { return pg.cloneReplica(ctx, r.Address) })
			}
		case foreign:
			pg.log("timeline %d here has another history than the primary's: cloning it again", pg.lastSeen.timeline)
			err = pg.cloneReplica(ctx, r.Address)
		}
	}
	if err != nil {
		return err
	}
	if err := pg.start(ctx, asReplica, r.Address); err != nil {
		return err
	}
	pg.following = holder
	return nil
}

// reserveTimelines makes the next promotion pick a timeline above newest,
// the newest any primary reported in the Lease: PostgreSQL takes the first
// number after its own for which it finds no history file, so an empty
// one (comments only, which PostgreSQL reads as no entries) stands in for
// each number another instance used. Without it, an instance promoted
// after a primary that died before its timeline reached anyone would pick
// that primary's number, and the two histories could not be told apart.
func (pg *pgServer) reserveTimelines(mine, newest int64) error {
	for tli := mine + 1; tli <= newest; tli++ {
		path := fmt.Sprintf("%s/pg_wal/%08X.history", pg.c.PGData, tli)
		if _, err := os.Stat(path); err == nil {
			continue
		}
		if err := os.WriteFile(path, []byte("# timeline used by another instance; reserved by the instance manager\n"), 0o600); err != nil {
			return err
		}
	}
	return nil
}

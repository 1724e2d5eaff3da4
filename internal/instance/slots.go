package instance

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"example.com/myoperator/internal/contract"
)

// Every member streams from the primary through a physical replication
// slot of its own, so that the primary keeps the WAL a member has not
// received yet: a replica restarted under write load (every rolling update
// restarts each one) catches up by streaming instead of being cloned
// again, with or without spec.backup.
//
//   - The primary keeps a slot for every member (keepSlots), so that one
//     that is down, or was down when this instance became the primary,
//     finds its WAL when it comes back; it drops the slots of instances
//     that are no longer members (scaled away).
//   - A replica makes its own slot on the primary before it starts
//     streaming (ownSlot): the slot is then there even when the primary
//     runs an instance manager older than this code.
//   - Slots are not replicated, and slots a replica holds would keep WAL
//     on it: a replica drops the ones left from a time it was the primary.
//   - The bound: a slot may hold back at most max_slot_wal_keep_size of
//     WAL, a quarter of the data volume by default (walBoundArgs), or
//     what spec.parameters says. Past it PostgreSQL invalidates the slot
//     and its member falls back to the archive (restore_command, with
//     spec.backup) or is cloned again; the primary then makes the slot
//     anew, so that the member streams through it once it has caught up.

// slotPrefix begins the name of every slot this code manages; slots of
// other names (a user's, a logical decoding's) are never touched.
const slotPrefix = "mydb_"

// slotName is the slot the instance of a pod streams through. A slot name
// may hold lower case letters, digits and underscores, and at most 63 of
// them: a pod name has at most 54 characters (api.MaxNameLength and the
// ordinal), so the prefix fits.
func slotName(pod string) string { return slotPrefix + strings.ReplaceAll(pod, "-", "_") }

// slot is a row of pg_replication_slots, for a slot of slotPrefix.
type slot struct {
	name   string
	active bool
	lost   bool // invalidated: past max_slot_wal_keep_size
}

// slotChanges is what makes the slots that exist the ones wanted: slots to
// drop (not wanted, or lost, and not in use) and slots to create (wanted
// and missing, or lost).
func slotChanges(have []slot, want []string) (drop, create []string) {
	for _, s := range have {
		switch wanted := slices.Contains(want, s.name); {
		case s.active:
		case !wanted:
			drop = append(drop, s.name)
		case s.lost:
			drop, create = append(drop, s.name), append(create, s.name)
		}
	}
	for _, name := range want {
		if !slices.ContainsFunc(have, func(s slot) bool { return s.name == name }) {
			create = append(create, name)
		}
	}
	return drop, create
}

// slotKeeping keeps the local server's slots (keepSlots), and what it
// remembers between turns.
type slotKeeping struct {
	c   Config
	t   timing
	log Logger
	pg  *pgServer

	keptAs serverRole // the role the slots were last made right for
	keptAt time.Time
	logged string // the last error said
}

// slotsEvery is how often a running server's slots are looked at while
// its role stays the same; a change of role looks at once.
const slotsEvery = 10 * time.Second

// keepSlots makes the local server's slots those of its role: a primary's
// one per member of the quorum, a replica's none.
func (k *slotKeeping) keepSlots(ctx context.Context, quorum contract.Quorum) {
	if k.pg.role == stopped || (k.keptAs == k.pg.role && time.Since(k.keptAt) < slotsEvery) {
		return
	}
	var want []string
	if k.pg.role == asPrimary {
		if quorum.Instances == 0 {
			return // the Lease not read yet: the members are not known
		}
		for _, member := range k.c.members(quorum.Instances) {
			want = append(want, slotName(member))
		}
	}
	// Half a tick, as for the passwords: a slow server delays the next
	// renewal by little, and what is not done now is done next time.
	ctx, cancel := context.WithTimeout(ctx, k.t.tick/2)
	defer cancel()
	switch err := k.alignSlots(ctx, want); {
	case err == nil:
		k.keptAs, k.keptAt, k.logged = k.pg.role, time.Now(), ""
	case err.Error() != k.logged:
		// Tried again at the next turn; said once.
		k.log("replication slots: %v", err)
		k.logged = err.Error()
	}
}

// alignSlots creates and drops the local server's slots of slotPrefix so
// that they are want.
func (k *slotKeeping) alignSlots(ctx context.Context, want []string) error {
	conn, err := k.pg.connect(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	rows, err := conn.Query(ctx, `SELECT slot_name, active, coalesce(wal_status = 'lost', false) FROM pg_replication_slots
		WHERE slot_type = 'physical' AND starts_with(slot_name, $1)`, slotPrefix)
	if err != nil {
		return err
	}
	have, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (slot, error) {
		var s slot
		return s, r.Scan(&s.name, &s.active, &s.lost)
	})
	if err != nil {
		return err
	}
	drop, create := slotChanges(have, want)
	var errs []error
	for _, name := range drop {
		if _, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", name); err != nil {
			errs = append(errs, fmt.Errorf("dropping %s: %w", name, err))
		}
	}
	for _, name := range create {
		// Reserved at once: the WAL from here on is kept for the member.
		if _, err := conn.Exec(ctx, "SELECT pg_create_physical_replication_slot($1, true)", name); err != nil && !duplicate(err) {
			errs = append(errs, fmt.Errorf("creating %s: %w", name, err))
		}
	}
	if len(errs) == 0 && k.c.failoverSlots() {
		if err := k.alignFailoverSlots(ctx, conn, want); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ownSlot makes this instance's slot on the primary it is about to stream
// from, over a replication connection: the slot is there before the first
// byte streams, whatever the primary's instance manager does. One of that
// name is this instance's, kept as it is: a lost one makes the stream
// fail until the primary makes it anew (keepSlots), meanwhile the replica
// reads the archive, if there is one.
func (pg *pgServer) ownSlot(ctx context.Context, conninfo string) error {
	conn, err := pg.dialReplication(ctx, conninfo)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	_, err = conn.Exec(ctx, "CREATE_REPLICATION_SLOT "+slotName(pg.c.PodName)+" PHYSICAL RESERVE_WAL").ReadAll()
	if err != nil && !duplicate(err) {
		return err
	}
	return nil
}

// duplicate tells whether err is PostgreSQL's "already exists".
func duplicate(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42710"
}

// setIn tells whether the configuration file at path sets name.
func setIn(path, name string) bool {
	_, set := settingIn(path, name)
	return set
}

// settingIn is the value the configuration file at path gives name (as
// the operator writes it: name = 'value'), and whether it sets it.
func settingIn(path, name string) (string, bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", false
	}
	defer func() { _ = f.Close() }()
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		key, value, found := strings.Cut(lines.Text(), "=")
		if found && strings.TrimSpace(key) == name {
			return strings.Trim(strings.TrimSpace(value), "'"), true
		}
	}
	return "", false
}

// Failover slots (PostgreSQL 17, with spec.replication.logical): a
// logical slot made with the failover option (a subscription's, with
// spec.databases[].subscriptions[].failover, or a consumer's own) is kept
// on the replicas too, so that its consumer continues on a new primary
// from where it was.
//
//   - Every standby synchronises them (sync_replication_slots, which
//     needs hot_standby_feedback and a dbname in primary_conninfo;
//     standbyArgs). The slot sync worker connects as the replicator, by
//     certificate, to the database postgres.
//   - The primary sends no change to a logical consumer before every
//     member has it (synchronized_standby_slots: the members' physical
//     slots, keepSlots): so no consumer holds a change a promoted replica
//     lacks. The cost: while a member is down, logical consumers of
//     failover slots wait for it (docs/logical-replication.md). It is set
//     with ALTER SYSTEM, not in the shared configuration: it names the
//     other members, different on each primary, and a name that is not a
//     slot there would stop every logical consumer.

// failoverSlots tells whether this instance's server keeps failover
// slots: PostgreSQL 17 or later, with wal_level logical.
func (c Config) failoverSlots() bool {
	level, _ := settingIn(filepath.Join(c.ConfigDir, contract.PostgresConfFile), "wal_level")
	return c.dataMajor() >= 17 && level == "logical"
}

// dataMajor is the PostgreSQL major of the data in PGDATA (its
// PG_VERSION), 0 when there is none.
func (c Config) dataMajor() int {
	version, err := os.ReadFile(filepath.Join(c.PGData, "PG_VERSION"))
	if err != nil {
		return 0
	}
	major, _ := strconv.Atoi(strings.TrimSpace(string(version)))
	return major
}

// failoverSlotArgs are the standby's settings for failover slots, when
// it keeps them.
func (c Config) failoverSlotArgs() []string {
	if !c.failoverSlots() {
		return nil
	}
	return []string{"-c", "sync_replication_slots=on", "-c", "hot_standby_feedback=on"}
}

// alignFailoverSlots: a primary's synchronized_standby_slots are the
// members' slots; a replica has no failover slot left from a time it was
// the primary (pg_rewind keeps them), since the slot sync worker stops at
// a slot of a synchronised one's name that it did not make. A failover
// slot a standby did not synchronise can only be such a one: PostgreSQL
// refuses to make one on a standby.
func (k *slotKeeping) alignFailoverSlots(ctx context.Context, conn *pgx.Conn, slots []string) error {
	if k.pg.role != asPrimary {
		rows, err := conn.Query(ctx, `WITH dropped AS (SELECT slot_name, pg_drop_replication_slot(slot_name) FROM pg_replication_slots
			WHERE slot_type = 'logical' AND failover AND NOT synced AND NOT active) SELECT slot_name::text FROM dropped`)
		if err != nil {
			return fmt.Errorf("dropping the failover slots left from a time as the primary: %w", err)
		}
		dropped, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if len(dropped) > 0 {
			k.log("dropped the failover slots %v left from a time as the primary: the replicas' copies are kept from the primary's", dropped)
		}
		return err
	}
	want := strings.Join(slots, ",")
	var have string
	if err := conn.QueryRow(ctx, "SELECT current_setting('synchronized_standby_slots')").Scan(&have); err != nil {
		return err
	}
	if have == want {
		return nil
	}
	if err := each(ctx, conn, []string{standbySlotsSQL(want)}); err != nil {
		return err
	}
	_, err := conn.Exec(ctx, "SELECT pg_reload_conf()")
	k.log("synchronized_standby_slots = %q: logical consumers of failover slots get a change once every member has it", want)
	return err
}

// standbySlotsSQL sets synchronized_standby_slots to slots (names joined
// by commas).
func standbySlotsSQL(slots string) string {
	return "ALTER SYSTEM SET synchronized_standby_slots = " + literal(slots)
}

package instance

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"example.com/myoperator/internal/contract"
)

func TestSlotName(t *testing.T) {
	if got, want := slotName("orders-12"), "mydb_orders_12"; got != want {
		t.Errorf("slotName = %q, want %q", got, want)
	}
	// The longest pod name: a 52-character MyDatabase and a one-digit
	// ordinal (spec.replicas is at most 9). PostgreSQL's limit is 63.
	long := "a23456789-123456789-123456789-123456789-123456789-12-8"
	if got := slotName(long); len(got) > 63 {
		t.Errorf("slotName(%q) = %q: %d characters, PostgreSQL takes at most 63", long, got, len(got))
	}
}

func TestSlotChanges(t *testing.T) {
	members := []string{"mydb_shop_1", "mydb_shop_2"}
	for _, tc := range []struct {
		name         string
		have         []slot
		want         []string
		drop, create []string
	}{
		{name: "a new primary makes one per member", want: members, create: members},
		{name: "in place: nothing to do", want: members,
			have: []slot{{name: "mydb_shop_1", active: true}, {name: "mydb_shop_2"}}},
		{name: "a member scaled away: its slot goes", want: members[:1],
			have: []slot{{name: "mydb_shop_1"}, {name: "mydb_shop_2"}}, drop: []string{"mydb_shop_2"}},
		{name: "one still streaming is left until it stops", want: members[:1],
			have: []slot{{name: "mydb_shop_1"}, {name: "mydb_shop_2", active: true}}},
		{name: "a lost slot is made anew", want: members,
			have: []slot{{name: "mydb_shop_1", lost: true}, {name: "mydb_shop_2"}},
			drop: []string{"mydb_shop_1"}, create: []string{"mydb_shop_1"}},
		{name: "a replica keeps none: its own slot from a time as primary goes", want: nil,
			have: []slot{{name: "mydb_shop_0"}, {name: "mydb_shop_2", lost: true}}, drop: []string{"mydb_shop_0", "mydb_shop_2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			drop, create := slotChanges(tc.have, tc.want)
			if !slices.Equal(drop, tc.drop) || !slices.Equal(create, tc.create) {
				t.Errorf("slotChanges = drop %q, create %q; want drop %q, create %q", drop, create, tc.drop, tc.create)
			}
		})
	}
}

func TestSlotBound(t *testing.T) {
	for size, want := range map[uint64]string{
		0:         "128MB",
		1 << 30:   "256MB", // the default 1Gi volume
		100 << 30: "25600MB",
	} {
		if got := slotBound(size); got != want {
			t.Errorf("slotBound(%d) = %s, want %s", size, got, want)
		}
	}

	dir := t.TempDir()
	c := Config{ConfigDir: dir, PGData: dir}
	conf := filepath.Join(dir, contract.PostgresConfFile)
	if err := os.WriteFile(conf, []byte("wal_keep_size = '128MB'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if args := c.slotBoundArgs(); len(args) != 2 || args[0] != "-c" {
		t.Errorf("slotBoundArgs = %q, want the bound on the command line", args)
	}
	if err := os.WriteFile(conf, []byte("max_slot_wal_keep_size = '5GB'\nwal_keep_size = '128MB'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if args := c.slotBoundArgs(); args != nil {
		t.Errorf("slotBoundArgs = %q with max_slot_wal_keep_size in postgresql.conf, want none: spec.parameters decide", args)
	}
}

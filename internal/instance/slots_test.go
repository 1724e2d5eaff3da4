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

func TestFailoverSlots(t *testing.T) {
	for name, tc := range map[string]struct {
		version, conf string
		want          bool
	}{
		"17, logical":  {"17\n", "hot_standby = 'on'\nwal_level = 'logical'\n", true},
		"18, logical":  {"18\n", "wal_level = 'logical'\n", true},
		"17, replica":  {"17\n", "wal_level = 'replica'\n", false},
		"15, logical":  {"15\n", "wal_level = 'logical'\n", false},
		"no data yet":  {"", "wal_level = 'logical'\n", false},
		"no wal_level": {"17\n", "hot_standby = 'on'\n", false},
	} {
		t.Run(name, func(t *testing.T) {
			c := Config{PGData: t.TempDir(), ConfigDir: t.TempDir()}
			if tc.version != "" {
				if err := os.WriteFile(filepath.Join(c.PGData, "PG_VERSION"), []byte(tc.version), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(c.ConfigDir, contract.PostgresConfFile), []byte(tc.conf), 0o600); err != nil {
				t.Fatal(err)
			}
			got := c.failoverSlotArgs()
			if want := []string{"-c", "sync_replication_slots=on", "-c", "hot_standby_feedback=on"}; tc.want && !slices.Equal(got, want) || !tc.want && got != nil {
				t.Errorf("failoverSlotArgs %q, want them: %t", got, tc.want)
			}
		})
	}
}

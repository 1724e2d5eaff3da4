package instance

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"example.com/myoperator/internal/contract"
)

func TestSubscriptionPlan(t *testing.T) {
	orders := contract.Subscription{Name: "orders", Publications: []string{"sales", "orders"}, Enabled: true, CopyData: true, Failover: true}
	const conninfo = "host='shop-rw.prod.svc' user='mydatabase_logical'"
	quoted := `'host=''shop-rw.prod.svc'' user=''mydatabase_logical'''`
	for name, tc := range map[string]struct {
		want     contract.Subscription
		have     *pgSubscription
		failover bool
		plan     []string
	}{
		"created, a failover slot on 17": {orders, nil, true, []string{`CREATE SUBSCRIPTION "orders" CONNECTION ` + quoted +
			` PUBLICATION "orders", "sales" WITH (enabled = true, copy_data = true, synchronous_commit = 'on', failover = true)`}},
		"created before 17: no failover option": {orders, nil, false, []string{`CREATE SUBSCRIPTION "orders" CONNECTION ` + quoted +
			` PUBLICATION "orders", "sales" WITH (enabled = true, copy_data = true, synchronous_commit = 'on')`}},
		"created disabled, without copying, failover off": {contract.Subscription{Name: "orders", Publications: []string{"orders"}}, nil, true,
			[]string{`CREATE SUBSCRIPTION "orders" CONNECTION ` + quoted + ` PUBLICATION "orders" WITH (enabled = false, copy_data = false, synchronous_commit = 'on')`}},
		"as declared: nothing": {orders, &pgSubscription{conninfo: conninfo, publications: []string{"orders", "sales"}, enabled: true}, true, nil},
		"connection, publications and enabled put back": {orders, &pgSubscription{conninfo: "host='old'", publications: []string{"orders"}}, true,
			[]string{`ALTER SUBSCRIPTION "orders" CONNECTION ` + quoted, `ALTER SUBSCRIPTION "orders" ENABLE`,
				`ALTER SUBSCRIPTION "orders" SET PUBLICATION "orders", "sales" WITH (refresh = true)`}},
		"disabled after its publications change (no refresh)": {contract.Subscription{Name: "orders", Publications: []string{"orders"}},
			&pgSubscription{conninfo: conninfo, publications: []string{"orders", "sales"}, enabled: true}, true,
			[]string{`ALTER SUBSCRIPTION "orders" SET PUBLICATION "orders" WITH (refresh = false)`, `ALTER SUBSCRIPTION "orders" DISABLE`}},
		"absent, there: dropped": {contract.Subscription{Name: "orders", Absent: true}, &pgSubscription{}, true, []string{`DROP SUBSCRIPTION "orders"`}},
		"absent, gone: nothing":  {contract.Subscription{Name: "orders", Absent: true}, nil, true, nil},
	} {
		t.Run(name, func(t *testing.T) {
			if plan := subscriptionPlan(tc.want, conninfo, tc.have, tc.failover); !slices.Equal(plan, tc.plan) {
				t.Errorf("plan\n%q\nwant\n%q", plan, tc.plan)
			}
		})
	}
}

func TestPublisherOf(t *testing.T) {
	ca := []byte("-----BEGIN CERTIFICATE-----\n")
	generated := map[string][]byte{ // as specs.RoleSecret makes it
		"uri":      []byte("postgresql://mydatabase_logical:s3cr%27t@shop-rw.prod.svc:5432/shop?sslmode=verify-full"),
		"password": []byte(`s3cr't:\`),
		"ca.crt":   ca,
	}
	p, err := publisherOf(generated, "")
	if err != nil {
		t.Fatal(err)
	}
	const want = `connect_timeout='10' dbname='shop' host='shop-rw.prod.svc' passfile='/run/x.pgpass' port='5432' sslmode='verify-full' sslrootcert='/run/x.crt' user='mydatabase_logical'`
	if got := p.conninfo("/run/x.pgpass", "/run/x.crt"); got != want {
		t.Errorf("conninfo\n%s\nwant\n%s", got, want)
	}
	if line := passfileLine(p.password); line != `*:*:*:*:s3cr't\:\\`+"\n" {
		t.Errorf("passfile line %q: the password's colon and backslash must be escaped", line)
	}

	// Another database; the URI's password when the Secret has none (the
	// one in its query never used); its connect_timeout; no CA.
	p, err = publisherOf(map[string][]byte{"uri": []byte("postgres://cdc:pw@db.example.com/app?sslmode=require&password=leak&connect_timeout=3")}, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.conninfo("/f", "/c"), `connect_timeout='3' dbname='orders' host='db.example.com' passfile='/f' sslmode='require' user='cdc'`; got != want {
		t.Errorf("conninfo\n%s\nwant\n%s", got, want)
	}
	if p.password != "pw" {
		t.Errorf("password %q, want the URI's", p.password)
	}
	p, _ = publisherOf(map[string][]byte{"uri": []byte("postgresql://cdc@db.example.com/app")}, "")
	if got, want := p.conninfo("/f", "/c"), `connect_timeout='10' dbname='app' host='db.example.com' user='cdc'`; got != want {
		t.Errorf("without a password\n%s\nwant\n%s", got, want)
	}

	for name, data := range map[string]map[string][]byte{
		`it has no "uri" key`:                                               {"password": []byte("x")},
		`its "uri" is not a postgresql://host URI`:                          {"uri": []byte("mysql://h/db")},
		"it names no database: give its uri a path, or set source.database": {"uri": []byte("postgresql://h")},
	} {
		if _, err := publisherOf(data, ""); err == nil || err.Error() != name {
			t.Errorf("%v: got %v, want %q", data, err, name)
		}
	}
}

func TestWriteIfChanged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "subscriptions", "app.orders.pgpass")
	if err := writeIfChanged(path, []byte("one")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%v, mode %v: libpq ignores a passfile others may read", err, fi.Mode())
	}
	before := fi.ModTime()
	if err := writeIfChanged(path, []byte("one")); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); !fi.ModTime().Equal(before) {
		t.Error("the same content was written again")
	}
	if err := writeIfChanged(path, []byte("two")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "two" {
		t.Errorf("content %q, want two", b)
	}
}

func TestSlotGone(t *testing.T) {
	for err, want := range map[error]bool{
		errors.New(`could not drop replication slot "orders_sub" on publisher: ERROR:  replication slot "orders_sub" does not exist`): true,
		errors.New(`could not connect to the publisher: connection refused`):                                                          false,
		errors.New(`subscription "orders_sub" does not exist`):                                                                        false,
	} {
		if got := slotGone(err); got != want {
			t.Errorf("slotGone(%q) = %t, want %t", err, got, want)
		}
	}
	if slotGone(nil) {
		t.Error("slotGone(nil)")
	}
}

func TestWorkerErrors(t *testing.T) {
	start := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	var w workerErrors
	known := false
	for _, step := range []struct {
		after   time.Duration
		count   int64
		failing bool
		why     string
	}{
		{0, 3, false, "first seen with 3 errors: a baseline, not a failure"},
		{4 * time.Second, 3, false, "no new error"},
		{8 * time.Second, 4, true, "a new error"},
		{12 * time.Second, 4, true, "within a minute of it"},
		{68 * time.Second, 4, false, "a minute without one"},
		{72 * time.Second, 0, false, "its stats reset (a new primary): a new baseline"},
		{76 * time.Second, 1, true, "a new error after the reset"},
	} {
		var failing bool
		w, failing = w.next(known, step.count, start.Add(step.after))
		known = true
		if failing != step.failing {
			t.Errorf("%s: failing %t, want %t", step.why, failing, step.failing)
		}
	}
}

package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// TestLogicalReplication: spec.replication.logical on real servers (a
// primary and a replica) with their operator. They run with
// wal_level=logical; a declared
// publication of a table that does not exist yet is reported until the
// table is made; the operator's mydatabase_logical role logs in with its
// generated Secret's password and streams the publication with pgoutput,
// as a subscriber or a change data capture tool does: an insert into the
// published table arrives, one into a table outside it does not. Then a
// second MyDatabase subscribes to it (subscribeTo).
func TestLogicalReplication(t *testing.T) {
	t.Parallel() // doc.go: which tests run side by side
	servers := findServers(t)
	srv := servers[len(servers)-1]
	db := newDatabase(srv.major, nil)
	db.Spec.Replicas = new(int32(2))
	db.Spec.Replication.Logical = true
	db.Spec.Databases = []databasev1alpha1.DatabaseSpec{{Name: db.Spec.DatabaseName,
		Publications: []databasev1alpha1.PublicationSpec{{Name: "orders_pub", Tables: []string{"orders"}}}}}
	const appPassword = "app-password"
	c := newCluster(t, srv, db, specs.CredentialsSecret(db, appPassword))
	pods := c.startPods(t, 2)
	c.op = c.startOperator(t)
	primary := pods[0]
	front := c.front(t, pods)
	su := primary.socket("postgres", db.Spec.DatabaseName)
	app := tcp(primary.port, db.Spec.User, db.Spec.DatabaseName)
	ctx := context.Background()

	if got := c.query(t, su, "", "SHOW wal_level"); got != "logical" {
		t.Fatalf("wal_level %q", got)
	}
	c.databasesApplied(t, metav1.ConditionFalse, `publication orders_pub: relation "public.orders" does not exist`)
	c.query(t, app, appPassword, "CREATE TABLE orders (id int PRIMARY KEY)", "CREATE TABLE drafts (id int PRIMARY KEY)")
	got := c.databasesApplied(t, metav1.ConditionTrue, "the primary applied")
	if ps := got.Status.Databases[0].Publications; len(ps) != 1 || !ps[0].Applied {
		t.Errorf("status.databases[0].publications %+v", ps)
	}
	var logical *databasev1alpha1.RoleStatus
	for i, r := range got.Status.Roles {
		if r.Name == specs.LogicalRole {
			logical = &got.Status.Roles[i]
		}
	}
	if logical == nil || !logical.Applied || logical.PasswordSecret != specs.GeneratedRoleSecretName(db, specs.LogicalRole) {
		t.Fatalf("status.roles %+v: want %s applied, its password in %s", got.Status.Roles, specs.LogicalRole,
			specs.GeneratedRoleSecretName(db, specs.LogicalRole))
	}
	secret := &corev1.Secret{}
	if err := c.api.Client.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: logical.PasswordSecret}, secret); err != nil {
		t.Fatal(err)
	}

	streamFirstInsert(t, tcp(primary.port, specs.LogicalRole, db.Spec.DatabaseName), string(secret.Data[specs.SecretPasswordKey]), func() {
		c.query(t, app, appPassword, "INSERT INTO drafts VALUES (7)", "INSERT INTO orders VALUES (42)")
	})

	subscribeTo(t, c, secret, func(id int) {
		c.query(t, tcp(front.Port(), db.Spec.User, db.Spec.DatabaseName), appPassword, fmt.Sprintf("INSERT INTO orders VALUES (%d)", id))
	})
}

// subscribeTo subscribes a second MyDatabase, in another namespace of the
// same API server, to the publisher's orders_pub through a Secret made
// from the publisher's mydatabase_logical Secret (logical), with a uri to
// the publisher's read-write front, as a Service would be: the
// harness has no Service names, so the subscription to a MyDatabase by
// name, and failover slots (PostgreSQL 17), are proven on real pods
// (test/real). The subscription is reported until the table it receives
// exists; rows copied and streamed arrive; the password is in no catalog.
// Before 17, the publisher's failover loses the slot, and the remedy is
// what docs/logical-replication.md says. ensure: absent drops the
// subscription and its slot on the publisher.
func subscribeTo(t *testing.T, publisher *cluster, logical *corev1.Secret, insert func(id int)) {
	feed := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "shop-feed", Namespace: "analytics"}, Data: map[string][]byte{
		"uri":      []byte(fmt.Sprintf("postgresql://%s@%s/%s?sslmode=verify-ca", specs.LogicalRole, publisher.rw.Addr(), publisher.db.Spec.DatabaseName)),
		"password": logical.Data[specs.SecretPasswordKey],
		"ca.crt":   logical.Data[specs.CACertKey],
	}}
	if len(feed.Data["ca.crt"]) == 0 {
		t.Fatalf("Secret %s has no ca.crt", logical.Name)
	}
	db := newDatabase(publisher.srv.major, nil)
	db.Name, db.Namespace, db.UID = "stats", "analytics", ""
	db.Spec.Replicas = new(int32(1))
	db.Spec.Databases = []databasev1alpha1.DatabaseSpec{{Name: db.Spec.DatabaseName,
		Subscriptions: []databasev1alpha1.SubscriptionSpec{{Name: "orders_sub", Publications: []string{"orders_pub"},
			Source: databasev1alpha1.SubscriptionSource{SecretName: feed.Name}}}}}
	const password = "stats-password"
	c := newClusterOn(t, publisher.api, publisher.srv, db, specs.CredentialsSecret(db, password), feed)
	primary := c.startPods(t, 1)[0]
	c.op = c.startOperator(t)
	app := tcp(primary.port, db.Spec.User, db.Spec.DatabaseName)
	su := primary.socket("postgres", db.Spec.DatabaseName)

	c.databasesApplied(t, metav1.ConditionFalse, `subscription orders_sub: relation "public.orders" does not exist`)
	c.query(t, app, password, "CREATE TABLE orders (id int PRIMARY KEY)")
	got := c.databasesApplied(t, metav1.ConditionTrue, "the primary applied")
	if ss := got.Status.Databases[0].Subscriptions; len(ss) != 1 || !ss[0].Applied {
		t.Errorf("status.databases[0].subscriptions %+v", ss)
	}
	rows := func(want string) {
		t.Helper()
		eventually(t, 30*time.Second, "the subscriber's orders "+want, func() (bool, string) {
			got, err := c.psql(app, password, "SELECT coalesce(string_agg(id::text, ',' ORDER BY id), '') FROM orders")
			return err == nil && got == want, got
		})
	}
	rows("42") // copied when the subscription began
	insert(43)
	rows("42,43") // streamed
	conninfo := c.query(t, su, "", "SELECT subconninfo FROM pg_subscription")
	if strings.Contains(conninfo, string(feed.Data["password"])) || !strings.Contains(conninfo, "passfile=") {
		t.Errorf("subconninfo %q: the password must stay in the passfile, out of the catalog", conninfo)
	}

	ensure := func(e databasev1alpha1.Ensure, subscriptions string) {
		t.Helper()
		c.updateDatabase(t, func(db *databasev1alpha1.MyDatabase) { db.Spec.Databases[0].Subscriptions[0].Ensure = e })
		c.databasesApplied(t, metav1.ConditionTrue, "the primary applied")
		if n := c.query(t, su, "", "SELECT count(*) FROM pg_subscription"); n != subscriptions {
			t.Fatalf("%s subscriptions after ensure: %s, want %s", n, e, subscriptions)
		}
	}

	if publisher.srv.major < 17 {
		// The publisher's primary is lost: the new one has no slot, the
		// subscription cannot go on.
		offset := primary.logSize()
		publisher.pods[0].killContainer(t)
		publisher.waitPrimary(t, publisher.pods[1:], time.Minute)
		insert(44)
		// The status says the subscription fails, the server log why.
		c.databasesApplied(t, metav1.ConditionFalse, "subscription orders_sub: its worker failed within the last minute")
		eventually(t, time.Minute, "the subscriber told its slot is gone", func() (bool, string) {
			return strings.Contains(primary.log(offset), `replication slot "orders_sub" does not exist`), "not in its log yet"
		})
		rows("42,43")
		// The remedy: absent (dropped without its slot), the table
		// emptied, present again (copied anew).
		ensure(databasev1alpha1.EnsureAbsent, "0")
		c.query(t, app, password, "TRUNCATE orders")
		ensure(databasev1alpha1.EnsurePresent, "1")
		rows("42,43,44")
	}

	ensure(databasev1alpha1.EnsureAbsent, "0")
	publisherSU := publisher.labelledPrimary(context.Background(), publisher.pods).socket("postgres", publisher.db.Spec.DatabaseName)
	if n := publisher.query(t, publisherSU, "", "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'orders_sub'"); n != "0" {
		t.Errorf("the subscription's slot is left on the publisher")
	}
}

// databasesApplied waits for the MyDatabase's DatabasesApplied condition
// to be want, its message holding says, and returns the MyDatabase.
func (c *cluster) databasesApplied(t *testing.T, want metav1.ConditionStatus, says string) *databasev1alpha1.MyDatabase {
	t.Helper()
	got := &databasev1alpha1.MyDatabase{}
	eventually(t, time.Minute, fmt.Sprintf("%s: DatabasesApplied %s saying %q", c.db.Name, want, says), func() (bool, string) {
		if err := c.api.Client.Get(context.Background(), client.ObjectKeyFromObject(c.db), got); err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, databasev1alpha1.ConditionDatabasesApplied)
		if cond == nil {
			return false, "none"
		}
		return cond.ObservedGeneration == got.Generation && cond.Status == want && strings.Contains(cond.Message, says), cond.Message
	})
	return got
}

// streamFirstInsert logs in at conninfo with password for logical
// replication, streams the publication orders_pub with pgoutput from a
// new slot, runs insert, and checks that the first insert streamed is
// public.orders 42.
func streamFirstInsert(t *testing.T, conninfo, password string, insert func()) {
	ctx := context.Background()
	stream, err := pgconn.Connect(ctx, fmt.Sprintf("%s replication=database password=%s", conninfo, password))
	if err != nil {
		t.Fatalf("%s logging in for logical replication: %v", specs.LogicalRole, err)
	}
	defer func() { _ = stream.Close(context.Background()) }()
	slot, err := pglogrepl.CreateReplicationSlot(ctx, stream, "test_slot", "pgoutput", pglogrepl.CreateReplicationSlotOptions{Temporary: true})
	if err != nil {
		t.Fatal(err)
	}
	start, err := pglogrepl.ParseLSN(slot.ConsistentPoint)
	if err != nil {
		t.Fatal(err)
	}
	if err := pglogrepl.StartReplication(ctx, stream, "test_slot", start, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'orders_pub'"}}); err != nil {
		t.Fatal(err)
	}
	insert()

	relations := map[uint32]string{}
	deadline, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		msg, err := stream.ReceiveMessage(deadline)
		if err != nil {
			t.Fatalf("waiting for the insert into orders: %v", err)
		}
		data, ok := msg.(*pgproto3.CopyData)
		if !ok || data.Data[0] != pglogrepl.XLogDataByteID {
			continue
		}
		xld, err := pglogrepl.ParseXLogData(data.Data[1:])
		if err != nil {
			t.Fatal(err)
		}
		m, err := pglogrepl.Parse(xld.WALData)
		if err != nil {
			t.Fatal(err)
		}
		switch m := m.(type) {
		case *pglogrepl.RelationMessage:
			relations[m.RelationID] = m.Namespace + "." + m.RelationName
		case *pglogrepl.InsertMessage:
			row := fmt.Sprintf("%s %s", relations[m.RelationID], m.Tuple.Columns[0].Data)
			if row != "public.orders 42" {
				t.Fatalf("the first insert streamed is %q, want public.orders 42 (drafts is not published)", row)
			}
			return
		}
	}
}

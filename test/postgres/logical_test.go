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

// TestLogicalReplication: spec.replication.logical on a real server with
// its operator. The server runs with wal_level=logical; a declared
// publication of a table that does not exist yet is reported until the
// table is made; the operator's mydatabase_logical role logs in with its
// generated Secret's password and streams the publication with pgoutput,
// as a subscriber or a change data capture tool does: an insert into the
// published table arrives, one into a table outside it does not.
func TestLogicalReplication(t *testing.T) {
	servers := findServers(t)
	srv := servers[len(servers)-1]
	db := newDatabase(srv.major, nil)
	db.Spec.Replicas = new(int32(1))
	db.Spec.Replication.Logical = true
	db.Spec.Databases = []databasev1alpha1.DatabaseSpec{{Name: db.Spec.DatabaseName,
		Publications: []databasev1alpha1.PublicationSpec{{Name: "orders_pub", Tables: []string{"orders"}}}}}
	const appPassword = "app-password"
	c := newCluster(t, srv, db, specs.CredentialsSecret(db, appPassword))
	pods := c.startPods(t, 1)
	c.op = c.startOperator(t)
	primary := pods[0]
	su := primary.socket("postgres", db.Spec.DatabaseName)
	app := tcp(primary.port, db.Spec.User, db.Spec.DatabaseName)
	ctx := context.Background()

	if got := c.query(t, su, "", "SHOW wal_level"); got != "logical" {
		t.Fatalf("wal_level %q", got)
	}
	condition := func(want metav1.ConditionStatus, says string) *databasev1alpha1.MyDatabase {
		t.Helper()
		got := &databasev1alpha1.MyDatabase{}
		eventually(t, time.Minute, fmt.Sprintf("DatabasesApplied %s saying %q", want, says), func() (bool, string) {
			if err := c.api.Client.Get(ctx, client.ObjectKeyFromObject(db), got); err != nil {
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
	condition(metav1.ConditionFalse, `publication orders_pub: relation "public.orders" does not exist`)
	c.query(t, app, appPassword, "CREATE TABLE orders (id int PRIMARY KEY)", "CREATE TABLE drafts (id int PRIMARY KEY)")
	got := condition(metav1.ConditionTrue, "the primary applied")
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

	stream, err := pgconn.Connect(ctx, fmt.Sprintf("%s replication=database password=%s", tcp(primary.port, specs.LogicalRole, db.Spec.DatabaseName),
		secret.Data[specs.SecretPasswordKey]))
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
	c.query(t, app, appPassword, "INSERT INTO drafts VALUES (7)", "INSERT INTO orders VALUES (42)")

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

package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// TestDeclaredRoles declares roles on a running MyDatabase with its
// operator and three real servers: the primary's instance manager creates
// them as declared, each logs in with the password of its Secret, a
// changed Secret is applied, a role changed by hand is put back, a role
// not declared is never touched, removing an entry drops nothing, ensure:
// absent drops, and a role that cannot be dropped is reported with
// PostgreSQL's reason.
func TestDeclaredRolesAndDatabases(t *testing.T) {
	t.Parallel() // doc.go: which tests run side by side
	ha := startHA(t, nil)
	c := ha.c
	ctx := context.Background()
	api := c.api.Client
	ns := c.db.Namespace
	front := strings.Split(strings.Fields(ha.conninfo)[1], "=")[1]
	// Declared roles hold no privilege on the application's database:
	// its owner, the application user, grants them CONNECT (as its
	// migrations would).
	login := func(role, password string) string {
		return fmt.Sprintf("host=127.0.0.1 port=%s user=%s dbname=%s sslmode=disable password=%s connect_timeout=5",
			front, role, c.db.Spec.DatabaseName, password)
	}
	primary := func() string {
		return c.labelledPrimary(ctx, ha.pods).socket("postgres", "postgres")
	}
	setRoles := func(roles ...databasev1alpha1.RoleSpec) {
		t.Helper()
		c.updateDatabase(t, func(db *databasev1alpha1.MyDatabase) { db.Spec.Roles = roles })
	}
	// condition waits for the condition kind of the current generation
	// with status and reason, and returns the MyDatabase.
	condition := func(kind string, status metav1.ConditionStatus, reason string) *databasev1alpha1.MyDatabase {
		t.Helper()
		db := &databasev1alpha1.MyDatabase{}
		eventually(t, time.Minute, kind+" "+string(status)+"/"+reason, func() (bool, string) {
			if err := api.Get(ctx, client.ObjectKeyFromObject(c.db), db); err != nil {
				return false, err.Error()
			}
			cond := meta.FindStatusCondition(db.Status.Conditions, kind)
			if cond == nil {
				return false, "no condition"
			}
			return cond.ObservedGeneration == db.Generation && cond.Status == status && cond.Reason == reason, cond.Reason + ": " + cond.Message
		})
		return db
	}
	applied := func(status metav1.ConditionStatus, reason string) *databasev1alpha1.MyDatabase {
		t.Helper()
		return condition(databasev1alpha1.ConditionRolesApplied, status, reason)
	}
	secretPassword := func(name string) string {
		t.Helper()
		s := &corev1.Secret{}
		if err := api.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
			t.Fatal(err)
		}
		return string(s.Data[specs.SecretPasswordKey])
	}
	setSecret := func(name, password string) {
		t.Helper()
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if _, err := controllerutil.CreateOrUpdate(ctx, api, s, func() error {
			s.StringData = map[string]string{specs.SecretPasswordKey: password}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}

	setSecret("migrator-password", "migrator-password-1")
	c.query(t, primary(), "", "CREATE ROLE by_hand NOLOGIN")
	analyst := databasev1alpha1.RoleSpec{Name: "analyst", InRoles: []string{"pg_read_all_data"}, Comment: "the analysts' role",
		ConnectionLimit: ptr.To(int32(10))}
	migrator := databasev1alpha1.RoleSpec{Name: "migrator", CreateDB: true, PasswordSecret: &databasev1alpha1.SecretReference{Name: "migrator-password"}}
	batch := databasev1alpha1.RoleSpec{Name: "batch_jobs", Login: ptr.To(false), InRoles: []string{"analyst"}}
	setRoles(analyst, migrator, batch)
	db := applied(metav1.ConditionTrue, databasev1alpha1.ReasonRolesApplied)

	t.Run("created as declared", func(t *testing.T) {
		got := c.query(t, primary(), "", `SELECT string_agg(format('%s %s %s %s %s %s', r.rolname, r.rolcanlogin, r.rolcreatedb, r.rolinherit, r.rolconnlimit,
			coalesce(shobj_description(r.oid, 'pg_authid'), '-')), '; ' ORDER BY r.rolname) FROM pg_roles r WHERE r.rolname IN ('analyst', 'migrator', 'batch_jobs')`)
		want := "analyst t f t 10 the analysts' role; batch_jobs f f t -1 -; migrator t t t -1 -"
		if got != want {
			t.Errorf("roles\n%s\nwant\n%s", got, want)
		}
		members := c.query(t, primary(), "", `SELECT string_agg(m.rolname || ' in ' || g.rolname, ', ' ORDER BY m.rolname) FROM pg_auth_members a
			JOIN pg_roles m ON m.oid = a.member JOIN pg_roles g ON g.oid = a.roleid WHERE m.rolname IN ('analyst', 'migrator', 'batch_jobs')`)
		if members != "analyst in pg_read_all_data, batch_jobs in analyst" {
			t.Errorf("memberships %q", members)
		}
		for _, rs := range db.Status.Roles {
			if !rs.Applied || rs.Message != "" {
				t.Errorf("status.roles %+v", rs)
			}
		}
	})

	t.Run("each logs in with its Secret's password", func(t *testing.T) {
		c.refused(t, login("migrator", "migrator-password-1"), "", "permission denied for database", "SELECT 1")
		c.query(t, ha.conninfo, "", fmt.Sprintf("GRANT CONNECT ON DATABASE %q TO analyst, migrator", c.db.Spec.DatabaseName))
		generated := specs.GeneratedRoleSecretName(db, "analyst")
		if got := c.query(t, login("analyst", secretPassword(generated)), "", "SELECT current_user"); got != "analyst" {
			t.Errorf("logged in as %q with %s", got, generated)
		}
		if got := c.query(t, login("migrator", "migrator-password-1"), "", "SELECT current_user"); got != "migrator" {
			t.Errorf("logged in as %q", got)
		}
		// The plaintext never reached a server's log: ALTER ROLE was sent
		// with a verifier.
		for _, p := range ha.pods {
			if strings.Contains(p.log(0), "migrator-password-1") {
				t.Errorf("%s's container log holds migrator's password", p.name)
			}
		}
	})

	t.Run("a changed Secret is applied", func(t *testing.T) {
		setSecret("migrator-password", "migrator-password-2")
		eventually(t, time.Minute, "the new password accepted", func() (bool, string) {
			out, err := c.psql(login("migrator", "migrator-password-2"), "", "SELECT current_user")
			return err == nil && out == "migrator", out
		})
		c.refused(t, login("migrator", "migrator-password-1"), "", "password authentication failed", "SELECT 1")
	})

	t.Run("changed by hand: put back; not declared: untouched", func(t *testing.T) {
		c.query(t, primary(), "", "ALTER ROLE analyst CONNECTION LIMIT 1", "ALTER ROLE by_hand LOGIN")
		eventually(t, time.Minute, "analyst's connection limit back to 10", func() (bool, string) {
			out, err := c.psql(primary(), "", "SELECT rolconnlimit FROM pg_roles WHERE rolname = 'analyst'")
			return err == nil && out == "10", out
		})
		if got := c.query(t, primary(), "", "SELECT rolcanlogin FROM pg_roles WHERE rolname = 'by_hand'"); got != "t" {
			t.Errorf("the undeclared role by_hand was changed: rolcanlogin %s", got)
		}
	})

	t.Run("removed from the list: kept; absent: dropped; one that owns objects: reported", func(t *testing.T) {
		c.query(t, primary(), "", "CREATE TABLE migrations (id int)", "ALTER TABLE migrations OWNER TO migrator")
		migrator.Ensure, migrator.PasswordSecret = databasev1alpha1.EnsureAbsent, nil
		batch.Ensure = databasev1alpha1.EnsureAbsent
		setRoles(migrator, batch) // analyst no longer listed
		db := applied(metav1.ConditionFalse, databasev1alpha1.ReasonRoleNotApplied)
		cond := meta.FindStatusCondition(db.Status.Conditions, databasev1alpha1.ConditionRolesApplied)
		if !strings.Contains(cond.Message, `migrator: role "migrator" cannot be dropped because some objects depend on it`) {
			t.Errorf("RolesApplied says %q", cond.Message)
		}
		got := c.query(t, primary(), "", "SELECT string_agg(rolname, ',' ORDER BY rolname) FROM pg_roles WHERE rolname IN ('analyst', 'migrator', 'batch_jobs')")
		if got != "analyst,migrator" {
			t.Errorf("roles left %q, want analyst (no longer declared) and migrator (owns a table, may connect)", got)
		}
		c.query(t, primary(), "", "DROP TABLE migrations")
		c.query(t, ha.conninfo, "", fmt.Sprintf("REVOKE CONNECT ON DATABASE %q FROM migrator", c.db.Spec.DatabaseName))
		applied(metav1.ConditionTrue, databasev1alpha1.ReasonRolesApplied)
		if got := c.query(t, primary(), "", "SELECT count(*) FROM pg_roles WHERE rolname = 'migrator'"); got != "0" {
			t.Errorf("migrator still there once it owns nothing")
		}
	})

	t.Run("databases and their extensions: created as declared; one the image lacks reported alone", func(t *testing.T) {
		c.updateDatabase(t, func(db *databasev1alpha1.MyDatabase) {
			db.Spec.Roles = []databasev1alpha1.RoleSpec{analyst}
			db.Spec.Databases = []databasev1alpha1.DatabaseSpec{
				{Name: c.db.Spec.DatabaseName, Extensions: []databasev1alpha1.ExtensionSpec{{Name: "pg_trgm"}}},
				{Name: "reports", Owner: "analyst", Comment: "the analysts' reports", Extensions: []databasev1alpha1.ExtensionSpec{
					{Name: "pg_stat_statements"}, {Name: "vector"}}},
			}
		})
		db := condition(databasev1alpha1.ConditionDatabasesApplied, metav1.ConditionFalse, databasev1alpha1.ReasonDatabaseNotApplied)
		cond := meta.FindStatusCondition(db.Status.Conditions, databasev1alpha1.ConditionDatabasesApplied)
		if cond.Message != `the primary could not apply reports extension vector: the image holds no extension "vector" (pg_available_extensions): `+
			`use an image that has it; change spec.databases or the database, and it tries again` {
			t.Errorf("DatabasesApplied says %q", cond.Message)
		}
		if got := c.query(t, primary(), "", `SELECT pg_get_userbyid(datdba) || ' ' || shobj_description(oid, 'pg_database') || ' ' ||
			has_database_privilege('public', oid, 'CONNECT') FROM pg_database WHERE datname = 'reports'`); got != "analyst the analysts' reports false" {
			t.Errorf("reports: owner, comment, PUBLIC may connect: %q", got)
		}
		for dbname, want := range map[string]string{"reports": "pg_stat_statements", c.db.Spec.DatabaseName: "pg_trgm"} {
			if got := c.query(t, c.labelledPrimary(ctx, ha.pods).socket("postgres", dbname), "",
				"SELECT string_agg(extname, ',') FROM pg_extension WHERE extname <> 'plpgsql'"); got != want {
				t.Errorf("extensions in %s: %q, want %q", dbname, got, want)
			}
		}
		st := db.Status.Databases
		if len(st) != 2 || !st[0].Applied || !st[1].Applied || len(st[1].Extensions) != 2 || !st[1].Extensions[0].Applied ||
			st[1].Extensions[1].Applied || !strings.Contains(st[1].Extensions[1].Message, "the image holds no extension") {
			t.Errorf("status.databases %+v", st)
		}
	})

	t.Run("a database with a session is not dropped, and the reason is said; once it ends, dropped", func(t *testing.T) {
		// The owner's session, held open.
		session, err := pgx.Connect(ctx, fmt.Sprintf("host=127.0.0.1 port=%s user=analyst dbname=reports sslmode=disable password=%s",
			front, secretPassword(specs.GeneratedRoleSecretName(c.db, "analyst"))))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = session.Close(ctx) }()
		c.updateDatabase(t, func(db *databasev1alpha1.MyDatabase) {
			db.Spec.Databases = []databasev1alpha1.DatabaseSpec{{Name: "reports", Ensure: databasev1alpha1.EnsureAbsent}}
		})
		db := condition(databasev1alpha1.ConditionDatabasesApplied, metav1.ConditionFalse, databasev1alpha1.ReasonDatabaseNotApplied)
		if msg := db.Status.Databases[0].Message; !strings.Contains(msg, `database "reports" is being accessed by other users`) {
			t.Errorf("status.databases[0].message %q", msg)
		}
		if err := session.Ping(ctx); err != nil {
			t.Errorf("the session was ended: %v", err)
		}
		_ = session.Close(ctx)
		condition(databasev1alpha1.ConditionDatabasesApplied, metav1.ConditionTrue, databasev1alpha1.ReasonDatabasesApplied)
		if got := c.query(t, primary(), "", "SELECT count(*) FROM pg_database WHERE datname = 'reports'"); got != "0" {
			t.Error("reports is still there")
		}
		// The application's database was only no longer listed: its
		// extension stays.
		if got := c.query(t, c.labelledPrimary(ctx, ha.pods).socket("postgres", c.db.Spec.DatabaseName), "",
			"SELECT count(*) FROM pg_extension WHERE extname = 'pg_trgm'"); got != "1" {
			t.Error("pg_trgm was dropped from the application's database when its entry was removed")
		}
	})
}

package v1alpha1_test

import (
	"context"
	"strings"
	"testing"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// TestRoleValidation: spec.roles at admission, as a user meets it: every
// refusal with its reason, and a declaration with the defaults filled in.
func TestRoleValidation(t *testing.T) {
	ctx := context.Background()
	role := func(fields map[string]any) map[string]any {
		r := map[string]any{"name": "analyst"}
		for k, v := range fields {
			r[k] = v
		}
		return r
	}
	roles := func(rs ...map[string]any) map[string]any {
		list := make([]any, 0, len(rs))
		for _, r := range rs {
			list = append(list, r)
		}
		return map[string]any{"roles": list}
	}
	for name, tc := range map[string]struct {
		spec map[string]any
		want string
	}{
		"upper-case name":    {roles(role(map[string]any{"name": "Analyst"})), "spec.roles[0].name"},
		"pg_ name":           {roles(role(map[string]any{"name": "pg_reader"})), "role names starting with pg_ are reserved"},
		"postgres":           {roles(role(map[string]any{"name": "postgres"})), "the operator's or PostgreSQL's own roles"},
		"mydatabase_logical": {roles(role(map[string]any{"name": "mydatabase_logical"})), "the operator's or PostgreSQL's own roles"},
		"member of the operator's logical role": {roles(role(map[string]any{"inRoles": []any{"mydatabase_logical"}})),
			"inRoles may not name postgres, replicator or a role starting with mydatabase_"},
		"replicator":                      {roles(role(map[string]any{"name": "replicator"})), "the operator's or PostgreSQL's own roles"},
		"spec.user":                       {roles(role(map[string]any{"name": "app"})), "roles may not declare spec.user"},
		"superuser":                       {roles(role(map[string]any{"superuser": true})), "superuser roles are not managed"},
		"replication":                     {roles(role(map[string]any{"replication": true})), "replication roles are not managed"},
		"member of itself":                {roles(role(map[string]any{"inRoles": []any{"analyst"}})), "a role cannot be a member of itself"},
		"member of postgres":              {roles(role(map[string]any{"inRoles": []any{"pg_monitor", "postgres"}})), "inRoles may not name postgres"},
		"member of the fence":             {roles(role(map[string]any{"inRoles": []any{"mydatabase_fence"}})), "inRoles may not name postgres"},
		"twice the same name":             {roles(role(nil), role(nil)), "Duplicate value"},
		"unknown ensure":                  {roles(role(map[string]any{"ensure": "gone"})), `Unsupported value: "gone"`},
		"connection limit -2":             {roles(role(map[string]any{"connectionLimit": int64(-2)})), "spec.roles[0].connectionLimit"},
		"absent with a password":          {roles(role(map[string]any{"ensure": "absent", "passwordSecret": map[string]any{"name": "s"}})), "a role being dropped has no password"},
		"validUntil not a time":           {roles(role(map[string]any{"validUntil": "never"})), "spec.roles[0].validUntil"},
		"none, which PostgreSQL reserves": {roles(role(map[string]any{"name": "none"})), "postgres, replicator, public, none and the names starting with mydatabase_"},
		"a name over 63 bytes": {roles(role(map[string]any{"name": strings.Repeat("a", 64)})),
			"spec.roles[0].name: Too long: may not be more than 63 bytes"},
		"a comment with a NUL": {roles(role(map[string]any{"comment": "a\x00b"})), "comment must not hold a NUL character: PostgreSQL's text cannot"},
	} {
		t.Run(name, func(t *testing.T) {
			err := env.Client.Create(ctx, manifest("roles-invalid", tc.spec), client.DryRunAll)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("create: %v, want an error containing %q", err, tc.want)
			}
		})
	}

	// Accepted, with the defaults: present, login, inherit, no limit.
	got := createValid(t, manifest("roles-valid", roles(
		role(map[string]any{"inRoles": []any{"pg_read_all_data"}, "superuser": false, "comment": "read-only, for the analysts"}),
		map[string]any{"name": "migrator", "createdb": true, "passwordSecret": map[string]any{"name": "migrator-password"}},
		map[string]any{"name": "old_app", "ensure": "absent"},
	)))
	r := got.Spec.Roles[0]
	if r.Ensure != databasev1alpha1.EnsurePresent || r.Login == nil || !*r.Login || r.Inherit == nil || !*r.Inherit ||
		r.ConnectionLimit == nil || *r.ConnectionLimit != -1 {
		t.Errorf("defaults not applied: %+v", r)
	}
}

// TestDatabaseValidation: spec.databases at admission: every refusal with
// its reason, the defaults, and the creation-only fields immutable.
func TestDatabaseValidation(t *testing.T) {
	ctx := context.Background()
	spec := func(databases ...map[string]any) map[string]any {
		list := make([]any, 0, len(databases))
		for _, d := range databases {
			list = append(list, d)
		}
		return map[string]any{"roles": []any{map[string]any{"name": "analyst"}, map[string]any{"name": "gone", "ensure": "absent"}},
			"databases": list}
	}
	logical := func(spec map[string]any) map[string]any {
		spec["replication"] = map[string]any{"logical": true}
		return spec
	}
	for name, tc := range map[string]struct {
		spec map[string]any
		want string
	}{
		"template1": {spec(map[string]any{"name": "template1"}), "PostgreSQL's own databases"},
		"a name over 63 bytes": {spec(map[string]any{"name": strings.Repeat("a", 64)}),
			"spec.databases[0].name: Too long: may not be more than 63 bytes"},
		"a comment with a NUL": {spec(map[string]any{"name": "reports", "comment": "a\x00b"}),
			"comment must not hold a NUL character: PostgreSQL's text cannot"},
		"a table name over 63 characters": {logical(spec(map[string]any{"name": "reports", "publications": []any{map[string]any{"name": "p",
			"tables": []any{"sales." + strings.Repeat("t", 64)}}}})), `spec.databases[0].publications[0].tables[0] in body should match '^([a-z_][a-z0-9_]{0,62}\.)?[a-z_][a-z0-9_]{0,62}$'`},
		"upper-case name":          {spec(map[string]any{"name": "Reports"}), "spec.databases[0].name"},
		"owner not declared":       {spec(map[string]any{"name": "reports", "owner": "someone"}), "a database's owner must be spec.user or a role declared present"},
		"owner declared absent":    {spec(map[string]any{"name": "reports", "owner": "gone"}), "a database's owner must be spec.user or a role declared present"},
		"the app database dropped": {spec(map[string]any{"name": "app", "ensure": "absent"}), "spec.databaseName may be listed in databases for its extensions and comment only"},
		"the app database's owner": {spec(map[string]any{"name": "app", "owner": "analyst"}), "spec.databaseName may be listed in databases for its extensions and comment only"},
		"the app database's locale": {spec(map[string]any{"name": "app", "locale": "C"}),
			"spec.databaseName may be listed in databases for its extensions and comment only"},
		"dropped with an extension present": {spec(map[string]any{"name": "reports", "ensure": "absent", "extensions": []any{map[string]any{"name": "vector"}}}),
			"a database with ensure: absent is dropped with its extensions"},
		"an extension twice": {spec(map[string]any{"name": "reports", "extensions": []any{map[string]any{"name": "vector"}, map[string]any{"name": "vector"}}}),
			"Duplicate value"},
		"a version with a quote": {spec(map[string]any{"name": "reports", "extensions": []any{map[string]any{"name": "vector", "version": "1'"}}}),
			"spec.databases[0].extensions[0].version"},
		"a publication without spec.replication.logical": {spec(map[string]any{"name": "reports", "publications": []any{map[string]any{"name": "p", "allTables": true}}}),
			"publications need spec.replication.logical: true"},
		"a publication with neither tables nor allTables": {logical(spec(map[string]any{"name": "reports", "publications": []any{map[string]any{"name": "p"}}})),
			"a publication lists its tables or sets allTables, one of the two"},
		"a publication with both": {logical(spec(map[string]any{"name": "reports", "publications": []any{map[string]any{"name": "p", "allTables": true,
			"tables": []any{"orders"}}}})), "a publication lists its tables or sets allTables, one of the two"},
		"a table name with a quote": {logical(spec(map[string]any{"name": "reports", "publications": []any{map[string]any{"name": "p",
			"tables": []any{`or"ders`}}}})), "spec.databases[0].publications[0].tables[0]"},
		"dropped with a publication present": {logical(spec(map[string]any{"name": "reports", "ensure": "absent",
			"publications": []any{map[string]any{"name": "p", "allTables": true}}})), "a database with ensure: absent is dropped with its publications"},
		"a subscription without publications": {spec(map[string]any{"name": "reports", "subscriptions": []any{map[string]any{"name": "s",
			"source": map[string]any{"myDatabase": "shop"}}}}), "a subscription names the publications it receives"},
		"a subscription with two sources": {spec(map[string]any{"name": "reports", "subscriptions": []any{map[string]any{"name": "s",
			"publications": []any{"p"}, "source": map[string]any{"myDatabase": "shop", "secretName": "ext"}}}}),
			"a subscription's source is a MyDatabase (source.myDatabase) or a Secret (source.secretName), one of the two"},
		"a subscription with no source": {spec(map[string]any{"name": "reports", "subscriptions": []any{map[string]any{"name": "s",
			"publications": []any{"p"}, "source": map[string]any{}}}}), "one of the two"},
		"a subscription to itself": {spec(map[string]any{"name": "reports", "subscriptions": []any{map[string]any{"name": "s",
			"publications": []any{"p"}, "source": map[string]any{"myDatabase": "databases-invalid"}}}}), "a server cannot subscribe to itself"},
		"dropped with a subscription present": {spec(map[string]any{"name": "reports", "ensure": "absent", "subscriptions": []any{map[string]any{"name": "s",
			"publications": []any{"p"}, "source": map[string]any{"secretName": "ext"}}}}), "a database with ensure: absent is dropped with its subscriptions"},
	} {
		t.Run(name, func(t *testing.T) {
			err := env.Client.Create(ctx, manifest("databases-invalid", tc.spec), client.DryRunAll)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("create: %v, want an error containing %q", err, tc.want)
			}
		})
	}

	got := createValid(t, manifest("databases-valid", logical(spec(
		map[string]any{"name": "app", "extensions": []any{map[string]any{"name": "pg_stat_statements"}}},
		map[string]any{"name": "reports", "owner": "analyst", "locale": "C", "template": "template0",
			"extensions":   []any{map[string]any{"name": "uuid-ossp", "schema": "ext"}},
			"publications": []any{map[string]any{"name": "orders", "tables": []any{"orders", "sales.lines"}}, map[string]any{"name": "old", "ensure": "absent"}},
			"subscriptions": []any{map[string]any{"name": "stock", "publications": []any{"stock"}, "source": map[string]any{"myDatabase": "warehouse", "database": "inventory"}},
				map[string]any{"name": "legacy", "publications": []any{"all"}, "source": map[string]any{"secretName": "legacy-db"}, "failover": false}}},
	))))
	if d := got.Spec.Databases[1]; d.Ensure != databasev1alpha1.EnsurePresent || d.Extensions[0].Ensure != databasev1alpha1.EnsurePresent {
		t.Errorf("defaults not applied: %+v", d)
	}
	if s := got.Spec.Databases[1].Subscriptions[0]; s.Ensure != databasev1alpha1.EnsurePresent || !*s.Enabled || !*s.CopyData || !*s.Failover {
		t.Errorf("subscription defaults not applied: %+v", s)
	}
	changed := got.DeepCopy()
	changed.Spec.Databases[1].Subscriptions[1].Failover = ptr.To(true)
	if err := env.Client.Update(ctx, changed, client.DryRunAll); err == nil || !strings.Contains(err.Error(), "failover applies when the subscription is created") {
		t.Errorf("failover changed: %v", err)
	}
	got.Spec.Databases[1].Locale = "en_US.UTF-8"
	if err := env.Client.Update(ctx, got, client.DryRunAll); err == nil || !strings.Contains(err.Error(), "locale applies when the database is created and cannot change") {
		t.Errorf("locale changed: %v", err)
	}
}

// createValid creates obj, which admission must accept, and returns it as
// the API server stored it (defaults filled in); it is deleted after t.
func createValid(t *testing.T, obj client.Object) *databasev1alpha1.MyDatabase {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, obj) })
	got := &databasev1alpha1.MyDatabase{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), got); err != nil {
		t.Fatal(err)
	}
	return got
}

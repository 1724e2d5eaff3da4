package specs

import (
	"slices"
	"strings"
	"testing"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// TestLogical: spec.replication.logical sets wal_level=logical and adds
// the operator's replication role, with a generated Secret the instance
// managers may read; without it, neither.
func TestLogical(t *testing.T) {
	plain := db()
	if !strings.Contains(PostgresConf(plain), "wal_level = 'replica'\n") || DeclaredOf(plain, false) != nil ||
		slices.Contains(PasswordSecretNames(plain), GeneratedRoleSecretName(plain, LogicalRole)) {
		t.Fatal("a MyDatabase without logical replication changed")
	}
	logical := db(func(d *databasev1alpha1.MyDatabase) { d.Spec.Replication.Logical = true })
	if conf := PostgresConf(logical); !strings.Contains(conf, "wal_level = 'logical'\n") {
		t.Errorf("postgresql.conf:\n%s", conf)
	}
	d := DeclaredOf(logical, false)
	if d == nil || len(d.Roles) != 1 {
		t.Fatalf("declared %v", d)
	}
	r := d.Roles[0]
	secret := GeneratedRoleSecretName(logical, LogicalRole)
	if r.Name != LogicalRole || !r.Login || !r.Replication || !slices.Equal(r.InRoles, []string{"pg_read_all_data"}) || r.PasswordSecret != secret {
		t.Errorf("the logical role %+v", r)
	}
	if !slices.Contains(PasswordSecretNames(logical), secret) || len(GeneratedRoles(logical)) != 1 {
		t.Errorf("readable %v, generated %v", PasswordSecretNames(logical), GeneratedRoles(logical))
	}
}

package instance

import (
	"slices"
	"testing"
	"time"

	"example.com/myoperator/internal/contract"
)

func TestRolePlan(t *testing.T) {
	until := time.Date(2027, 1, 31, 0, 0, 0, 0, time.UTC)
	analyst := contract.Role{Name: "analyst", Login: true, Inherit: true, ConnectionLimit: -1,
		InRoles: []string{"pg_read_all_data"}, Comment: "the analysts' role"}
	asDeclared := &pgRole{login: true, inherit: true, connectionLimit: -1, comment: "the analysts' role", inRoles: []string{"pg_read_all_data"}}
	for name, tc := range map[string]struct {
		want          contract.Role
		have          *pgRole
		first, second []string
	}{
		"created, with its comment and memberships": {analyst, nil,
			[]string{`CREATE ROLE "analyst" WITH LOGIN NOCREATEDB NOCREATEROLE NOREPLICATION INHERIT CONNECTION LIMIT -1 VALID UNTIL 'infinity'`,
				`COMMENT ON ROLE "analyst" IS 'the analysts'' role'`},
			[]string{`GRANT "pg_read_all_data" TO "analyst"`}},
		"as declared: nothing": {analyst, asDeclared, nil, nil},
		"altered": {contract.Role{Name: "analyst", Login: true, CreateDB: true, ConnectionLimit: 5, ValidUntil: &until,
			InRoles: []string{"pg_read_all_data"}, Comment: "the analysts' role"}, asDeclared,
			[]string{`ALTER ROLE "analyst" WITH LOGIN CREATEDB NOCREATEROLE NOREPLICATION NOINHERIT CONNECTION LIMIT 5 VALID UNTIL '2027-01-31T00:00:00Z'`}, nil},
		"comment removed": {contract.Role{Name: "analyst", Login: true, Inherit: true, ConnectionLimit: -1, InRoles: []string{"pg_read_all_data"}},
			asDeclared, []string{`COMMENT ON ROLE "analyst" IS NULL`}, nil},
		"membership moved": {contract.Role{Name: "analyst", Login: true, Inherit: true, ConnectionLimit: -1, InRoles: []string{"pg_monitor"},
			Comment: "the analysts' role"}, asDeclared, nil,
			[]string{`GRANT "pg_monitor" TO "analyst"`, `REVOKE "pg_read_all_data" FROM "analyst"`}},
		"the operator's logical replication role": {contract.Role{Name: "mydatabase_logical", Login: true, Replication: true, Inherit: true,
			ConnectionLimit: -1, InRoles: []string{"pg_read_all_data"}}, nil,
			[]string{`CREATE ROLE "mydatabase_logical" WITH LOGIN NOCREATEDB NOCREATEROLE REPLICATION INHERIT CONNECTION LIMIT -1 VALID UNTIL 'infinity'`},
			[]string{`GRANT "pg_read_all_data" TO "mydatabase_logical"`}},
		"absent, there: dropped":   {contract.Role{Name: "analyst", Absent: true}, asDeclared, []string{`DROP ROLE "analyst"`}, nil},
		"absent, gone: nothing":    {contract.Role{Name: "analyst", Absent: true}, nil, nil, nil},
		"a name that needs quotes": {contract.Role{Name: `a"b`, Login: false}, nil, []string{`CREATE ROLE "a""b" WITH NOLOGIN NOCREATEDB NOCREATEROLE NOREPLICATION NOINHERIT CONNECTION LIMIT 0 VALID UNTIL 'infinity'`}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			first, second := rolePlan(tc.want, tc.have)
			if !slices.Equal(first, tc.first) || !slices.Equal(second, tc.second) {
				t.Errorf("plan\n%q\n%q\nwant\n%q\n%q", first, second, tc.first, tc.second)
			}
		})
	}
}

package instance

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"example.com/myoperator/internal/contract"
)

// The poolers' lookup (contract.Declared.Pooler): while a MyDatabasePooler
// leads to this MyDatabase, the primary keeps
//   - contract.PoolerRole, a login role with no password: PgBouncer logs
//     in as it with a client certificate (pg_hba.conf: cert);
//   - in every database that takes connections (template1 included, so a
//     new database has it from the start), the schema contract.PoolerSchema
//     and the function contract.PoolerLookup, which PgBouncer's auth_query
//     calls in the database the client asks for: a SECURITY DEFINER
//     function that returns the password verifier of one login role, never
//     a superuser's nor a replication role's, and that only PoolerRole may
//     run.
// Users' passwords stay in PostgreSQL alone: no Secret holds them for the
// pooler. Removing the last pooler leaves these in place; they admit no
// one without a certificate the MyDatabase's CA issued to the pooler.

// poolerLookupSQL makes the lookup in the database it runs in.
var poolerLookupSQL = []string{
	"CREATE SCHEMA IF NOT EXISTS " + contract.PoolerSchema,
	"REVOKE ALL ON SCHEMA " + contract.PoolerSchema + " FROM PUBLIC",
	"GRANT USAGE ON SCHEMA " + contract.PoolerSchema + " TO " + contract.PoolerRole,
	`CREATE OR REPLACE FUNCTION ` + contract.PoolerLookup + `(name text, OUT username text, OUT password text)
	RETURNS record LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
		SELECT rolname::text, rolpassword FROM pg_authid
		WHERE rolname = name AND rolcanlogin AND NOT rolsuper AND NOT rolreplication
			AND (rolvaliduntil IS NULL OR rolvaliduntil > now()) AND rolname <> '` + contract.PoolerRole + `'
	$$`,
	"REVOKE ALL ON FUNCTION " + contract.PoolerLookup + "(text) FROM PUBLIC",
	"GRANT EXECUTE ON FUNCTION " + contract.PoolerLookup + "(text) TO " + contract.PoolerRole,
}

// poolerRecheck is how often a database found holding the lookup is looked
// at again (the declaration is applied every Lease duration: connecting to
// every database that often would cost more than it is worth).
const poolerRecheck = 5 * time.Minute

// keepPoolerLookup keeps the role and, in every database, the lookup;
// checked maps a database to when it was last found holding it (the
// worker's own memory). It returns why it could not, "" when done.
func (k *declaredKeeper) keepPoolerLookup(ctx context.Context, checked map[string]time.Time) string {
	var databases []string
	err := k.pg.withServer(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		role := ident(contract.PoolerRole)
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1)", contract.PoolerRole).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			if _, err := conn.Exec(ctx, "CREATE ROLE "+role+" LOGIN NOINHERIT"); err != nil {
				return err
			}
			if _, err := conn.Exec(ctx, "COMMENT ON ROLE "+role+" IS "+
				literal("the MyDatabase poolers' role: looks up the passwords of the clients PgBouncer authenticates")); err != nil {
				return err
			}
		}
		rows, err := conn.Query(ctx, "SELECT datname FROM pg_database WHERE datallowconn ORDER BY datname")
		if err != nil {
			return err
		}
		if databases, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
		// Granted only where missing: this runs every Lease duration, and
		// a GRANT writes WAL even when it changes nothing.
		rows, err = conn.Query(ctx, "SELECT datname FROM pg_database WHERE datallowconn AND NOT has_database_privilege($1, oid, 'CONNECT')",
			contract.PoolerRole)
		if err != nil {
			return err
		}
		closed, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, d := range closed {
			if err := each(ctx, conn, []string{grantConnectSQL(d, contract.PoolerRole)}); err != nil {
				return fmt.Errorf("database %s: %w", d, err)
			}
		}
		return nil
	})
	if err != nil {
		return plainError(err)
	}
	for _, d := range databases {
		if at, ok := checked[d]; ok && time.Since(at) < poolerRecheck {
			continue
		}
		err := k.pg.withDatabase(ctx, d, func(ctx context.Context, conn *pgx.Conn) error {
			var have bool
			if err := conn.QueryRow(ctx, "SELECT to_regprocedure($1) IS NOT NULL", contract.PoolerLookup+"(text)").Scan(&have); err != nil || have {
				return err
			}
			return inTransaction(ctx, conn, poolerLookupSQL)
		})
		if err != nil {
			return fmt.Sprintf("database %s: %s", d, plainError(err))
		}
		checked[d] = time.Now()
	}
	return ""
}

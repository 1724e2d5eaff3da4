package instance

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"example.com/myoperator/internal/contract"
)

// Declared databases (spec.databases): the primary's instance manager
// makes each database the Lease declares (contract.Database) what it says,
// then each of its extensions, publications and subscriptions
// (subscriptions.go), in the database itself.
// What is not declared is never touched. Each one's outcome goes
// into the report (declared.go).

// pgDatabase is a database as the server has it.
type pgDatabase struct {
	owner, comment string
}

// pgExtension is an extension as a database has it.
type pgExtension struct {
	version, schema string
}

// databasePlan is the statements, each run on its own (CREATE and DROP
// DATABASE cannot run in a transaction), that make the server's database
// (have, nil when it does not exist) the declared one. A new database is
// closed to PUBLIC, as the application's is: its owner grants CONNECT.
func databasePlan(want contract.Database, have *pgDatabase) []string {
	name := ident(want.Name)
	owner := ident(want.Owner)
	switch {
	case want.Absent && have == nil:
		return nil
	case want.Absent:
		return []string{"DROP DATABASE " + name}
	case have == nil:
		create := "CREATE DATABASE " + name + " OWNER " + owner
		if want.Template != "" {
			create += " TEMPLATE " + ident(want.Template)
		}
		if want.Encoding != "" {
			create += " ENCODING " + literal(want.Encoding)
		}
		if want.Locale != "" {
			create += " LOCALE " + literal(want.Locale)
		}
		plan := []string{create, "REVOKE ALL ON DATABASE " + name + " FROM PUBLIC"}
		if want.Comment != "" {
			plan = append(plan, "COMMENT ON DATABASE "+name+" IS "+literal(want.Comment))
		}
		return plan
	}
	var plan []string
	if have.owner != want.Owner {
		plan = append(plan, "ALTER DATABASE "+name+" OWNER TO "+owner)
	}
	if have.comment != want.Comment {
		plan = append(plan, "COMMENT ON DATABASE "+name+" IS "+literalOrNull(want.Comment))
	}
	return plan
}

// extensionPlan is the statements that make a database's extension (have,
// nil when it is not created) the declared one, or why there are none
// that can: the image does not hold it (available is false).
func extensionPlan(want contract.Extension, have *pgExtension, available bool) ([]string, string) {
	name := ident(want.Name)
	switch {
	case want.Absent && have == nil:
		return nil, ""
	case want.Absent:
		return []string{"DROP EXTENSION " + name}, ""
	case have == nil && !available:
		return nil, fmt.Sprintf("the image holds no extension %q (pg_available_extensions): use an image that has it", want.Name)
	case have == nil:
		create := "CREATE EXTENSION " + name
		if want.Schema != "" {
			create += " SCHEMA " + ident(want.Schema)
		}
		if want.Version != "" {
			create += " VERSION " + literal(want.Version)
		}
		return []string{create}, ""
	}
	var plan []string
	if want.Version != "" && want.Version != have.version {
		plan = append(plan, "ALTER EXTENSION "+name+" UPDATE TO "+literal(want.Version))
	}
	if want.Schema != "" && want.Schema != have.schema {
		plan = append(plan, "ALTER EXTENSION "+name+" SET SCHEMA "+ident(want.Schema))
	}
	return plan, ""
}

// applyDatabases makes the server's databases and their extensions the
// declared ones and records each one's outcome (contract.DatabaseKey,
// contract.ExtensionKey). A database dropped, or not made, gives its
// outcome to its extensions.
func (k *declaredKeeper) applyDatabases(ctx context.Context, databases []contract.Database, outcome map[string]string) error {
	if len(databases) == 0 {
		return nil
	}
	err := k.pg.withServer(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		have, err := serverDatabases(ctx, conn, databases)
		if err != nil {
			return err
		}
		for _, d := range databases {
			outcome[contract.DatabaseKey(d.Name)] = plainError(each(ctx, conn, databasePlan(d, have[d.Name])))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, d := range databases {
		why := outcome[contract.DatabaseKey(d.Name)]
		if why == "" && !d.Absent && len(d.Extensions)+len(d.Publications)+len(d.Subscriptions) > 0 {
			err := k.pg.withDatabase(ctx, d.Name, func(ctx context.Context, conn *pgx.Conn) error {
				if err := applyExtensions(ctx, conn, d, outcome); err != nil {
					return err
				}
				if err := applyPublications(ctx, conn, d, outcome); err != nil {
					return err
				}
				return k.applySubscriptions(ctx, conn, d, outcome)
			})
			if err == nil {
				continue
			}
			why = plainError(err)
		}
		for _, e := range d.Extensions {
			outcome[contract.ExtensionKey(d.Name, e.Name)] = why
		}
		for _, p := range d.Publications {
			outcome[contract.PublicationKey(d.Name, p.Name)] = why
		}
		for _, s := range d.Subscriptions {
			outcome[contract.SubscriptionKey(d.Name, s.Name)] = why
		}
	}
	return nil
}

// pgPublication is a publication as a database has it.
type pgPublication struct {
	allTables bool
	tables    []string // schema.table, sorted
}

// publicationPlan is the statements that make a database's publication
// (have, nil when there is none) the declared one, or why none can: a
// publication of all tables cannot become one of a list, nor the reverse.
func publicationPlan(want contract.Publication, have *pgPublication) ([]string, string) {
	name := ident(want.Name)
	tables := qualified(want.Tables)
	quoted := make([]string, len(tables))
	for i, t := range tables {
		schema, table, _ := strings.Cut(t, ".")
		quoted[i] = qualifiedIdent(schema, table)
	}
	switch {
	case want.Absent && have == nil:
		return nil, ""
	case want.Absent:
		return []string{"DROP PUBLICATION " + name}, ""
	case have == nil && want.AllTables:
		return []string{"CREATE PUBLICATION " + name + " FOR ALL TABLES"}, ""
	case have == nil:
		return []string{"CREATE PUBLICATION " + name + " FOR TABLE " + strings.Join(quoted, ", ")}, ""
	case have.allTables != want.AllTables:
		return nil, fmt.Sprintf("publication %s exists with allTables %t: PostgreSQL cannot change that; declare it absent, then again", want.Name, have.allTables)
	case !want.AllTables && !slices.Equal(have.tables, tables):
		return []string{"ALTER PUBLICATION " + name + " SET TABLE " + strings.Join(quoted, ", ")}, ""
	}
	return nil, ""
}

// qualified is tables as schema.table (public when none is given),
// sorted.
func qualified(tables []string) []string {
	out := make([]string, len(tables))
	for i, t := range tables {
		if !strings.Contains(t, ".") {
			t = "public." + t
		}
		out[i] = t
	}
	slices.Sort(out)
	return out
}

// applyPublications applies d's publications on a connection to d.
func applyPublications(ctx context.Context, conn *pgx.Conn, d contract.Database, outcome map[string]string) error {
	if len(d.Publications) == 0 {
		return nil
	}
	names := make([]string, len(d.Publications))
	for i, p := range d.Publications {
		names[i] = p.Name
	}
	rows, err := conn.Query(ctx, `SELECT p.pubname, p.puballtables, ARRAY(SELECT t.schemaname || '.' || t.tablename FROM pg_publication_tables t
		WHERE t.pubname = p.pubname ORDER BY 1) FROM pg_publication p WHERE p.pubname = ANY($1)`, names)
	if err != nil {
		return err
	}
	have := map[string]*pgPublication{}
	for rows.Next() {
		var name string
		p := &pgPublication{}
		if err := rows.Scan(&name, &p.allTables, &p.tables); err != nil {
			return err
		}
		have[name] = p
	}
	if err := rows.Err(); err != nil {
		return err
	}
	// The consumers' role may connect where there is something to read
	// (the database is closed to PUBLIC).
	var grant error
	if slices.ContainsFunc(d.Publications, func(p contract.Publication) bool { return !p.Absent }) {
		var may bool
		grant = conn.QueryRow(ctx, "SELECT has_database_privilege($1, current_database(), 'CONNECT')", contract.LogicalRole).Scan(&may)
		if grant == nil && !may {
			grant = each(ctx, conn, []string{grantConnectSQL(d.Name, contract.LogicalRole)})
		}
	}
	for _, p := range d.Publications {
		plan, why := publicationPlan(p, have[p.Name])
		if why == "" {
			why = plainError(each(ctx, conn, plan))
		}
		if why == "" && !p.Absent && grant != nil {
			why = fmt.Sprintf("%s may not connect to %s: %s", contract.LogicalRole, d.Name, plainError(grant))
		}
		outcome[contract.PublicationKey(d.Name, p.Name)] = why
	}
	return nil
}

// applyExtensions applies d's extensions on a connection to d.
func applyExtensions(ctx context.Context, conn *pgx.Conn, d contract.Database, outcome map[string]string) error {
	names := make([]string, len(d.Extensions))
	for i, e := range d.Extensions {
		names[i] = e.Name
	}
	have := map[string]*pgExtension{}
	rows, err := conn.Query(ctx, `SELECT e.extname, e.extversion, n.nspname FROM pg_extension e
		JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = ANY($1)`, names)
	if err != nil {
		return err
	}
	for rows.Next() {
		var name string
		e := &pgExtension{}
		if err := rows.Scan(&name, &e.version, &e.schema); err != nil {
			return err
		}
		have[name] = e
	}
	if err := rows.Err(); err != nil {
		return err
	}
	var available []string
	if err := conn.QueryRow(ctx, "SELECT coalesce(array_agg(name::text), '{}') FROM pg_available_extensions WHERE name = ANY($1)",
		names).Scan(&available); err != nil {
		return err
	}
	for _, e := range d.Extensions {
		plan, why := extensionPlan(e, have[e.Name], slices.Contains(available, e.Name))
		if why == "" {
			why = plainError(each(ctx, conn, plan))
		}
		outcome[contract.ExtensionKey(d.Name, e.Name)] = why
	}
	return nil
}

// serverDatabases reads the declared databases that exist on the server.
func serverDatabases(ctx context.Context, conn *pgx.Conn, databases []contract.Database) (map[string]*pgDatabase, error) {
	names := make([]string, len(databases))
	for i, d := range databases {
		names[i] = d.Name
	}
	rows, err := conn.Query(ctx, `SELECT datname, pg_get_userbyid(datdba), coalesce(shobj_description(oid, 'pg_database'), '')
		FROM pg_database WHERE datname = ANY($1)`, names)
	if err != nil {
		return nil, err
	}
	have := map[string]*pgDatabase{}
	for rows.Next() {
		var name string
		d := &pgDatabase{}
		if err := rows.Scan(&name, &d.owner, &d.comment); err != nil {
			return nil, err
		}
		have[name] = d
	}
	return have, rows.Err()
}

// grantConnectSQL lets role connect to database.
func grantConnectSQL(database, role string) string {
	return "GRANT CONNECT ON DATABASE " + ident(database) + " TO " + ident(role)
}

// each runs statements one after the other, each in its own transaction,
// until one fails.
func each(ctx context.Context, conn *pgx.Conn, statements []string) error {
	if err := checkStatements(statements); err != nil {
		return err
	}
	for _, s := range statements {
		if _, err := conn.Exec(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

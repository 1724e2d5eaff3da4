package instance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/instance/scram"
)

// Declared roles (spec.roles): the primary's instance manager makes each
// role the Lease declares (contract.Role) what it says, in two phases so
// that a role another one joins exists first: every role created, altered
// or dropped, then every membership granted or revoked. A role that is not
// declared is never touched. Each role's outcome (applied, or PostgreSQL's
// error) goes into the report (declared.go).

// pgRole is a role as the server has it.
type pgRole struct {
	login, createDB, createRole, replication, inherit bool
	connectionLimit                                   int32
	validUntil                                        *time.Time // nil: never (NULL or infinity)
	comment                                           string
	inRoles                                           []string // sorted
}

// rolePlan is the statements that make the server's role (have, nil when
// it does not exist) the declared one: those of the first phase (create,
// alter, comment, drop) and of the second (memberships).
func rolePlan(want contract.Role, have *pgRole) (first, second []string) {
	name := ident(want.Name)
	if want.Absent {
		if have != nil {
			first = append(first, "DROP ROLE "+name)
		}
		return first, nil
	}
	options := roleOptions(want)
	var member []string
	switch {
	case have == nil:
		first = append(first, "CREATE ROLE "+name+" WITH "+options)
		if want.Comment != "" {
			first = append(first, "COMMENT ON ROLE "+name+" IS "+literal(want.Comment))
		}
	default:
		if options != roleOptions(have.as(want.Name)) {
			first = append(first, "ALTER ROLE "+name+" WITH "+options)
		}
		if want.Comment != have.comment {
			first = append(first, "COMMENT ON ROLE "+name+" IS "+literalOrNull(want.Comment))
		}
		member = have.inRoles
	}
	for _, r := range want.InRoles {
		if !slices.Contains(member, r) {
			second = append(second, "GRANT "+ident(r)+" TO "+name)
		}
	}
	for _, r := range member {
		if !slices.Contains(want.InRoles, r) {
			second = append(second, "REVOKE "+ident(r)+" FROM "+name)
		}
	}
	return first, second
}

// as is the server's role in the terms of a declaration, for comparing
// options.
func (r *pgRole) as(name string) contract.Role {
	return contract.Role{Name: name, Login: r.login, CreateDB: r.createDB, CreateRole: r.createRole, Replication: r.replication, Inherit: r.inherit,
		ConnectionLimit: r.connectionLimit, ValidUntil: r.validUntil}
}

// roleOptions are the options of CREATE and ALTER ROLE for a declared
// role: all of them, so that two roles with the same options print the
// same. A connection limit below -1, which PostgreSQL refuses and
// admission too, is no limit.
func roleOptions(r contract.Role) string {
	until := literal("infinity")
	if r.ValidUntil != nil {
		until = literal(r.ValidUntil.UTC().Format(time.RFC3339))
	}
	return strings.Join([]string{roleFlag(r.Login, "LOGIN"), roleFlag(r.CreateDB, "CREATEDB"), roleFlag(r.CreateRole, "CREATEROLE"),
		roleFlag(r.Replication, "REPLICATION"), roleFlag(r.Inherit, "INHERIT"),
		"CONNECTION LIMIT", integer(int64(max(r.ConnectionLimit, -1))), "VALID UNTIL", until}, " ")
}

// applyRoles makes the server's roles the declared ones and records each
// one's outcome (contract.RoleKey).
func (k *declaredKeeper) applyRoles(ctx context.Context, roles []contract.Role, outcome map[string]string) error {
	if len(roles) == 0 {
		return nil
	}
	err := k.pg.withServer(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		have, err := serverRoles(ctx, conn, roles)
		if err != nil {
			return err
		}
		seconds := make([][]string, len(roles))
		for i, r := range roles {
			first, second := rolePlan(r, have[r.Name])
			seconds[i] = second
			outcome[contract.RoleKey(r.Name)] = plainError(inTransaction(ctx, conn, first))
		}
		for i, r := range roles {
			if outcome[contract.RoleKey(r.Name)] == "" {
				outcome[contract.RoleKey(r.Name)] = plainError(inTransaction(ctx, conn, seconds[i]))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, r := range roles {
		if key := contract.RoleKey(r.Name); outcome[key] == "" && !r.Absent && r.PasswordSecret != "" {
			outcome[key] = plainError(k.keepRolePassword(ctx, r))
		}
	}
	return nil
}

// keepRolePassword sets the role's password from its Secret unless the
// server accepts it already.
func (k *declaredKeeper) keepRolePassword(ctx context.Context, r contract.Role) error {
	secret, err := k.kube.secrets.Get(ctx, r.PasswordSecret, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading Secret %s: %w", r.PasswordSecret, err)
	}
	password := string(secret.Data["password"])
	if !scram.Supported(password) {
		return fmt.Errorf("the password in Secret %s: %w", r.PasswordSecret, scram.ErrUnsupported)
	}
	if ok, err := k.pg.accepts(ctx, r.Name, password); err != nil || ok {
		return err
	}
	if err := k.pg.setPassword(ctx, r.Name, password); err != nil {
		return err
	}
	k.log("set the password of role %s from Secret %s (resourceVersion %s)", r.Name, r.PasswordSecret, secret.ResourceVersion)
	return nil
}

// serverRoles reads the declared roles that exist on the server.
func serverRoles(ctx context.Context, conn *pgx.Conn, roles []contract.Role) (map[string]*pgRole, error) {
	names := make([]string, len(roles))
	for i, r := range roles {
		names[i] = r.Name
	}
	rows, err := conn.Query(ctx, `SELECT r.rolname, r.rolcanlogin, r.rolcreatedb, r.rolcreaterole, r.rolreplication, r.rolinherit, r.rolconnlimit,
			CASE WHEN r.rolvaliduntil = 'infinity' THEN NULL ELSE r.rolvaliduntil END,
			coalesce(shobj_description(r.oid, 'pg_authid'), ''),
			ARRAY(SELECT g.rolname::text FROM pg_auth_members a JOIN pg_roles g ON g.oid = a.roleid WHERE a.member = r.oid ORDER BY 1)
		FROM pg_roles r WHERE r.rolname = ANY($1)`, names)
	if err != nil {
		return nil, err
	}
	have := map[string]*pgRole{}
	for rows.Next() {
		var name string
		r := &pgRole{}
		if err := rows.Scan(&name, &r.login, &r.createDB, &r.createRole, &r.replication, &r.inherit, &r.connectionLimit, &r.validUntil,
			&r.comment, &r.inRoles); err != nil {
			return nil, err
		}
		have[name] = r
	}
	return have, rows.Err()
}

// inTransaction runs statements in one transaction.
func inTransaction(ctx context.Context, conn *pgx.Conn, statements []string) error {
	if len(statements) == 0 {
		return nil
	}
	if err := checkStatements(statements); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, s := range statements {
			if _, err := tx.Exec(ctx, s); err != nil {
				return err
			}
		}
		return nil
	})
}

// plainError is PostgreSQL's message for err, without the severity and
// code, "" for none.
func plainError(err error) string {
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &pgErr) && pgErr.Detail != "":
		return pgErr.Message + ": " + pgErr.Detail
	case errors.As(err, &pgErr):
		return pgErr.Message
	}
	return err.Error()
}

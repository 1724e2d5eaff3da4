//go:build sqlparse

// The SQL the instance manager builds from the spec, proven by
// PostgreSQL's own parser (libpg_query, through pg_query_go): whatever the
// names, comments and options, every statement a builder produces parses
// as exactly one statement, of the kind the builder means, naming the
// objects it was given. A quote that escapes its token would show as a
// second statement, another kind, or another name.
//
// pg_query_go is cgo and compiles PostgreSQL's parser, minutes cold: the
// build tag keeps it out of make test (and out of every binary). Run with
// make test-fuzz (or make fuzz, longer), or
//
//	go test -tags sqlparse -run '^$' -fuzz '^FuzzRolePlan$' -fuzztime 30s ./internal/instance/
package instance

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	pg_query "github.com/pganalyze/pg_query_go/v6"

	"example.com/myoperator/internal/contract"
)

// nasty are the seeds every target starts from, for names and texts.
var nasty = []string{
	"", "app", `a'b`, `a"b`, `a\b`, `\`, `\'`, `'`, `"`, `''`, `""`, "$$", "$tag$ x $tag$", "a;b", `x'; DROP ROLE postgres; --`,
	`x"; DROP ROLE postgres; --`, `x\'; DROP ROLE postgres; --`, "-- comment", "/* open", "*/", "a\nb", "a\tb", "é", "ロール", "😀",
	"U&\"x\"", "E'x'", "public", "none", "current_user", "pg_monitor", strings.Repeat("a", 63), strings.Repeat("a", 64),
	strings.Repeat("é", 40), strings.Repeat(`'"\`, 30), "a\x00b",
}

// nameDataLen is PostgreSQL's NAMEDATALEN: an identifier is cut to
// nameDataLen-1 bytes, on a character boundary.
const nameDataLen = 64

// pgName is name as PostgreSQL's scanner keeps it.
func pgName(name string) string {
	if len(name) < nameDataLen {
		return name
	}
	cut := nameDataLen - 1
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return name[:cut]
}

// statement is one built statement and the refusals PostgreSQL may
// answer it with as a whole, for inputs it cannot hold (which admission
// refuses).
type statement struct {
	t       *testing.T
	sql     string
	refused []string
}

// refusals are the parser's errors that a statement naming these
// identifiers may get, all of them a refusal of the whole statement: an
// empty identifier, and the role names PostgreSQL reserves.
func refusals(names ...string) []string {
	var why []string
	for _, n := range names {
		switch pgName(n) {
		case "":
			why = append(why, "zero-length delimited identifier")
		case "none", "public":
			why = append(why, `role name "`+pgName(n)+`" is reserved`)
		}
	}
	return why
}

// parse is the statement's one parse tree, nil when PostgreSQL refuses it
// for one of its refusals; the test fails on anything else.
func (s statement) parse() *pg_query.Node {
	s.t.Helper()
	tree, err := pg_query.Parse(s.sql)
	if err != nil {
		for _, why := range s.refused {
			if strings.Contains(err.Error(), why) {
				return nil
			}
		}
		s.t.Fatalf("%q does not parse: %v", s.sql, err)
	}
	if len(tree.Stmts) != 1 {
		s.t.Fatalf("%q parses as %d statements", s.sql, len(tree.Stmts))
	}
	return tree.Stmts[0].Stmt
}

// check fails the test with what differs.
func (s statement) check(what string, got, want any) {
	s.t.Helper()
	if got != want {
		s.t.Fatalf("%q: %s is %#v, want %#v", s.sql, what, got, want)
	}
}

// roleSpecIs checks a role named in a RoleSpec position.
func (s statement) roleSpecIs(what string, rs *pg_query.RoleSpec, name string) {
	s.t.Helper()
	if pgName(name) == "public" {
		s.check(what+" role type", rs.GetRoletype(), pg_query.RoleSpecType_ROLESPEC_PUBLIC)
		return
	}
	s.check(what+" role type", rs.GetRoletype(), pg_query.RoleSpecType_ROLESPEC_CSTRING)
	s.check(what, rs.GetRolename(), pgName(name))
}

// str is a String node's value.
func str(n *pg_query.Node) string { return n.GetString_().GetSval() }

// options are a DefElem list as name -> node.
func options(nodes []*pg_query.Node) map[string]*pg_query.Node {
	out := map[string]*pg_query.Node{}
	for _, n := range nodes {
		out[n.GetDefElem().GetDefname()] = n.GetDefElem().GetArg()
	}
	return out
}

// usable tells whether a plan may be checked: the API server and the
// contract carry JSON, which is UTF-8, and a plan with a NUL byte is
// refused before anything of it runs (checkStatements).
func usable(plan []string, texts ...string) bool {
	for _, s := range texts {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return checkStatements(plan) == nil
}

func FuzzRolePlan(f *testing.F) {
	for i, s := range nasty {
		f.Add(s, nasty[(i+1)%len(nasty)], nasty[(i+2)%len(nasty)], uint8(i), int32(i-2), int64(i)*1e9)
	}
	f.Add("app", "x", "y", uint8(0), int32(-2147483648), int64(-62167219200)) // the smallest limit, year 0
	f.Fuzz(func(t *testing.T, name, comment, inRole string, flags uint8, limit int32, until int64) {
		want := contract.Role{Name: name, Absent: flags&1 != 0, Login: flags&2 != 0, CreateDB: flags&4 != 0, CreateRole: flags&8 != 0,
			Replication: flags&16 != 0, Inherit: flags&32 != 0, ConnectionLimit: limit, InRoles: []string{inRole}, Comment: comment}
		validUntil := "infinity"
		if flags&64 != 0 {
			at := time.Unix(until, 0)
			want.ValidUntil = &at
			validUntil = at.UTC().Format(time.RFC3339)
		}
		var have *pgRole
		if flags&128 != 0 {
			have = &pgRole{comment: "other", inRoles: []string{"was_" + inRole}}
		}
		first, second := rolePlan(want, have)
		plan := append(first, second...)
		if !usable(plan, name, comment, inRole) {
			return
		}
		for _, sql := range plan {
			s := statement{t, sql, refusals(name, inRole, "was_"+inRole)}
			n := s.parse()
			switch {
			case n == nil:
			case n.GetCreateRoleStmt() != nil || n.GetAlterRoleStmt() != nil:
				var opts []*pg_query.Node
				if c := n.GetCreateRoleStmt(); c != nil {
					s.check("role", c.GetRole(), pgName(name))
					opts = c.GetOptions()
				} else {
					s.roleSpecIs("role", n.GetAlterRoleStmt().GetRole(), name)
					opts = n.GetAlterRoleStmt().GetOptions()
				}
				o := options(opts)
				s.check("options", len(o), 7)
				s.check("login", o["canlogin"].GetBoolean().GetBoolval(), want.Login)
				s.check("createdb", o["createdb"].GetBoolean().GetBoolval(), want.CreateDB)
				s.check("createrole", o["createrole"].GetBoolean().GetBoolval(), want.CreateRole)
				s.check("replication", o["isreplication"].GetBoolean().GetBoolval(), want.Replication)
				s.check("inherit", o["inherit"].GetBoolean().GetBoolval(), want.Inherit)
				s.check("connection limit", o["connectionlimit"].GetInteger().GetIval(), max(limit, -1))
				s.check("valid until", str(o["validUntil"]), validUntil)
			case n.GetCommentStmt() != nil:
				c := n.GetCommentStmt()
				s.check("object type", c.GetObjtype(), pg_query.ObjectType_OBJECT_ROLE)
				s.check("role", str(c.GetObject()), pgName(name))
				s.check("comment", c.GetComment(), comment)
			case n.GetGrantRoleStmt() != nil:
				g := n.GetGrantRoleStmt()
				s.check("roles granted", len(g.GetGrantedRoles()), 1)
				s.check("grantees", len(g.GetGranteeRoles()), 1)
				granted := inRole
				if !g.GetIsGrant() {
					granted = "was_" + inRole
				}
				s.check("role granted", g.GetGrantedRoles()[0].GetAccessPriv().GetPrivName(), pgName(granted))
				s.roleSpecIs("grantee", g.GetGranteeRoles()[0].GetRoleSpec(), name)
			case n.GetDropRoleStmt() != nil:
				d := n.GetDropRoleStmt()
				s.check("roles dropped", len(d.GetRoles()), 1)
				s.roleSpecIs("role", d.GetRoles()[0].GetRoleSpec(), name)
			default:
				t.Fatalf("%q is a %T", sql, n.GetNode())
			}
		}
	})
}

func FuzzDatabasePlan(f *testing.F) {
	for i, s := range nasty {
		f.Add(s, nasty[(i+1)%len(nasty)], nasty[(i+2)%len(nasty)], nasty[(i+3)%len(nasty)], nasty[(i+4)%len(nasty)], uint8(i))
	}
	f.Fuzz(func(t *testing.T, name, owner, comment, template, locale string, flags uint8) {
		want := contract.Database{Name: name, Absent: flags&1 != 0, Owner: owner, Comment: comment, Template: template,
			Encoding: locale, Locale: locale}
		var have *pgDatabase
		if flags&2 != 0 {
			have = &pgDatabase{owner: "other", comment: "other"}
		}
		plan := append(databasePlan(want, have), grantConnectSQL(name, owner))
		if !usable(plan, name, owner, comment, template, locale) {
			return
		}
		for _, sql := range plan {
			s := statement{t, sql, refusals(name, owner, template)}
			n := s.parse()
			switch {
			case n == nil:
			case n.GetCreatedbStmt() != nil:
				c := n.GetCreatedbStmt()
				s.check("database", c.GetDbname(), pgName(name))
				o := options(c.GetOptions())
				s.check("owner", str(o["owner"]), pgName(owner))
				if template != "" {
					s.check("template", str(o["template"]), pgName(template))
				}
				if locale != "" {
					s.check("encoding", str(o["encoding"]), locale)
					s.check("locale", str(o["locale"]), locale)
				}
				count := 1
				if template != "" {
					count++
				}
				if locale != "" {
					count += 2
				}
				s.check("options", len(o), count)
			case n.GetGrantStmt() != nil:
				g := n.GetGrantStmt()
				s.check("object type", g.GetObjtype(), pg_query.ObjectType_OBJECT_DATABASE)
				s.check("databases", len(g.GetObjects()), 1)
				s.check("database", str(g.GetObjects()[0]), pgName(name))
				s.check("grantees", len(g.GetGrantees()), 1)
				if g.GetIsGrant() {
					s.check("privileges", len(g.GetPrivileges()), 1)
					s.check("privilege", g.GetPrivileges()[0].GetAccessPriv().GetPrivName(), "connect")
					s.roleSpecIs("grantee", g.GetGrantees()[0].GetRoleSpec(), owner)
				} else {
					s.check("privileges", len(g.GetPrivileges()), 0) // ALL
					s.roleSpecIs("grantee", g.GetGrantees()[0].GetRoleSpec(), "public")
				}
			case n.GetCommentStmt() != nil:
				c := n.GetCommentStmt()
				s.check("object type", c.GetObjtype(), pg_query.ObjectType_OBJECT_DATABASE)
				s.check("database", str(c.GetObject()), pgName(name))
				s.check("comment", c.GetComment(), comment)
			case n.GetAlterOwnerStmt() != nil:
				a := n.GetAlterOwnerStmt()
				s.check("object type", a.GetObjectType(), pg_query.ObjectType_OBJECT_DATABASE)
				s.check("database", str(a.GetObject()), pgName(name))
				s.roleSpecIs("owner", a.GetNewowner(), owner)
			case n.GetDropdbStmt() != nil:
				s.check("database", n.GetDropdbStmt().GetDbname(), pgName(name))
			default:
				t.Fatalf("%q is a %T", sql, n.GetNode())
			}
		}
	})
}

func FuzzExtensionPlan(f *testing.F) {
	for i, s := range nasty {
		f.Add(s, nasty[(i+1)%len(nasty)], nasty[(i+2)%len(nasty)], uint8(i))
	}
	f.Fuzz(func(t *testing.T, name, schema, version string, flags uint8) {
		want := contract.Extension{Name: name, Absent: flags&1 != 0, Schema: schema, Version: version}
		var have *pgExtension
		if flags&2 != 0 {
			have = &pgExtension{version: "other", schema: "other"}
		}
		plan, _ := extensionPlan(want, have, flags&4 != 0)
		if !usable(plan, name, schema, version) {
			return
		}
		for _, sql := range plan {
			s := statement{t, sql, refusals(name, schema)}
			n := s.parse()
			switch {
			case n == nil:
			case n.GetCreateExtensionStmt() != nil:
				c := n.GetCreateExtensionStmt()
				s.check("extension", c.GetExtname(), pgName(name))
				o := options(c.GetOptions())
				s.check("schema", str(o["schema"]), pgName(schema))
				s.check("version", str(o["new_version"]), version)
			case n.GetAlterExtensionStmt() != nil:
				a := n.GetAlterExtensionStmt()
				s.check("extension", a.GetExtname(), pgName(name))
				s.check("options", len(a.GetOptions()), 1)
				s.check("version", str(options(a.GetOptions())["new_version"]), version)
			case n.GetAlterObjectSchemaStmt() != nil:
				a := n.GetAlterObjectSchemaStmt()
				s.check("object type", a.GetObjectType(), pg_query.ObjectType_OBJECT_EXTENSION)
				s.check("extension", str(a.GetObject()), pgName(name))
				s.check("schema", a.GetNewschema(), pgName(schema))
			case n.GetDropStmt() != nil:
				d := n.GetDropStmt()
				s.check("object type", d.GetRemoveType(), pg_query.ObjectType_OBJECT_EXTENSION)
				s.check("extensions", len(d.GetObjects()), 1)
				s.check("extension", str(d.GetObjects()[0]), pgName(name))
			default:
				t.Fatalf("%q is a %T", sql, n.GetNode())
			}
		}
	})
}

func FuzzPublicationPlan(f *testing.F) {
	for i, s := range nasty {
		f.Add(s, nasty[(i+1)%len(nasty)], nasty[(i+2)%len(nasty)]+"."+nasty[(i+3)%len(nasty)], uint8(i))
	}
	f.Fuzz(func(t *testing.T, name, table1, table2 string, flags uint8) {
		want := contract.Publication{Name: name, Absent: flags&1 != 0, AllTables: flags&2 != 0, Tables: []string{table1, table2}}
		var have *pgPublication
		if flags&4 != 0 {
			have = &pgPublication{allTables: want.AllTables, tables: []string{"other.other"}}
		}
		plan, _ := publicationPlan(want, have)
		if !usable(plan, name, table1, table2) {
			return
		}
		tables := qualified(want.Tables)
		var parts []string
		for _, t := range tables {
			schema, table, _ := strings.Cut(t, ".")
			parts = append(parts, schema, table)
		}
		for _, sql := range plan {
			s := statement{t, sql, refusals(append(parts, name)...)}
			n := s.parse()
			var objects []*pg_query.Node
			switch {
			case n == nil:
				continue
			case n.GetCreatePublicationStmt() != nil:
				c := n.GetCreatePublicationStmt()
				s.check("publication", c.GetPubname(), pgName(name))
				s.check("all tables", c.GetForAllTables(), want.AllTables)
				objects = c.GetPubobjects()
			case n.GetAlterPublicationStmt() != nil:
				a := n.GetAlterPublicationStmt()
				s.check("publication", a.GetPubname(), pgName(name))
				s.check("action", a.GetAction(), pg_query.AlterPublicationAction_AP_SetObjects)
				objects = a.GetPubobjects()
			case n.GetDropStmt() != nil:
				d := n.GetDropStmt()
				s.check("object type", d.GetRemoveType(), pg_query.ObjectType_OBJECT_PUBLICATION)
				s.check("publications", len(d.GetObjects()), 1)
				s.check("publication", str(d.GetObjects()[0]), pgName(name))
				continue
			default:
				t.Fatalf("%q is a %T", sql, n.GetNode())
			}
			if want.AllTables {
				s.check("tables", len(objects), 0)
				continue
			}
			s.check("tables", len(objects), len(tables))
			for i, o := range objects {
				spec := o.GetPublicationObjSpec()
				s.check("object type", spec.GetPubobjtype(), pg_query.PublicationObjSpecType_PUBLICATIONOBJ_TABLE)
				s.check("schema", spec.GetPubtable().GetRelation().GetSchemaname(), pgName(parts[2*i]))
				s.check("table", spec.GetPubtable().GetRelation().GetRelname(), pgName(parts[2*i+1]))
			}
		}
	})
}

func FuzzSubscriptionPlan(f *testing.F) {
	for i, s := range nasty {
		f.Add(s, nasty[(i+1)%len(nasty)], nasty[(i+2)%len(nasty)], nasty[(i+3)%len(nasty)], uint8(i))
	}
	f.Fuzz(func(t *testing.T, name, publication, host, password string, flags uint8) {
		want := contract.Subscription{Name: name, Absent: flags&1 != 0, Publications: []string{publication}, Enabled: flags&2 != 0,
			CopyData: flags&4 != 0, Failover: flags&8 != 0}
		conninfo := publisher{keywords: map[string]string{"host": host, "dbname": host}, password: password}.conninfo("/run/"+name, "/ca")
		var have *pgSubscription
		if flags&16 != 0 {
			have = &pgSubscription{conninfo: "other", publications: []string{"other"}, enabled: !want.Enabled}
		}
		plan := subscriptionPlan(want, conninfo, have, flags&32 != 0)
		if want.Absent {
			plan = append(plan, dropSubscriptionAloneSQL(name)...)
		}
		if !usable(plan, name, publication, conninfo) {
			return
		}
		for _, sql := range plan {
			s := statement{t, sql, refusals(name, publication)}
			n := s.parse()
			var publications []*pg_query.Node
			switch {
			case n == nil:
				continue
			case n.GetCreateSubscriptionStmt() != nil:
				c := n.GetCreateSubscriptionStmt()
				s.check("subscription", c.GetSubname(), pgName(name))
				s.check("connection", c.GetConninfo(), conninfo)
				publications = c.GetPublication()
			case n.GetAlterSubscriptionStmt() != nil:
				a := n.GetAlterSubscriptionStmt()
				s.check("subscription", a.GetSubname(), pgName(name))
				switch a.GetKind() {
				case pg_query.AlterSubscriptionType_ALTER_SUBSCRIPTION_CONNECTION:
					s.check("connection", a.GetConninfo(), conninfo)
				case pg_query.AlterSubscriptionType_ALTER_SUBSCRIPTION_SET_PUBLICATION:
					publications = a.GetPublication()
				case pg_query.AlterSubscriptionType_ALTER_SUBSCRIPTION_ENABLED:
				case pg_query.AlterSubscriptionType_ALTER_SUBSCRIPTION_OPTIONS:
					s.check("options", len(a.GetOptions()), 1)
					s.check("option", a.GetOptions()[0].GetDefElem().GetDefname(), "slot_name")
				default:
					t.Fatalf("%q is an ALTER SUBSCRIPTION of kind %v", sql, a.GetKind())
				}
				if publications == nil {
					continue
				}
			case n.GetDropSubscriptionStmt() != nil:
				s.check("subscription", n.GetDropSubscriptionStmt().GetSubname(), pgName(name))
				continue
			default:
				t.Fatalf("%q is a %T", sql, n.GetNode())
			}
			s.check("publications", len(publications), 1)
			s.check("publication", str(publications[0]), pgName(publication))
		}
	})
}

// FuzzServerSQL: the statements of the instance manager's own that take a
// name or a text: a password's verifier, a grant to the poolers' role,
// the failover slots' setting.
func FuzzServerSQL(f *testing.F) {
	for i, s := range nasty {
		f.Add(s, nasty[(i+1)%len(nasty)])
	}
	f.Fuzz(func(t *testing.T, name, text string) {
		plan := []string{setPasswordSQL(name, text), grantConnectSQL(text, name), standbySlotsSQL(text)}
		if !usable(plan, name, text) {
			return
		}
		for i, sql := range plan {
			s := statement{t, sql, refusals(name, text)}
			n := s.parse()
			kinds := []string{"*pg_query.Node_AlterRoleStmt", "*pg_query.Node_GrantStmt", "*pg_query.Node_AlterSystemStmt"}
			if n != nil {
				s.check("kind", fmt.Sprintf("%T", n.GetNode()), kinds[i])
			}
			switch {
			case n == nil:
			case i == 0:
				a := n.GetAlterRoleStmt()
				s.roleSpecIs("role", a.GetRole(), name)
				s.check("options", len(a.GetOptions()), 1)
				s.check("password", str(options(a.GetOptions())["password"]), text)
			case i == 1:
				g := n.GetGrantStmt()
				s.check("grant", g.GetIsGrant(), true)
				s.check("object type", g.GetObjtype(), pg_query.ObjectType_OBJECT_DATABASE)
				s.check("databases, privileges, grantees", [3]int{len(g.GetObjects()), len(g.GetPrivileges()), len(g.GetGrantees())}, [3]int{1, 1, 1})
				s.check("database", str(g.GetObjects()[0]), pgName(text))
				s.check("privilege", g.GetPrivileges()[0].GetAccessPriv().GetPrivName(), "connect")
				s.roleSpecIs("grantee", g.GetGrantees()[0].GetRoleSpec(), name)
			case i == 2:
				v := n.GetAlterSystemStmt().GetSetstmt()
				s.check("parameter", v.GetName(), "synchronized_standby_slots")
				s.check("values", len(v.GetArgs()), 1)
				s.check("value", v.GetArgs()[0].GetAConst().GetSval().GetSval(), text)
			}
		}
	})
}

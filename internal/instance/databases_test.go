package instance

import (
	"slices"
	"testing"

	"example.com/myoperator/internal/contract"
)

func TestDatabasePlan(t *testing.T) {
	reports := contract.Database{Name: "reports", Owner: "analyst", Comment: "the reports"}
	for name, tc := range map[string]struct {
		want contract.Database
		have *pgDatabase
		plan []string
	}{
		"created, closed to PUBLIC, with its comment": {reports, nil, []string{`CREATE DATABASE "reports" OWNER "analyst"`,
			`REVOKE ALL ON DATABASE "reports" FROM PUBLIC`, `COMMENT ON DATABASE "reports" IS 'the reports'`}},
		"created from a template, with an encoding and a locale": {contract.Database{Name: "legacy", Owner: "app", Template: "template0",
			Encoding: "LATIN1", Locale: "C"}, nil, []string{`CREATE DATABASE "legacy" OWNER "app" TEMPLATE "template0" ENCODING 'LATIN1' LOCALE 'C'`,
			`REVOKE ALL ON DATABASE "legacy" FROM PUBLIC`}},
		"as declared: nothing": {reports, &pgDatabase{owner: "analyst", comment: "the reports"}, nil},
		"owner and comment put back": {reports, &pgDatabase{owner: "app"}, []string{`ALTER DATABASE "reports" OWNER TO "analyst"`,
			`COMMENT ON DATABASE "reports" IS 'the reports'`}},
		"encoding, locale and template of an existing one: nothing (creation only)": {contract.Database{Name: "legacy", Owner: "app",
			Template: "template0", Encoding: "LATIN1"}, &pgDatabase{owner: "app"}, nil},
		"absent, there: dropped": {contract.Database{Name: "reports", Absent: true}, &pgDatabase{owner: "analyst"}, []string{`DROP DATABASE "reports"`}},
		"absent, gone: nothing":  {contract.Database{Name: "reports", Absent: true}, nil, nil},
	} {
		t.Run(name, func(t *testing.T) {
			if plan := databasePlan(tc.want, tc.have); !slices.Equal(plan, tc.plan) {
				t.Errorf("plan\n%q\nwant\n%q", plan, tc.plan)
			}
		})
	}
}

func TestExtensionPlan(t *testing.T) {
	for name, tc := range map[string]struct {
		want      contract.Extension
		have      *pgExtension
		available bool
		plan      []string
		why       string
	}{
		"created":                                    {contract.Extension{Name: "pg_stat_statements"}, nil, true, []string{`CREATE EXTENSION "pg_stat_statements"`}, ""},
		"created in a schema at a version":           {contract.Extension{Name: "vector", Schema: "ext", Version: "0.8.0"}, nil, true, []string{`CREATE EXTENSION "vector" SCHEMA "ext" VERSION '0.8.0'`}, ""},
		"not in the image":                           {contract.Extension{Name: "vector"}, nil, false, nil, `the image holds no extension "vector" (pg_available_extensions): use an image that has it`},
		"there, no version or schema asked: nothing": {contract.Extension{Name: "vector"}, &pgExtension{version: "0.7.0", schema: "public"}, true, nil, ""},
		"updated and moved": {contract.Extension{Name: "vector", Version: "0.8.0", Schema: "ext"}, &pgExtension{version: "0.7.0", schema: "public"}, true,
			[]string{`ALTER EXTENSION "vector" UPDATE TO '0.8.0'`, `ALTER EXTENSION "vector" SET SCHEMA "ext"`}, ""},
		"absent, there: dropped (even if the image no longer has it)": {contract.Extension{Name: "vector", Absent: true}, &pgExtension{}, false,
			[]string{`DROP EXTENSION "vector"`}, ""},
		"absent, gone: nothing": {contract.Extension{Name: "vector", Absent: true}, nil, false, nil, ""},
	} {
		t.Run(name, func(t *testing.T) {
			plan, why := extensionPlan(tc.want, tc.have, tc.available)
			if !slices.Equal(plan, tc.plan) || why != tc.why {
				t.Errorf("plan %q, %q\nwant %q, %q", plan, why, tc.plan, tc.why)
			}
		})
	}
}

func TestPublicationPlan(t *testing.T) {
	orders := contract.Publication{Name: "orders", Tables: []string{"orders", "sales.lines"}}
	for name, tc := range map[string]struct {
		want contract.Publication
		have *pgPublication
		plan []string
		why  string
	}{
		"created for its tables, public when no schema is given": {orders, nil,
			[]string{`CREATE PUBLICATION "orders" FOR TABLE "public"."orders", "sales"."lines"`}, ""},
		"created for all tables": {contract.Publication{Name: "everything", AllTables: true}, nil,
			[]string{`CREATE PUBLICATION "everything" FOR ALL TABLES`}, ""},
		"as declared: nothing": {orders, &pgPublication{tables: []string{"public.orders", "sales.lines"}}, nil, ""},
		"its tables set": {orders, &pgPublication{tables: []string{"public.orders", "public.refunds"}},
			[]string{`ALTER PUBLICATION "orders" SET TABLE "public"."orders", "sales"."lines"`}, ""},
		"all tables, declared as a list: refused with what to do": {orders, &pgPublication{allTables: true}, nil,
			"publication orders exists with allTables true: PostgreSQL cannot change that; declare it absent, then again"},
		"absent, there: dropped": {contract.Publication{Name: "orders", Absent: true}, &pgPublication{}, []string{`DROP PUBLICATION "orders"`}, ""},
		"absent, gone: nothing":  {contract.Publication{Name: "orders", Absent: true}, nil, nil, ""},
	} {
		t.Run(name, func(t *testing.T) {
			plan, why := publicationPlan(tc.want, tc.have)
			if !slices.Equal(plan, tc.plan) || why != tc.why {
				t.Errorf("plan %q, %q\nwant %q, %q", plan, why, tc.plan, tc.why)
			}
		})
	}
}

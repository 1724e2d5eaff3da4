package instance

import (
	"errors"
	"strconv"
	"strings"
)

// Quoting: every statement the instance manager builds from a name or a
// text of the declaration (the MyDatabase's spec, a Secret, the server's
// own catalog) renders it with these, and nothing else, so that any
// string becomes one token: an identifier or a string constant, never
// SQL. sql_fuzz_test.go proves it with PostgreSQL's own parser
// (make test-fuzz).

// ident quotes name as an identifier: between double quotes, each double
// quote doubled. PostgreSQL cuts an identifier to 63 bytes (NAMEDATALEN):
// admission refuses longer names.
func ident(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

// qualifiedIdent quotes schema.name.
func qualifiedIdent(schema, name string) string { return ident(schema) + "." + ident(name) }

// literal quotes s as a string constant as PostgreSQL's quote_literal
// does: between single quotes, each single quote doubled, and with a
// backslash doubled too in an escape string constant (E'...') when s has
// one. It reads the same whatever standard_conforming_strings is.
func literal(s string) string {
	quoted := "'" + strings.ReplaceAll(s, "'", "''") + "'"
	if strings.Contains(s, `\`) {
		return "E" + strings.ReplaceAll(quoted, `\`, `\\`)
	}
	return quoted
}

// literalOrNull is literal(s), or NULL for "" (COMMENT ... IS NULL
// removes a comment).
func literalOrNull(s string) string {
	if s == "" {
		return "NULL"
	}
	return literal(s)
}

// roleFlag is a role option that is on or off: LOGIN or NOLOGIN.
func roleFlag(on bool, option string) string {
	if on {
		return option
	}
	return "NO" + option
}

// boolean is a boolean constant of a WITH (...) option list.
func boolean(b bool) string { return strconv.FormatBool(b) }

// integer is an integer constant.
func integer(n int64) string { return strconv.FormatInt(n, 10) }

// errNUL refuses a statement with a NUL byte: PostgreSQL's protocol ends
// a query at one, and no name or text of PostgreSQL's can hold one.
// Admission refuses NUL in the spec; a Secret or a catalog could still
// bring one.
var errNUL = errors.New("a name or text holds a NUL byte, which PostgreSQL cannot store: nothing was run")

// checkStatements refuses statements of which one holds a NUL byte,
// before any runs.
func checkStatements(statements []string) error {
	for _, s := range statements {
		if strings.IndexByte(s, 0) >= 0 {
			return errNUL
		}
	}
	return nil
}

// conninfoValue quotes a libpq keyword's value: between single quotes,
// each single quote and backslash escaped with a backslash.
func conninfoValue(v string) string { return "'" + conninfoEscaper.Replace(v) + "'" }

var conninfoEscaper = strings.NewReplacer(`\`, `\\`, `'`, `\'`)

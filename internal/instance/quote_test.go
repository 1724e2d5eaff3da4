package instance

import (
	"errors"
	"testing"
)

func TestQuoting(t *testing.T) {
	for got, want := range map[string]string{
		ident(`app`):                      `"app"`,
		ident(`a"b`):                      `"a""b"`,
		ident(``):                         `""`,
		qualifiedIdent("sales", `li"nes`): `"sales"."li""nes"`,
		literal(`it's`):                   `'it''s'`,
		literal(`a\b`):                    `E'a\\b'`,
		literal(`\'; DROP ROLE x; --`):    `E'\\''; DROP ROLE x; --'`,
		literalOrNull(""):                 `NULL`,
		roleFlag(true, "LOGIN"):           `LOGIN`,
		roleFlag(false, "LOGIN"):          `NOLOGIN`,
		boolean(true):                     `true`,
		integer(-1):                       `-1`,
		conninfoValue(`a b'c\`):           `'a b\'c\\'`,
	} {
		if got != want {
			t.Errorf("got %s, want %s", got, want)
		}
	}
	if err := checkStatements([]string{"SELECT 1", "COMMENT ON ROLE x IS 'a\x00b'"}); !errors.Is(err, errNUL) {
		t.Errorf("a statement with a NUL byte: %v, want errNUL", err)
	}
	if err := checkStatements([]string{"SELECT 1"}); err != nil {
		t.Errorf("checkStatements: %v", err)
	}
}

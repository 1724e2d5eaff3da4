package instance

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The shape issue 58 gave the instance manager (docs/architecture.md):
// manager keeps the HA loop, and the side concerns live in their own
// types, so neither the type nor any file grows back into what it was.
const (
	maxManagerMethods = 40
	maxFileLines      = 500
)

func TestInstanceShape(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	methods := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(src, []byte("\n")); n > maxFileLines {
			t.Errorf("%s has %d lines, over %d: split it by concern", name, n, maxFileLines)
		}
		f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv != nil && receiverType(fn.Recv.List[0].Type) == "manager" {
				methods++
			}
		}
	}
	if methods == 0 {
		t.Fatal("no method of manager found: the test reads the wrong files")
	}
	if methods > maxManagerMethods {
		t.Errorf("manager has %d methods, over %d: move a side concern into its own type (sides.go)", methods, maxManagerMethods)
	}
}

func receiverType(expr ast.Expr) string {
	if star, ok := expr.(*ast.StarExpr); ok {
		expr = star.X
	}
	if id, ok := expr.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

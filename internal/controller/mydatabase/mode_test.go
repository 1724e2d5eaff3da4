package mydatabase

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestModesAreReadOnce: the spec fields behind the modes (mode.go) are
// read in mode.go alone; every other file of the package reads the mode.
// A feature file that tests spec.hibernate, spec.paused or spec.replica
// itself fails it.
func TestModesAreReadOnce(t *testing.T) {
	// specFields are the fields of MyDatabaseSpec behind a mode;
	// specsFuncs the builders' functions that read them.
	specFields := []string{"Paused", "Hibernate", "Replica"}
	specsFuncs := []string{"Replica", "FollowsSource"}
	// notYet are the reads left, by file: backup.go reads spec.replica's
	// source (its object store, Secret and encryption), data of the
	// source rather than the mode.
	notYet := map[string]int{"backup.go": 3}

	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	found := map[string][]string{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "mode.go" {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			switch x := sel.X.(type) {
			case *ast.SelectorExpr: // db.Spec.Hibernate
				if x.Sel.Name == "Spec" && slices.Contains(specFields, sel.Sel.Name) {
					found[name] = append(found[name], fset.Position(sel.Pos()).String()+": spec."+sel.Sel.Name)
				}
			case *ast.Ident: // specs.Replica(db)
				if x.Name == "specs" && slices.Contains(specsFuncs, sel.Sel.Name) {
					found[name] = append(found[name], fset.Position(sel.Pos()).String()+": specs."+sel.Sel.Name)
				}
			}
			return true
		})
	}
	for name, reads := range found {
		if len(reads) > notYet[name] {
			t.Errorf("%s reads the spec behind a mode; read the scope's mode (mode.go) instead:\n\t%s", name, strings.Join(reads, "\n\t"))
		}
	}
	if len(found["backup.go"]) < notYet["backup.go"] {
		t.Errorf("backup.go reads the modes' spec fields %d times, fewer than the %d allowed: lower notYet", len(found["backup.go"]), notYet["backup.go"])
	}
}

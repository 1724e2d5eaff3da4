package mydatabase

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// produced is a result its producer left as v, for a test that runs a
// consumer alone.
func produced[T any](v T) input[T] {
	r := &result[T]{}
	*r.produce() = v
	return r.input()
}

// componentType is the component interface, for reflect.
var componentType = reflect.TypeFor[component]()

// passComponents are the components of a pass, in their order.
func passComponents() []component {
	prerequisites, features := (&kit{}).components(&scope{})
	return append(prerequisites, features...)
}

// resultOf tells a result's producer side (*result[T]) and consumer side
// (input[T]) apart from any other field type, and names the result (T).
func resultOf(t reflect.Type) (name string, producer, consumer bool) {
	pkg := reflect.TypeFor[scope]().PkgPath()
	generic := func(t reflect.Type, prefix string) string {
		if t.PkgPath() != pkg || !strings.HasPrefix(t.Name(), prefix+"[") {
			return ""
		}
		arg := strings.TrimSuffix(strings.TrimPrefix(t.Name(), prefix+"["), "]")
		return arg[strings.LastIndex(arg, ".")+1:]
	}
	if t.Kind() == reflect.Pointer {
		if name := generic(t.Elem(), "result"); name != "" {
			return name, true, false
		}
	}
	if name := generic(t, "input"); name != "" {
		return name, false, true
	}
	return "", false, false
}

// holdsComponent tells whether a value of type t can hold a component:
// t is one (or an interface that can be one), or it is made of one (a
// pointer, slice, array, map or channel of one, or a struct of this
// package with a field that holds one, results included).
func holdsComponent(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return false
	}
	seen[t] = true
	if t.Implements(componentType) || reflect.PointerTo(t).Implements(componentType) {
		return true
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Chan:
		return holdsComponent(t.Elem(), seen)
	case reflect.Map:
		return holdsComponent(t.Key(), seen) || holdsComponent(t.Elem(), seen)
	case reflect.Struct:
		if t.PkgPath() != componentType.PkgPath() {
			return false
		}
		for f := range t.Fields() {
			if holdsComponent(f.Type, seen) {
				return true
			}
		}
	}
	return false
}

// TestComponentWiring checks what components hand over to each other:
//
//   - no component holds another (a field whose type is, or is made of, a
//     component type), and none makes one outside components: what one
//     needs from another comes as a result;
//   - every result has one producer, which runs before each of its
//     consumers in the pass, and each consumer reads the very result its
//     producer fills in.
func TestComponentWiring(t *testing.T) {
	producers := map[uintptr]string{} // result → its producer
	read := map[uintptr]bool{}
	names := map[string]bool{}
	for _, c := range passComponents() {
		v := reflect.ValueOf(c)
		if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
			t.Fatalf("component %T is not a pointer to a struct", c)
		}
		typ, s := v.Type().Elem(), v.Elem()
		name := typ.Name()
		names[name] = true
		for i := range typ.NumField() {
			f := typ.Field(i)
			if holdsComponent(f.Type, map[reflect.Type]bool{}) {
				t.Errorf("component %s holds a component in its field %s (%s): hand it a result instead", name, f.Name, f.Type)
			}
			result, producer, consumer := resultOf(f.Type)
			switch {
			case producer:
				p := s.Field(i).Pointer()
				if other, ok := producers[p]; ok {
					t.Errorf("%s is produced by both %s and %s", result, other, name)
				}
				if p == 0 {
					t.Errorf("component %s is given no %s to produce (its field %s)", name, result, f.Name)
				}
				producers[p] = name
			case consumer:
				p := s.Field(i).Field(0).Pointer()
				read[p] = true
				if _, ok := producers[p]; !ok {
					t.Errorf("component %s reads %s (its field %s) before its producer runs, or from no producer: "+
						"see the order of components", name, result, f.Name)
				}
			}
		}
	}
	for p, producer := range producers {
		if !read[p] {
			t.Errorf("the result %s produces is read by no component", producer)
		}
	}

	// None makes a component outside components (and so calls none's
	// methods): only components' composite literals name component types.
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Name.Name == "components" {
				continue
			}
			ast.Inspect(decl, func(n ast.Node) bool {
				var typ ast.Expr
				switch n := n.(type) {
				case *ast.CompositeLit:
					typ = n.Type
				case *ast.CallExpr: // new(servers)
					if id, ok := n.Fun.(*ast.Ident); ok && id.Name == "new" && len(n.Args) == 1 {
						typ = n.Args[0]
					}
				}
				if id, ok := typ.(*ast.Ident); ok && names[id.Name] {
					t.Errorf("%s: makes a %s outside components: hand over a result instead", fset.Position(typ.Pos()), id.Name)
				}
				return true
			})
		}
	}
}

// A result read before its producer ran panics, rather than handing over
// a zero value as if it had been produced.
func TestResultReadBeforeProducedPanics(t *testing.T) {
	r := &result[serversResult]{}
	in := r.input()
	func() {
		defer func() {
			if recover() == nil {
				t.Error("reading a result before its producer ran did not panic")
			}
		}()
		in.get()
	}()
	r.produce()
	if got := in.get(); got.applied != nil {
		t.Errorf("a result produced empty reads %v", got)
	}
	var wired input[serversResult] // a consumer given no result
	func() {
		defer func() {
			if recover() == nil {
				t.Error("reading an input given no result did not panic")
			}
		}()
		wired.get()
	}()
}

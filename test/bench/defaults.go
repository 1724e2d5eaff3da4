package bench

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"

	"example.com/myoperator/internal/testenv"
)

// CmdMainDefaults reads the defaults of --workers, --kube-api-qps and
// --kube-api-burst from cmd/main.go's source, so that "the defaults" in the
// report are always the operator's current ones.
func CmdMainDefaults() (Settings, error) {
	path := filepath.Join(testenv.RepoRoot(), "cmd", "main.go")
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		return Settings{}, err
	}
	found := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) < 3 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !strings.HasSuffix(sel.Sel.Name, "Var") {
			return true
		}
		name, ok1 := call.Args[1].(*ast.BasicLit)
		value, ok2 := call.Args[2].(*ast.BasicLit)
		if ok1 && ok2 && name.Kind == token.STRING {
			found[strings.Trim(name.Value, `"`)] = value.Value
		}
		return true
	})
	var s Settings
	if s.Workers, err = strconv.Atoi(found["workers"]); err != nil {
		return s, fmt.Errorf("%s: no integer default for --workers", path)
	}
	if s.QPS, err = strconv.ParseFloat(found["kube-api-qps"], 64); err != nil {
		return s, fmt.Errorf("%s: no number default for --kube-api-qps", path)
	}
	if s.Burst, err = strconv.Atoi(found["kube-api-burst"]); err != nil {
		return s, fmt.Errorf("%s: no integer default for --kube-api-burst", path)
	}
	return s, nil
}

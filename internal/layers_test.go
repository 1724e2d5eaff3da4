// Package internal_test holds the test that keeps the layers of the tree
// apart (docs/architecture.md): what each kind of package may import of
// ours.
package internal_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "example.com/myoperator/"

// The layers, by import path below the module.
var (
	api      = []string{"api/"}
	contract = []string{"internal/contract"}
	// generic packages know nothing of MyDatabase: they could serve any
	// operator (or any program).
	generic = []string{"internal/apply", "internal/leancache", "internal/memlimit", "internal/leader", "internal/pki",
		"internal/backup", "internal/helmchart", "internal/conditions", "internal/instance/scram", "internal/instance/pgmetrics"}
	builders    = []string{"internal/specs"}
	controllers = []string{"internal/controller/"}
	// children is the child handling every controller shares: it knows
	// no controller of a kind.
	children = []string{"internal/controller/children"}
	// instance is what runs in the pods: the instance manager, and the
	// pooler manager of a MyDatabasePooler's pods (the same binary).
	instance = []string{"internal/instance", "internal/pooler", "cmd/instance"}
	// metrics are the operator's own metrics, by MyDatabase phase.
	metrics = []string{"internal/metrics"}
	plugin  = []string{"internal/plugin", "cmd/kubectl-mydb"}
)

// TestLayers: each layer imports (directly or not) only what the rules
// allow. Test files are not counted: a test may wire any layers together
// (internal/contract's ties the operator to the instance manager).
func TestLayers(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, "example.com/myoperator/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	in := func(pkg string, layer []string) bool {
		return slices.ContainsFunc(layer, func(prefix string) bool {
			return strings.HasPrefix(pkg, prefix) && (strings.HasSuffix(prefix, "/") || pkg == prefix || strings.HasPrefix(pkg, prefix+"/"))
		})
	}
	rules := []struct {
		name    string
		layer   []string
		allowed [][]string // the layers it may import from
	}{
		{"the API imports nothing of ours", api, nil},
		{"the contract imports only the API", contract, [][]string{api}},
		{"generic packages import no API, no contract, only each other", generic, [][]string{generic}},
		{"the builders import the API, the contract and generic packages", builders, [][]string{api, contract, generic}},
		{"the instance manager imports no builder and no controller", instance, [][]string{api, contract, generic, instance}},
		{"the operator's metrics import the API and generic packages", metrics, [][]string{api, generic}},
		{"the shared child handling imports no controller of a kind", children, [][]string{api, contract, generic, builders}},
		{"the controllers import no instance manager", controllers, [][]string{api, contract, generic, builders, metrics, controllers}},
		{"the kubectl plugin imports no controller and no instance manager", plugin, [][]string{api, contract, generic, builders, plugin}},
	}
	checked := 0
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		pkg, deps := strings.TrimPrefix(fields[0], module), fields[1:]
		for _, r := range rules {
			if !in(pkg, r.layer) {
				continue
			}
			checked++
			for _, dep := range deps {
				ours, found := strings.CutPrefix(dep, module)
				if !found || ours == pkg || in(ours, r.layer) || slices.ContainsFunc(r.allowed, func(l []string) bool { return in(ours, l) }) {
					continue
				}
				t.Errorf("%s: %s imports %s", r.name, pkg, ours)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d packages checked: the layers name packages that are not there", checked)
	}
}

package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Plugin is cmd/kubectl-mydb, built once from the checkout at Repo into
// Dir, and run as `kubectl mydb`: kubectl finds it on PATH as a user's
// kubectl does.
type Plugin struct {
	Repo, Dir string
	once      sync.Once
	err       error
}

// Run runs `kubectl mydb args` and returns its combined output, logged.
func (p *Plugin) Run(t testing.TB, args ...string) (string, error) {
	t.Helper()
	p.once.Do(func() { p.err = GoBuild(p.Repo, filepath.Join(p.Dir, "kubectl-mydb"), "./cmd/kubectl-mydb") })
	if p.err != nil {
		t.Fatal(p.err)
	}
	cmd := exec.Command("kubectl", append([]string{"mydb"}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+p.Dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	t.Logf("$ kubectl mydb %s\n%s", strings.Join(args, " "), out)
	return string(out), err
}

package testenv

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// PrometheusBin is the directory holding prometheus and promtool, built
// from the Go module proxy by hack/prometheus.sh the first time (about
// 4 minutes on 2 cores) and cached outside the checkout.
func PrometheusBin() (string, error) {
	out, err := exec.Command(filepath.Join(RepoRoot(), "hack/prometheus.sh")).Output()
	if err != nil {
		return "", fmt.Errorf("hack/prometheus.sh: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

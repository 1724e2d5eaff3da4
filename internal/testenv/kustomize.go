package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Kustomize renders a kustomization of this repository (for example
// "config/namespaced") with the kustomize the Makefile pins: $KUSTOMIZE
// when set (make test sets it), else bin/kustomize, installed by
// `make kustomize` if missing.
func Kustomize(dir string) ([]byte, error) {
	bin := os.Getenv("KUSTOMIZE")
	if bin == "" {
		bin = filepath.Join(RepoRoot(), "bin", "kustomize")
		if _, err := os.Stat(bin); err != nil {
			install := exec.Command("make", "-s", "kustomize")
			install.Dir, install.Stdout, install.Stderr = RepoRoot(), os.Stderr, os.Stderr
			if err := install.Run(); err != nil {
				return nil, fmt.Errorf("installing kustomize with make kustomize: %w", err)
			}
		}
	}
	var out, errOut bytes.Buffer
	cmd := exec.Command(bin, "build", filepath.Join(RepoRoot(), dir))
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w: %s", dir, err, errOut.String())
	}
	return out.Bytes(), nil
}

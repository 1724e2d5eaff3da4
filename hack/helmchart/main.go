// helmchart writes the generated part of charts/myoperator (templates/
// and crds/) from the kustomize output of config/default and
// config/namespaced (internal/helmchart). make helm-chart runs it; make
// verify runs it and fails when the committed chart differs.
//
//	go run ./hack/helmchart -kustomize bin/kustomize -chart charts/myoperator
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"example.com/myoperator/internal/helmchart"
)

func main() {
	kustomize := flag.String("kustomize", "bin/kustomize", "the kustomize binary")
	chartDir := flag.String("chart", "charts/myoperator", "the chart's directory")
	flag.Parse()
	if err := run(*kustomize, *chartDir); err != nil {
		fmt.Fprintln(os.Stderr, "helmchart:", err)
		os.Exit(1)
	}
}

func run(kustomize, chartDir string) error {
	build := func(dir string) ([]byte, error) {
		out, err := exec.Command(kustomize, "build", dir).Output()
		if err != nil {
			if exit, ok := err.(*exec.ExitError); ok {
				return nil, fmt.Errorf("kustomize build %s: %w: %s", dir, err, exit.Stderr)
			}
			return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
		}
		return out, nil
	}
	clusterWide, err := build("config/default")
	if err != nil {
		return err
	}
	namespaced, err := build("config/namespaced")
	if err != nil {
		return err
	}
	chart, err := helmchart.Render(clusterWide, namespaced)
	if err != nil {
		return err
	}
	// Generated files only: what was generated before and is no more goes.
	for _, dir := range []string{"crds", "templates"} {
		entries, err := os.ReadDir(filepath.Join(chartDir, dir))
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".yaml") {
				if err := os.Remove(filepath.Join(chartDir, dir, e.Name())); err != nil {
					return err
				}
			}
		}
	}
	for path, text := range chart {
		full := filepath.Join(chartDir, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, []byte(helmchart.Header+text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

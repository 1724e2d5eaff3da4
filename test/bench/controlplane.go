package bench

import (
	"fmt"
	"path/filepath"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"example.com/myoperator/internal/testenv"
)

// controlPlane is etcd and kube-apiserver with the CRD installed, as
// testenv.Start makes them, but with a Service IP range that holds the
// ClusterIPs of thousands of MyDatabases (envtest's default /24 runs out
// after 253 read-write Services).
type controlPlane struct {
	Config *rest.Config
	Scheme *runtime.Scheme
	env    *envtest.Environment
}

func startControlPlane() (*controlPlane, error) {
	assets, err := testenv.Assets()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(testenv.RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	env.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", "10.96.0.0/16")
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest with binaries from %s: %w", assets, err)
	}
	return &controlPlane{Config: cfg, Scheme: testenv.Scheme(), env: env}, nil
}

func (c *controlPlane) Stop() error { return c.env.Stop() }

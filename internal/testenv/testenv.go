// Package testenv starts a real etcd and kube-apiserver (controller-runtime's
// envtest) with the MyDatabase CRD installed. The binaries are built from
// source by hack/k8s-binaries.sh; nothing is downloaded at test time.
package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/serializer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// Env is a running API server with the CRD installed.
type Env struct {
	Config *rest.Config
	Client client.Client
	Scheme *k8sruntime.Scheme
	env    *envtest.Environment
}

// RepoRoot is the root of this repository.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Scheme knows the built-in kinds and MyDatabase.
func Scheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := databasev1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// Codecs decode objects of the scheme.
var Codecs = serializer.NewCodecFactory(Scheme())

// Assets returns KUBEBUILDER_ASSETS, building the binaries when it is unset
// so that a plain `go test ./...` works too.
func Assets() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	cmd := exec.Command(filepath.Join(RepoRoot(), "hack", "k8s-binaries.sh"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building the Kubernetes test binaries with hack/k8s-binaries.sh: %w", err)
	}
	return strings.TrimSpace(out.String()), nil
}

// Start runs etcd and kube-apiserver on free ports and installs the CRD.
func Start() (*Env, error) {
	assets, err := Assets()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	cfg, err := env.Start()
	if err != nil {
		// Start leaves etcd and kube-apiserver running when a later step
		// (installing the CRD) fails.
		_ = env.Stop()
		return nil, fmt.Errorf("starting envtest with binaries from %s: %w", assets, err)
	}
	scheme := Scheme()
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &Env{Config: cfg, Client: c, Scheme: scheme, env: env}, nil
}

// Stop stops the API server and etcd (none for an Env of StartShared's
// that connected to its parent's).
func (e *Env) Stop() error {
	if e.env == nil {
		return nil
	}
	return e.env.Stop()
}

// sharedKubeconfig names the kubeconfig of an API server a parent
// process started (StartShared).
const sharedKubeconfig = "MYDATABASE_TEST_SHARED_KUBECONFIG"

// StartShared is Start for a test binary whose children run the same
// tests: go test -fuzz's workers, each a process of the binary with its
// own TestMain. The first process starts the API server and writes its
// kubeconfig where its environment, which every worker inherits, names
// it; a worker connects to that one instead of starting an API server of
// its own, which nobody would stop when the coordinator ends it.
func StartShared() (*Env, error) {
	if file := os.Getenv(sharedKubeconfig); file != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", file)
		if err != nil {
			return nil, fmt.Errorf("the shared API server's kubeconfig %s: %w", file, err)
		}
		scheme := Scheme()
		c, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			return nil, err
		}
		return &Env{Config: cfg, Client: c, Scheme: scheme}, nil
	}
	e, err := Start()
	if err != nil {
		return nil, err
	}
	file := filepath.Join(e.env.ControlPlane.APIServer.CertDir, "shared.kubeconfig")
	if err := os.WriteFile(file, e.env.KubeConfig, 0o600); err == nil {
		err = os.Setenv(sharedKubeconfig, file)
	}
	if err != nil {
		_ = e.Stop()
		return nil, err
	}
	return e, nil
}

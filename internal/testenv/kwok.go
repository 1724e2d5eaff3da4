package testenv

import (
	"fmt"
	"net"
)

// KwokctlConfig is a kwokctl configuration for a cluster whose components
// run from the binaries in bindir (hack/k8s-binaries.sh), so that kwokctl
// downloads nothing, each listening on 127.0.0.1 on a port the kernel just
// handed out, so that two clusters cannot collide. extra (for example
// componentsPatches) is appended as it is.
func KwokctlConfig(bindir, extra string) (string, error) {
	ports, err := FreePorts(6)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf(`apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  runtime: binary
  bindAddress: 127.0.0.1
  etcdPort: %d
  etcdPeerPort: %d
  kubeApiserverPort: %d
  kubeControllerManagerPort: %d
  kubeSchedulerPort: %d
  kwokControllerPort: %d
  etcdBinary: %[7]s/etcd
  kubeApiserverBinary: %[7]s/kube-apiserver
  kubeControllerManagerBinary: %[7]s/kube-controller-manager
  kubeSchedulerBinary: %[7]s/kube-scheduler
  kwokControllerBinary: %[7]s/kwok
  kubectlBinary: %[7]s/kubectl
%s`, ports[0], ports[1], ports[2], ports[3], ports[4], ports[5], bindir, extra), nil
}

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free a
// moment ago.
func FreePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer func() { _ = l.Close() }()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

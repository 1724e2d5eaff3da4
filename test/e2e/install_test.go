//go:build e2e

package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"example.com/myoperator/internal/testenv"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// 7. Started before the CRD is installed, the operator exits non-zero at
// once and tells the user to run `make install`. (TestMain ran it before
// installing the CRD.)
func TestOperatorWithoutCRDExits(t *testing.T) {
	r := env.noCRD
	if !r.ran {
		t.Fatal("TestMain did not run the operator before installing the CRD")
	}
	t.Logf("the operator ran %s without the CRD; output:\n%s", r.elapsed.Round(time.Millisecond), r.output)
	var exit *exec.ExitError
	if !errors.As(r.err, &exit) || exit.ExitCode() == 0 {
		t.Errorf("the operator ended with %v, want a non-zero exit status", r.err)
	}
	if r.elapsed > 30*time.Second {
		t.Errorf("the operator took %s to give up, want an immediate exit", r.elapsed)
	}
	if !strings.Contains(r.output, "make install") {
		t.Errorf("the operator's output does not tell the user to run 'make install'")
	}
}

// 8. dist/install.yaml from `make build-installer` applies server-side, and
// in a namespace enforcing the restricted Pod Security Standard the
// StatefulSet's pods are admitted.
func TestInstallerAndRestrictedNamespace(t *testing.T) {
	// build-installer writes into the checkout (kustomize edit set image,
	// dist/install.yaml): leave it as it was.
	preserve(t, filepath.Join(env.repo, "config", "manager", "kustomization.yaml"),
		filepath.Join(env.repo, "dist", "install.yaml"))
	start := time.Now()
	if out, err := testenv.Make(env.repo, "build-installer"); err != nil {
		t.Fatalf("make build-installer: %v\n%s", err, out)
	}
	t.Logf("make build-installer took %s", time.Since(start).Round(100*time.Millisecond))
	installer := filepath.Join(env.repo, "dist", "install.yaml")
	out := kubectl(t, "", "apply", "--server-side", "-f", installer)
	t.Logf("kubectl apply --server-side -f dist/install.yaml:\n%s", out)
	// The manager Deployment is admitted and its (simulated) pod is ready:
	// on KWOK nothing runs, so the operator under test stays the only one.
	var ns, deploy string
	for line := range strings.SplitSeq(out, "\n") {
		if name, ok := strings.CutPrefix(strings.Fields(line + " x")[0], "namespace/"); ok {
			ns = name
		}
		if name, ok := strings.CutPrefix(strings.Fields(line + " x")[0], "deployment.apps/"); ok {
			deploy = name
		}
	}
	if ns == "" || deploy == "" {
		t.Fatalf("dist/install.yaml created no namespace or no Deployment")
	}
	kubectl(t, "", "wait", "--for=condition=Available", "deployment/"+deploy, "-n", ns, "--timeout=60s")
	// The database pods copy the instance manager out of the operator's own
	// image: the installer must tell the operator which one it is.
	manager := kubectl(t, "", "get", "deployment/"+deploy, "-n", ns, "-o",
		`jsonpath={.spec.template.spec.containers[?(@.name=="manager")].image} {.spec.template.spec.containers[?(@.name=="manager")].env[?(@.name=="INSTANCE_MANAGER_IMAGE")].value}`)
	if f := strings.Fields(manager); len(f) != 2 || f[0] != f[1] {
		t.Errorf("the manager's image and INSTANCE_MANAGER_IMAGE differ or are missing: %q", manager)
	}
	if err := waitEstablished(30 * time.Second); err != nil {
		t.Fatal(err)
	}

	restricted := newNamespace(t, "restricted", map[string]string{
		"pod-security.kubernetes.io/enforce":         "restricted",
		"pod-security.kubernetes.io/enforce-version": "latest",
	})
	// The namespace really enforces: a privileged pod is refused.
	if out, err := kubectlRun("", "run", "privileged", "-n", restricted, "--image=busybox", "--privileged",
		"--dry-run=server"); err == nil || !strings.Contains(out, "violates PodSecurity") {
		t.Fatalf("a privileged pod was not refused in %s, so this test would prove nothing: %v\n%s", restricted, err, out)
	}

	applyDB(t, restricted, 2, retain)
	waitReady(t, restricted, 2, 120*time.Second)
	events := &corev1.EventList{}
	if err := env.c.List(ctx, events, client.InNamespace(restricted)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.Reason == "FailedCreate" || strings.Contains(e.Message, "PodSecurity") {
			t.Errorf("event %s %s/%s: %s", e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Message)
		}
	}
}

// preserve restores the files as they are now at the end of the test,
// removing those that do not exist yet (and their directory, if it is then
// empty).
func preserve(t *testing.T, paths ...string) {
	t.Helper()
	for _, path := range paths {
		old, err := os.ReadFile(path)
		existed := err == nil
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		_, dirErr := os.Stat(filepath.Dir(path))
		restore := sync.OnceFunc(func() {
			if existed {
				if err := os.WriteFile(path, old, 0o644); err != nil {
					logf("restoring %s: %v", path, err)
				}
				return
			}
			_ = os.Remove(path)
			if os.IsNotExist(dirErr) {
				_ = os.Remove(filepath.Dir(path)) // only if empty
			}
		})
		env.onTeardown(restore) // if the suite is interrupted
		t.Cleanup(restore)
	}
}

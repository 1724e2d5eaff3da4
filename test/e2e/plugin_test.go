//go:build e2e

package e2e

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/testenv"
)

var plugin testenv.Plugin

// kubectlMydb runs `kubectl mydb ARGS` with cmd/kubectl-mydb, built from
// this checkout, on PATH.
func kubectlMydb(t *testing.T, args ...string) (string, error) {
	t.Helper()
	if plugin.Dir == "" {
		plugin.Repo, plugin.Dir = env.repo, filepath.Join(env.work, "plugin")
	}
	return plugin.Run(t, args...)
}

func mustMydb(t *testing.T, args ...string) string {
	t.Helper()
	out, err := kubectlMydb(t, args...)
	if err != nil {
		t.Fatalf("kubectl mydb %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// The plugin's verbs against a MyDatabase of three servers. KWOK runs no
// instance manager: where one would act (report, hand the Lease over), the
// test stands in for it through the same objects, as in
// TestFailoverFollowsTheLease.
func TestPlugin(t *testing.T) {
	ns := newNamespace(t, "plugin", nil)
	applyDB(t, ns, 3, retain)
	waitReady(t, ns, 3, 120*time.Second)

	t.Run("status", func(t *testing.T) {
		out := squeeze(mustMydb(t, "status", dbName, "-n", ns))
		for _, want := range []string{"\nMyDatabase " + ns + "/x\n", "\nPhase Ready\n", "\nReady 3/3 servers",
			"\nRead-write x-rw." + ns + ".svc:5432\n", "\nRead-only x-ro." + ns + ".svc:5432\n",
			"\nCredentials Secret x-credentials", "\nx-0 primary Running true node-", "\nx-1 replica Running true",
			"\nx-2 replica Running true", "none has reported: no instance manager runs yet"} {
			if !strings.Contains(out, want) {
				t.Errorf("status output lacks %q", want)
			}
		}
	})

	t.Run("psql says plainly that KWOK runs no server", func(t *testing.T) {
		out, err := kubectlMydb(t, "psql", dbName, "-n", ns, "--", "-c", "select 1")
		if err == nil {
			t.Fatal("kubectl mydb psql succeeded on a KWOK cluster")
		}
		node := podsOf(t, ns, dbName)[0].Spec.NodeName
		want := "error: pod x-0 runs on node " + node + ", a KWOK node: KWOK only simulates pods and runs no container, " +
			"so there is no PostgreSQL server to connect to"
		if !strings.Contains(out, want) {
			t.Errorf("psql output lacks %q", want)
		}
	})

	t.Run("backup says what is missing", func(t *testing.T) {
		out, err := kubectlMydb(t, "backup", dbName, "-n", ns)
		if err == nil {
			t.Fatal("kubectl mydb backup succeeded without spec.backup")
		}
		if want := "error: MyDatabase " + ns + "/x has no spec.backup: set spec.backup.objectStore first"; !strings.Contains(out, want) {
			t.Errorf("backup output lacks %q:\n%s", want, out)
		}
	})

	t.Run("restart rolls every pod", func(t *testing.T) {
		before := map[string]string{}
		for _, p := range podsOf(t, ns, dbName) {
			before[p.Name] = string(p.UID)
		}
		out := mustMydb(t, "restart", dbName, "-n", ns, "--wait=3m")
		if !strings.Contains(out, "Restarted: every pod runs the new template") {
			t.Errorf("restart output lacks its success line")
		}
		sts := &appsv1.StatefulSet{}
		if !exists(t, ns, dbName, sts) || sts.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] == "" {
			t.Errorf("the StatefulSet's template has no restartedAt annotation: %v", sts.Spec.Template.Annotations)
		}
		for _, p := range podsOf(t, ns, dbName) {
			if before[p.Name] == string(p.UID) {
				t.Errorf("pod %s was not restarted (same UID)", p.Name)
			}
		}
		waitReady(t, ns, 3, 60*time.Second)
	})

	t.Run("switchover", func(t *testing.T) {
		// The instance managers' part: x-0 holds the Lease, all report.
		lease := &coordinationv1.Lease{}
		eventually(t, 30*time.Second, "Lease x-primary exists", func() (bool, string) { return exists(t, ns, "x-primary", lease), "" })
		patch := client.MergeFrom(lease.DeepCopy())
		lease.Spec.HolderIdentity = new("x-0")
		lease.Spec.LeaseDurationSeconds = new(int32(60))
		if err := env.c.Patch(ctx, lease, patch); err != nil {
			t.Fatal(err)
		}
		standIn(t, ns, "x-0", `{"role":"primary","ready":true,"timeline":1,"lsn":"0/3000100","time":"2026-11-30T12:00:00Z"}`, "primary")
		standIn(t, ns, "x-1", `{"role":"replica","ready":true,"timeline":1,"lsn":"0/3000000","replayed":"0/3000000","time":"2026-11-30T12:00:00Z"}`, "replica")
		standIn(t, ns, "x-2", `{"role":"replica","ready":true,"timeline":1,"lsn":"0/3000100","replayed":"0/3000100","time":"2026-11-30T12:00:00Z"}`, "replica")
		eventually(t, 30*time.Second, "status.instances lists the three reports", func() (bool, string) {
			db := &databasev1alpha1.MyDatabase{}
			return exists(t, ns, dbName, db) && len(db.Status.Instances) == 3, "no"
		})

		// x-0's instance manager hands over when the operator asks it to.
		handedOver := make(chan error, 1)
		go func() {
			handedOver <- handOver(ns, "x-0", "x-2", 60*time.Second)
		}()
		start := time.Now()
		out := mustMydb(t, "switchover", dbName, "x-2", "-n", ns, "--wait=90s")
		if err := <-handedOver; err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "Switchover of "+ns+"/x to x-2 requested at ") ||
			!strings.Contains(out, "Switchover Succeeded: x-0 -> x-2. x-2 is the primary") {
			t.Errorf("switchover output lacks the request or its success")
		}
		db := &databasev1alpha1.MyDatabase{}
		exists(t, ns, dbName, db)
		sw := db.Spec.Switchover
		if sw == nil || sw.To != "x-2" || sw.RequestedAt.Add(2*time.Second).Before(start) || sw.RequestedAt.After(time.Now()) {
			t.Errorf("spec.switchover = %+v, want to x-2 requested during the command", sw)
		}
		if db.Status.CurrentPrimary != "x-2" {
			t.Errorf("status.currentPrimary = %q, want x-2", db.Status.CurrentPrimary)
		}
		out = squeeze(mustMydb(t, "status", dbName, "-n", ns))
		for _, want := range []string{"\nPrimary x-2\n", "\nx-2 primary true 2 0/3000200 - ", "\nx-0 replica true 2 0/3000200 0 ",
			"\nx-1 replica true 1 0/3000000 512 ", "Succeeded: x-0 -> x-2 (Requested"} {
			if !strings.Contains(out, want) {
				t.Errorf("status output after the switchover lacks %q", want)
			}
		}
	})

	t.Run("report", func(t *testing.T) {
		bundle := filepath.Join(t.TempDir(), "bundle.tar.gz")
		out := mustMydb(t, "report", dbName, "-n", ns, "-o", bundle)
		if !strings.Contains(out, "Wrote the support bundle of "+ns+"/x to "+bundle) {
			t.Errorf("report output lacks its success line")
		}
		files := readTarGz(t, bundle)
		names := make([]string, 0, len(files))
		for name := range files {
			names = append(names, name)
		}
		slices.Sort(names)
		t.Logf("bundle files: %v", names)
		for _, want := range []string{"README.txt", "events.txt", "objects/MyDatabase/x.yaml", "objects/StatefulSet/x.yaml",
			"objects/Pod/x-0.yaml", "objects/Pod/x-1.yaml", "objects/Pod/x-2.yaml", "objects/Service/x-rw.yaml",
			"objects/Service/x-ro.yaml", "objects/Service/x-headless.yaml", "objects/ConfigMap/x-config.yaml",
			"objects/PersistentVolumeClaim/data-x-0.yaml", "objects/PodDisruptionBudget/x.yaml", "objects/Lease/x-primary.yaml",
			"objects/Secret/x-credentials.yaml", "objects/Secret/x-replication-tls.yaml"} {
			if _, ok := files["bundle/"+want]; !ok {
				t.Errorf("the bundle lacks %s", want)
			}
		}
		// This suite's operator is a local process; another test may have
		// left an installed one (make build-installer's) in the cluster.
		installed := &appsv1.DeploymentList{}
		if err := env.c.List(context.Background(), installed,
			client.MatchingLabels{"control-plane": "controller-manager", "app.kubernetes.io/name": "main"}); err != nil {
			t.Fatal(err)
		}
		readme := files["bundle/README.txt"]
		if len(installed.Items) == 0 && !strings.Contains(readme, "no Deployment labelled") {
			t.Errorf("README.txt does not say that the operator runs outside the cluster:\n%s", readme)
		}
		for _, d := range installed.Items {
			if _, ok := files["bundle/operator/"+d.Namespace+"/"+d.Name+".yaml"]; !ok {
				t.Errorf("the bundle lacks the operator Deployment %s/%s", d.Namespace, d.Name)
			}
		}
		if ev := files["bundle/events.txt"]; !strings.Contains(ev, "SwitchoverSucceeded") && !strings.Contains(ev, "PrimaryChanged") {
			t.Errorf("events.txt lacks the switchover's events:\n%s", ev)
		}
		// No Secret value, in any form, anywhere in the bundle.
		// The password, the URI that embeds it (host, port, user and
		// database are no secret: the status shows them), and the private
		// keys.
		for name, keys := range map[string][]string{"x-credentials": {"password", "uri"},
			"x-replication-tls": {"tls.key"}, "x-server-tls": {"tls.key"}, "x-ca": {"ca.key"}} {
			s := &corev1.Secret{}
			if !exists(t, ns, name, s) {
				t.Fatalf("Secret %s does not exist", name)
			}
			for _, key := range keys {
				value := s.Data[key]
				if len(value) < 16 {
					t.Fatalf("Secret %s has no %s of 16 characters or more", name, key)
				}
				for _, form := range []string{string(value), base64.StdEncoding.EncodeToString(value)} {
					for file, content := range files {
						if strings.Contains(content, form) {
							t.Errorf("%s holds the value of Secret %s key %s", file, name, key)
						}
					}
				}
			}
			if bundled := files["bundle/objects/Secret/"+name+".yaml"]; bundled != "" && !strings.Contains(bundled, keys[0]+": REDACTED") {
				t.Errorf("Secret %s in the bundle is not redacted:\n%s", name, files["bundle/objects/Secret/"+name+".yaml"])
			}
		}
	})
}

// handOver plays the primary's instance manager in a switchover: when the
// operator names a target on the Lease, the Lease goes to it and the two
// instances report their new roles.
func handOver(ns, from, to string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		lease := &coordinationv1.Lease{}
		if err := env.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "x-primary"}, lease); err != nil {
			return err
		}
		if lease.Annotations[contract.AnnotationSwitchoverTo] == to {
			delete(lease.Annotations, contract.AnnotationSwitchoverTo)
			lease.Spec.HolderIdentity = new(to)
			if err := env.c.Update(ctx, lease); apierrors.IsConflict(err) {
				continue // the operator wrote it meanwhile: read it again
			} else if err != nil {
				return err
			}
			for pod, report := range map[string]string{
				to:   `{"role":"primary","ready":true,"timeline":2,"lsn":"0/3000200","time":"2026-11-30T12:00:10Z"}`,
				from: `{"role":"replica","ready":true,"timeline":2,"lsn":"0/3000200","replayed":"0/3000200","time":"2026-11-30T12:00:10Z"}`,
			} {
				role := "replica"
				if pod == to {
					role = "primary"
				}
				if err := setReport(ns, pod, report, role); err != nil {
					return err
				}
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the operator did not ask %s to hand over to %s within %s (Lease annotations %v)", from, to, timeout, lease.Annotations)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// setReport is standIn without a *testing.T, for a goroutine.
func setReport(ns, pod, report, role string) error {
	p := &corev1.Pod{}
	if err := env.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: pod}, p); err != nil {
		return err
	}
	patch := client.MergeFrom(p.DeepCopy())
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[contract.AnnotationInstance] = report
	p.Labels[labelRole] = role
	return env.c.Patch(ctx, p, patch)
}

// readTarGz returns the files of a .tar.gz by name, with the top directory
// renamed "bundle".
func readTarGz(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	files := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		_, rest, _ := strings.Cut(h.Name, "/")
		files["bundle/"+rest] = string(data)
	}
}

// squeeze makes each line of out its fields separated by one space, and
// starts it with a newline: tests match whole cells whatever the column
// widths.
func squeeze(out string) string {
	var sb strings.Builder
	for line := range strings.SplitSeq(out, "\n") {
		sb.WriteString("\n" + strings.Join(strings.Fields(line), " "))
	}
	return sb.String() + "\n"
}

//go:build real

/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package real

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
)

const dbName = "pg"

// TestLifecycleOnRealPods walks one MyDatabase through its life on real
// pods, in a namespace that enforces Pod Security "restricted", and checks
// every step by talking to PostgreSQL. The steps build on each other: the
// first failure ends the test.
func TestLifecycleOnRealPods(t *testing.T) {
	ctx := t.Context()
	ns := newNamespace(t, "real-lifecycle", map[string]string{
		"pod-security.kubernetes.io/enforce":         "restricted",
		"pod-security.kubernetes.io/enforce-version": "latest",
	})
	db := &databasev1alpha1.MyDatabase{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: dbName},
		Spec: databasev1alpha1.MyDatabaseSpec{
			Version:        "17",
			Replicas:       ptr.To[int32](1),
			Storage:        databasev1alpha1.StorageSpec{Size: resource.MustParse("1Gi")},
			DatabaseName:   "app",
			User:           "app",
			Parameters:     map[string]string{"max_connections": "50"},
			DeletionPolicy: databasev1alpha1.DeletionPolicyRetain,
		},
	}
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			dumpNamespace(t, ns)
			t.FailNow()
		}
	}
	var uri, password string
	rows := 0

	step("create reaches Ready", func(t *testing.T) {
		if err := env.c.Create(ctx, db.DeepCopy()); err != nil {
			t.Fatal(err)
		}
		waitReady(t, ns, 1, 3*time.Minute)
		uri, password = credentials(t, ns)
	})

	step("the instance manager is PID 1 and the server its child; fsGroup on the volume; a read-only root", func(t *testing.T) {
		out, err := podExec(ns, dbName+"-0", "sh", "-c",
			`tr '\0' ' ' </proc/1/cmdline; echo; head -1 "$PGDATA/postmaster.pid" | xargs -I{} awk '{print $4}' /proc/{}/stat`)
		if want := specs.InstanceManagerPath + " run \n1"; err != nil || out != want {
			t.Fatalf("PID 1 and the postmaster's parent: %q (%v), want %q", out, err, want)
		}
		out, err = podExec(ns, dbName+"-0", "stat", "--format=%g", specs.DataMountPath)
		if err != nil || out != fmt.Sprint(specs.PostgresUID) {
			t.Fatalf("group of %s: %q (%v), want the fsGroup %d", specs.DataMountPath, out, err, specs.PostgresUID)
		}
		if out, err := podExec(ns, dbName+"-0", "touch", "/written-by-the-test"); err == nil ||
			!strings.Contains(out, "Read-only file system") {
			t.Fatalf("writing to the root filesystem: %q (%v), want it refused as read-only", out, err)
		}
	})

	step("the host connects through the rw Service with the Secret's URI and writes", func(t *testing.T) {
		conn := connect(t, uri)
		var user, dbname string
		if err := conn.QueryRow(ctx, "SELECT current_user, current_database()").Scan(&user, &dbname); err != nil {
			t.Fatal(err)
		}
		if user != "app" || dbname != "app" {
			t.Fatalf("connected as %s to %s, want app to app", user, dbname)
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE items (id bigserial PRIMARY KEY, note text NOT NULL)"); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "INSERT INTO items (note) SELECT 'row ' || g FROM generate_series(1, 100) g"); err != nil {
			t.Fatal(err)
		}
		rows = 100
	})

	step("a client pod connects with the Secret's URI", func(t *testing.T) {
		out := psqlPod(t, ns, "client", "SELECT count(*) FROM items")
		if out != fmt.Sprint(rows) {
			t.Fatalf("psql in a pod counted %q rows, want %d", out, rows)
		}
	})

	step("pods have no route out of this machine", func(t *testing.T) {
		// Routes of the pod network only (hack/real-node.sh): no default
		// route, destination 0.0.0.0 in /proc/net/route.
		for line := range strings.Lines(runPod(t, ns, "routes", nil, nil, "cat", "/proc/net/route")) {
			if f := strings.Fields(line); len(f) > 1 && f[1] == "00000000" {
				t.Fatalf("a pod has a default route: %s", line)
			}
		}
	})

	step("scale to 3: two streaming replicas serve the rows through the ro Service", func(t *testing.T) {
		patch(t, ns, func(db *databasev1alpha1.MyDatabase) { db.Spec.Replicas = ptr.To[int32](3) })
		waitReady(t, ns, 3, 5*time.Minute)
		// The app user may not see other roles' replication details: ask
		// as postgres, over the pod's socket.
		testenv.Eventually(t, time.Minute, "two streaming replicas in pg_stat_replication", func() error {
			// The fence (internal/instance) is the primary's one
			// synchronous standby; the replicas stream asynchronously.
			out, err := superuserSQL(ns, dbName+"-0",
				"SELECT string_agg(application_name || ' ' || sync_state, ',' ORDER BY 1) FROM pg_stat_replication WHERE state = 'streaming'")
			if err != nil {
				return err
			}
			if want := "mydatabase_fence sync," + dbName + "-1 async," + dbName + "-2 async"; out != want {
				return fmt.Errorf("streaming: %q, want %q", out, want)
			}
			return nil
		})
		ro := strings.Replace(uri, "@"+dbName+"-rw.", "@"+dbName+"-ro.", 1)
		testenv.Eventually(t, time.Minute, "the rows through the ro Service, on a replica", func() error {
			conn, err := dial(ctx, ro)
			if err != nil {
				return err
			}
			defer func() { _ = conn.Close(context.Background()) }()
			var standby bool
			var n int
			if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery(), (SELECT count(*) FROM items)").Scan(&standby, &n); err != nil {
				return err
			}
			if !standby || n != rows {
				return fmt.Errorf("in recovery %v, %d rows; want a standby with %d", standby, n, rows)
			}
			return nil
		})
	})

	step("kubectl mydb: status; psql on the primary and on a replica, with the Secret's password", func(t *testing.T) {
		checkPlugin(t, ns, password, rows)
	})

	step("kubectl mydb: a switchover, then a rolling restart through the switchover path", func(t *testing.T) {
		checkPluginMoves(t, ns, dbName+"-2")
		checkPlugin(t, ns, password, rows)
	})

	step("a parameter change rolls every pod and takes effect", func(t *testing.T) {
		before := podUIDs(t, ns)
		patch(t, ns, func(db *databasev1alpha1.MyDatabase) { db.Spec.Parameters["max_connections"] = "60" })
		waitRolled(t, ns, before, 5*time.Minute)
		if got := show(t, uri, "max_connections"); got != "60" {
			t.Fatalf("SHOW max_connections = %s after the change, want 60", got)
		}
	})

	step("a minor version change under writes rolls every pod to the new image with one switchover, none lost", func(t *testing.T) {
		// The images of hack/node-parts.sh carry postgres:<major> and
		// postgres:<major>.<minor> of the same build: the server names the
		// second.
		version := regexp.MustCompile(`^\d+\.\d+`).FindString(show(t, uri, "server_version"))
		if !strings.HasPrefix(version, "17.") {
			t.Fatalf("server_version %q is not a 17.x", version)
		}
		before := podUIDs(t, ns)
		primary := getDB(t, ns).Status.CurrentPrimary
		w := startWriter(ctx, uri)
		patch(t, ns, func(db *databasev1alpha1.MyDatabase) { db.Spec.Version = version })
		waitRolled(t, ns, before, 5*time.Minute)
		acked, failed := w.stop(), w.unacknowledged()
		for _, p := range podsOf(t, ns) {
			if img := p.Spec.Containers[0].Image; img != "postgres:"+version {
				t.Errorf("pod %s runs %s, want postgres:%s", p.Name, img, version)
			}
		}
		// Every acknowledged write is there; a failed one may be too.
		n := count(t, uri)
		if n < rows+acked || n > rows+acked+failed {
			t.Fatalf("%d rows after the roll, want %d to %d: %d writes acknowledged during it, %d failed", n, rows+acked, rows+acked+failed, acked, failed)
		}
		rows = n
		db := getDB(t, ns)
		if sw := db.Status.Switchover; sw == nil || sw.Reason != databasev1alpha1.SwitchoverRollingUpdate ||
			sw.Phase != databasev1alpha1.SwitchoverSucceeded || sw.From != primary || db.Status.CurrentPrimary != sw.To {
			t.Fatalf("after the roll: primary %s (was %s), switchover %+v; want one rolling-update switchover from %s", db.Status.CurrentPrimary, primary, sw, primary)
		}
		gap := w.longestGap()
		t.Logf("WRITE GAP during the rolling minor update (one switchover, %s -> %s): %s; %d writes acknowledged, %d failed",
			primary, db.Status.CurrentPrimary, gap.Round(10*time.Millisecond), acked, failed)
		writeResult(t, "write-gap-rolling-minor-update", gap)
	})

	step("deleting the primary pod: a replica takes over, none acknowledged is lost", func(t *testing.T) {
		// The rolls above moved the primary, each by a switchover.
		var db databasev1alpha1.MyDatabase
		if err := env.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: dbName}, &db); err != nil {
			t.Fatal(err)
		}
		primary := db.Status.CurrentPrimary
		w := startWriter(ctx, uri)
		testenv.Eventually(t, 30*time.Second, "the writer's first writes", func() error {
			if w.acked() < 20 {
				return fmt.Errorf("%d writes so far", w.acked())
			}
			return nil
		})
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: primary}}
		if err := env.c.Delete(ctx, pod); err != nil {
			t.Fatal(err)
		}
		deleted := time.Now()
		testenv.Eventually(t, 3*time.Minute, "writes after the primary pod was deleted", func() error {
			if gap, ok := w.gapAfter(deleted); !ok {
				return fmt.Errorf("no write has succeeded since the pod was deleted (%s ago)", time.Since(deleted).Round(time.Second))
			} else if gap == 0 {
				return fmt.Errorf("no write has failed yet")
			}
			return nil
		})
		acked := w.stop()
		gap, _ := w.gapAfter(deleted)
		// Reported, not asserted: tests assert behaviour, benchmarks time.
		t.Logf("WRITE GAP after deleting the primary pod %s: %s (last acknowledged write to the first one after)", primary, gap.Round(10*time.Millisecond))
		writeResult(t, "write-gap-primary-pod-deleted", gap)
		waitReady(t, ns, 3, 5*time.Minute)
		// Every acknowledged write is there; a failed one may be too (its
		// commit reached the WAL, and the replicas, but not the client).
		unknown := w.unacknowledged()
		n := count(t, uri)
		if n < rows+acked || n > rows+acked+unknown {
			t.Fatalf("%d rows, want %d to %d: %d acknowledged writes during the loss, %d failed", n, rows+acked, rows+acked+unknown, acked, unknown)
		}
		rows = n
		testenv.Eventually(t, time.Minute, "status.currentPrimary following the Lease", func() error {
			if err := env.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: dbName}, &db); err != nil {
				return err
			}
			if db.Status.CurrentPrimary == primary || db.Status.CurrentPrimary == "" {
				return fmt.Errorf("currentPrimary %q, want another pod than %s", db.Status.CurrentPrimary, primary)
			}
			return nil
		})
	})

	step("delete under Retain keeps the volumes and the Secret; re-create brings the rows and the password back", func(t *testing.T) {
		deleteAndWait(t, ns)
		var pvcs corev1.PersistentVolumeClaimList
		if err := env.c.List(ctx, &pvcs, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		if len(pvcs.Items) != 3 {
			t.Fatalf("%d claims after delete under Retain, want 3", len(pvcs.Items))
		}
		recreated := db.DeepCopy()
		recreated.Spec.Replicas = ptr.To[int32](3)
		if err := env.c.Create(ctx, recreated); err != nil {
			t.Fatal(err)
		}
		waitReady(t, ns, 3, 5*time.Minute)
		newURI, newPassword := credentials(t, ns)
		if newPassword != password {
			t.Fatal("the password changed across delete and re-create under Retain")
		}
		if n := count(t, newURI); n != rows {
			t.Fatalf("%d rows after re-create, want %d", n, rows)
		}
	})

	step("delete under Delete leaves nothing", func(t *testing.T) {
		var pvs corev1.PersistentVolumeList
		if err := env.c.List(ctx, &pvs); err != nil {
			t.Fatal(err)
		}
		var dirs []string
		for _, pv := range pvs.Items {
			if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == ns && pv.Spec.Local != nil {
				dirs = append(dirs, pv.Spec.Local.Path)
			}
		}
		if len(dirs) != 3 {
			t.Fatalf("found %d local volumes of %s, want 3", len(dirs), ns)
		}
		patch(t, ns, func(db *databasev1alpha1.MyDatabase) { db.Spec.DeletionPolicy = databasev1alpha1.DeletionPolicyDelete })
		deleteAndWait(t, ns)
		testenv.Eventually(t, 2*time.Minute, "no object, volume or directory of the database left", func() error {
			var left []string
			lists := map[string]client.ObjectList{
				"pods": &corev1.PodList{}, "claims": &corev1.PersistentVolumeClaimList{},
				"secrets": &corev1.SecretList{}, "configmaps": &corev1.ConfigMapList{}, "services": &corev1.ServiceList{},
			}
			for kind, l := range lists {
				if err := env.c.List(ctx, l, client.InNamespace(ns),
					client.MatchingLabels{databasev1alpha1.LabelInstance: dbName}); err != nil {
					return err
				}
				if n := meta.LenList(l); n > 0 {
					left = append(left, fmt.Sprintf("%d %s", n, kind))
				}
			}
			var pvs corev1.PersistentVolumeList
			if err := env.c.List(ctx, &pvs); err != nil {
				return err
			}
			for _, pv := range pvs.Items {
				if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == ns {
					left = append(left, "PersistentVolume "+pv.Name)
				}
			}
			for _, d := range dirs {
				if _, err := os.Stat(d); err == nil {
					left = append(left, "directory "+d)
				}
			}
			if len(left) > 0 {
				return fmt.Errorf("left: %s", strings.Join(left, ", "))
			}
			return nil
		})
	})
}

// ---------------------------------------------------------------- helpers

func newNamespace(t *testing.T, name string, labels map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if err := env.c.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		// Nothing of the test may keep the namespace: drop every finalizer
		// the operator would otherwise need to see through.
		var dbs databasev1alpha1.MyDatabaseList
		if err := env.c.List(ctx, &dbs, client.InNamespace(name)); err == nil {
			for i := range dbs.Items {
				_ = env.c.Delete(ctx, &dbs.Items[i])
			}
		}
		_ = env.c.Delete(ctx, ns)
	})
	return name
}

func getDB(t *testing.T, ns string) *databasev1alpha1.MyDatabase {
	t.Helper()
	db := &databasev1alpha1.MyDatabase{}
	if err := env.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: dbName}, db); err != nil {
		t.Fatal(err)
	}
	return db
}

// patch changes the spec with a merge patch of the whole object.
func patch(t *testing.T, ns string, change func(*databasev1alpha1.MyDatabase)) {
	t.Helper()
	db := getDB(t, ns)
	orig := db.DeepCopy()
	change(db)
	if err := env.c.Patch(t.Context(), db, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
}

// waitReady waits until the MyDatabase reports Ready for its current
// generation with every server ready, and every pod runs the StatefulSet's
// current revision.
func waitReady(t *testing.T, ns string, replicas int32, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, fmt.Sprintf("MyDatabase %s Ready with %d servers", dbName, replicas), func() error {
		db := &databasev1alpha1.MyDatabase{}
		if err := env.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: dbName}, db); err != nil {
			return err
		}
		st := db.Status
		if st.ObservedGeneration != db.Generation || !meta.IsStatusConditionTrue(st.Conditions, databasev1alpha1.ConditionReady) ||
			st.ReadyReplicas != replicas || st.Replicas != replicas {
			return fmt.Errorf("generation %d, observed %d, phase %s, ready %s", db.Generation, st.ObservedGeneration, st.Phase, st.Ready)
		}
		if pods := podsOf(t, ns); len(pods) != int(replicas) {
			return fmt.Errorf("%d pods, want %d", len(pods), replicas)
		}
		return nil
	})
}

// waitRolled waits until every pod was replaced (none of the UIDs in
// before is left) and the MyDatabase is Ready again.
func waitRolled(t *testing.T, ns string, before map[string]string, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, "every pod replaced", func() error {
		for name, uid := range podUIDs(t, ns) {
			if before[name] == uid {
				return fmt.Errorf("pod %s is still the one from before the change", name)
			}
		}
		return nil
	})
	waitReady(t, ns, int32(len(before)), timeout)
}

func podsOf(t *testing.T, ns string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := env.c.List(t.Context(), &pods, client.InNamespace(ns),
		client.MatchingLabels{databasev1alpha1.LabelInstance: dbName}); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

func podUIDs(t *testing.T, ns string) map[string]string {
	t.Helper()
	uids := map[string]string{}
	for _, p := range podsOf(t, ns) {
		uids[p.Name] = string(p.UID)
	}
	return uids
}

// credentials returns the URI and the password of the connection Secret.
func credentials(t *testing.T, ns string) (uri, password string) {
	t.Helper()
	var s corev1.Secret
	name := specs.CredentialsSecretName(getDB(t, ns))
	if err := env.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Data["uri"]) == 0 || len(s.Data["password"]) == 0 || len(s.Data[specs.CACertKey]) == 0 {
		t.Fatalf("Secret %s has no uri, password or %s", name, specs.CACertKey)
	}
	// The uri asks for sslmode=verify-full: the client verifies the server
	// with the Secret's ca.crt only, as an application would.
	ca := filepath.Join(env.work, ns+"-"+specs.CACertKey)
	if err := os.WriteFile(ca, s.Data[specs.CACertKey], 0o644); err != nil {
		t.Fatal(err)
	}
	return string(s.Data["uri"]) + "&sslrootcert=" + url.QueryEscape(ca), string(s.Data["password"])
}

func deleteAndWait(t *testing.T, ns string) {
	t.Helper()
	if err := env.c.Delete(t.Context(), getDB(t, ns)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 3*time.Minute, "the MyDatabase gone", func() error {
		err := env.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: dbName}, &databasev1alpha1.MyDatabase{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			return fmt.Errorf("still there")
		}
		return err
	})
}

// podExec runs a command in the postgres container of a database pod,
// through `kubectl exec` (the API server, then the kubelet), and returns its
// combined output.
func podExec(ns, pod string, argv ...string) (string, error) {
	args := append([]string{"exec", "--namespace", ns, pod, "--container", "postgres", "--"}, argv...)
	out, err := exec.Command("kubectl", args...).CombinedOutput()
	if err != nil {
		return strings.TrimSpace(string(out)), fmt.Errorf("kubectl exec %s %s: %w", pod, argv[0], err)
	}
	return strings.TrimSpace(string(out)), nil
}

// superuserSQL runs a query as postgres in a database pod, over its socket.
func superuserSQL(ns, pod, query string) (string, error) {
	out, err := podExec(ns, pod, "psql", "--no-psqlrc", "--tuples-only", "--no-align", "--username", "postgres", "--command", query)
	if err != nil {
		return "", fmt.Errorf("%w: %s", err, out)
	}
	return out, nil
}

// psqlPod runs psql in a pod of the namespace, with the URI from the
// connection Secret (never seen by the test), and returns its output.
func psqlPod(t *testing.T, ns, name, query string) string {
	t.Helper()
	secret := specs.CredentialsSecretName(getDB(t, ns))
	uri := corev1.EnvVar{Name: "DATABASE_URI", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "uri"},
	}}
	// The CA as the README tells an application to mount it: only the
	// Secret's ca.crt, and PGSSLROOTCERT naming it (the uri asks for
	// sslmode=verify-full).
	rootCert := corev1.EnvVar{Name: "PGSSLROOTCERT", Value: "/etc/db/" + specs.CACertKey}
	return runPod(t, ns, name, []corev1.EnvVar{uri, rootCert}, func(spec *corev1.PodSpec) {
		spec.Volumes = []corev1.Volume{{Name: "ca", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: secret, Items: []corev1.KeyToPath{{Key: specs.CACertKey, Path: specs.CACertKey}}}}}}
		spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "ca", MountPath: "/etc/db", ReadOnly: true}}
	}, "psql", "--no-psqlrc", "--tuples-only", "--no-align", "--command", query, "$(DATABASE_URI)")
}

// runPod runs a command to completion in a pod of the namespace (the
// postgres image, Pod Security restricted) and returns its output.
func runPod(t *testing.T, ns, name string, vars []corev1.EnvVar, mutate func(*corev1.PodSpec), command ...string) string {
	t.Helper()
	ctx := t.Context()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: new(false),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: new(true), RunAsUser: new(int64(specs.PostgresUID)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            "psql",
				Image:           "postgres:17",
				ImagePullPolicy: corev1.PullNever,
				Command:         command,
				Env:             vars,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: new(false), ReadOnlyRootFilesystem: new(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
	if mutate != nil {
		mutate(&pod.Spec)
	}
	if err := env.c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, "pod "+name+" to finish", func() error {
		if err := env.c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		switch pod.Status.Phase {
		case corev1.PodSucceeded:
			return nil
		case corev1.PodFailed:
			t.Fatalf("pod %s failed: %s", name, podLogs(t, ns, name))
		}
		return fmt.Errorf("phase %s", pod.Status.Phase)
	})
	return strings.TrimSpace(podLogs(t, ns, name))
}

func podLogs(t *testing.T, ns, name string) string {
	t.Helper()
	b, err := env.cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(t.Context())
	if err != nil {
		return fmt.Sprintf("(no logs: %v)", err)
	}
	return string(b)
}

// dumpNamespace logs what a failed step leaves, to read the failure.
func dumpNamespace(t *testing.T, ns string) {
	ctx := context.Background()
	var dbs databasev1alpha1.MyDatabaseList
	if err := env.c.List(ctx, &dbs, client.InNamespace(ns)); err == nil {
		for _, db := range dbs.Items {
			t.Logf("MyDatabase %s: phase %s, ready %s, conditions %+v", db.Name, db.Status.Phase, db.Status.Ready, db.Status.Conditions)
		}
	}
	var pods corev1.PodList
	if err := env.c.List(ctx, &pods, client.InNamespace(ns)); err == nil {
		for _, p := range pods.Items {
			t.Logf("pod %s: %s, conditions %+v", p.Name, p.Status.Phase, p.Status.Conditions)
			for _, previous := range []bool{true, false} {
				opts := &corev1.PodLogOptions{TailLines: ptr.To[int64](20), Previous: previous}
				if b, err := env.cs.CoreV1().Pods(ns).GetLogs(p.Name, opts).DoRaw(ctx); err == nil {
					t.Logf("pod %s log (previous container: %v):\n%s", p.Name, previous, b)
				}
			}
		}
	}
	var events corev1.EventList
	if err := env.c.List(ctx, &events, client.InNamespace(ns)); err == nil {
		for _, e := range events.Items {
			if e.Type != corev1.EventTypeNormal {
				t.Logf("event %s %s: %s", e.InvolvedObject.Name, e.Reason, e.Message)
			}
		}
	}
	t.Logf("operator log (last 40 lines of %s):\n%s", env.operator.Log, testenv.Tail(env.operator.Log, 40))
}

// writeResult records a measured figure in bin/real/results.txt, which
// `make test-real` prints at the end.
func writeResult(t *testing.T, name string, d time.Duration) {
	f, err := os.OpenFile(filepath.Join(env.work, "results.txt"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Log(err)
		return
	}
	defer func() { _ = f.Close() }()
	_, _ = fmt.Fprintf(f, "%s %s\n", name, d.Round(10*time.Millisecond))
}

// writer inserts one row at a time through the rw Service, each on a new
// connection, and records when each insert was acknowledged.
type writer struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	ok     []time.Time
	failed []time.Time
}

func startWriter(ctx context.Context, uri string) *writer {
	ctx, cancel := context.WithCancel(ctx)
	w := &writer{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			err := func() error {
				actx, acancel := context.WithTimeout(ctx, 2*time.Second)
				defer acancel()
				conn, err := dial(actx, uri)
				if err != nil {
					return err
				}
				defer func() { _ = conn.Close(context.Background()) }()
				_, err = conn.Exec(actx, "INSERT INTO items (note) VALUES ('written while the primary changes')")
				return err
			}()
			w.mu.Lock()
			if err == nil {
				w.ok = append(w.ok, time.Now())
			} else if ctx.Err() == nil {
				w.failed = append(w.failed, time.Now())
			}
			w.mu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return w
}

func (w *writer) acked() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ok)
}

// gapAfter returns the time from the last acknowledged write before the
// first failure after t to the first acknowledged write after that failure;
// ok is false while no write has succeeded after a failure.
func (w *writer) gapAfter(t time.Time) (gap time.Duration, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	i := slices.IndexFunc(w.failed, func(f time.Time) bool { return f.After(t) })
	if i < 0 {
		// No failure yet: report progress only if writes go on.
		return 0, slices.ContainsFunc(w.ok, func(o time.Time) bool { return o.After(t) })
	}
	firstFail := w.failed[i]
	var last, next time.Time
	for _, o := range w.ok {
		if o.Before(firstFail) {
			last = o
		} else if next.IsZero() {
			next = o
		}
	}
	if next.IsZero() {
		return 0, false
	}
	return next.Sub(last), true
}

// longestGap is the longest time between two acknowledged writes.
func (w *writer) longestGap() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var longest time.Duration
	for i := 1; i < len(w.ok); i++ {
		longest = max(longest, w.ok[i].Sub(w.ok[i-1]))
	}
	return longest
}

// stop ends the writer and returns how many writes were acknowledged.
// unacknowledged is the number of writes that failed.
func (w *writer) unacknowledged() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.failed)
}

func (w *writer) stop() int {
	w.cancel()
	<-w.done
	return w.acked()
}

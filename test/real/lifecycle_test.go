//go:build real

package real

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
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
			Storage:        databasev1alpha1.StorageSpec{Size: resource.MustParse("8Gi")}, // room for the 1 GiB of WAL a replica's slot holds below
			DatabaseName:   "app",
			User:           "app",
			Parameters:     map[string]string{"max_connections": "50"},
			DeletionPolicy: databasev1alpha1.DeletionPolicyRetain,
		},
	}
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow() // newNamespace's cleanup dumps what the step left
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

	step("declared roles, databases and the image's extensions: a client pod logs in with each role's generated Secret", func(t *testing.T) {
		patch(t, ns, func(db *databasev1alpha1.MyDatabase) {
			db.Spec.Roles = []databasev1alpha1.RoleSpec{{Name: "reader", InRoles: []string{"pg_read_all_data"}}, {Name: "reporter"}}
			db.Spec.Databases = []databasev1alpha1.DatabaseSpec{
				{Name: "app", Extensions: []databasev1alpha1.ExtensionSpec{{Name: "pg_stat_statements"}, {Name: "pgaudit"}},
					Publications: []databasev1alpha1.PublicationSpec{{Name: "items_pub", Tables: []string{"items"}}}},
				{Name: "reports", Owner: "reporter", Extensions: []databasev1alpha1.ExtensionSpec{{Name: "vector"}}},
			}
			// pgaudit works only preloaded, and wal_level=logical (the
			// publication, subscribed to below) needs a restart too.
			db.Spec.Parameters["shared_preload_libraries"] = "pg_stat_statements,pgaudit"
			db.Spec.Replication.Logical = true
		})
		waitReady(t, ns, 1, 3*time.Minute)
		for _, kind := range []string{databasev1alpha1.ConditionRolesApplied, databasev1alpha1.ConditionDatabasesApplied} {
			testenv.Eventually(t, time.Minute, kind, func() error {
				db := getDB(t, ns)
				if c := meta.FindStatusCondition(db.Status.Conditions, kind); c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != db.Generation {
					return fmt.Errorf("%+v", c)
				}
				return nil
			})
		}
		// The application user owns app: it lets reader in.
		if _, err := connect(t, uri).Exec(ctx, "GRANT CONNECT ON DATABASE app TO reader"); err != nil {
			t.Fatal(err)
		}
		roleURI := func(role string) string {
			var s corev1.Secret
			if err := env.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: specs.GeneratedRoleSecretName(db, role)}, &s); err != nil {
				t.Fatal(err)
			}
			return string(s.Data[specs.SecretURIKey])
		}
		reader := corev1.EnvVar{Name: "DATABASE_URI", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: specs.GeneratedRoleSecretName(db, "reader")}, Key: specs.SecretURIKey}}}
		if out := psqlPodWith(t, ns, "reader", reader, "SELECT current_user || ' ' || count(*) FROM items"); out != fmt.Sprintf("reader %d", rows) {
			t.Errorf("reader in app: %q", out)
		}
		// The reporter owns reports: its Secret's URI with that database.
		reporter := corev1.EnvVar{Name: "DATABASE_URI", Value: strings.Replace(roleURI("reporter"), "/app?", "/reports?", 1)}
		if out := psqlPodWith(t, ns, "reporter", reporter, "SELECT current_user || ' ' || ('[1,2]'::vector <-> '[4,6]'::vector)"); out != "reporter 5" {
			t.Errorf("reporter in reports, with pgvector: %q", out)
		}
		// In app, as postgres: the two extensions, pgaudit loaded.
		out, err := podExec(ns, dbName+"-0", "psql", "--no-psqlrc", "--tuples-only", "--no-align", "--username", "postgres", "--dbname", "app",
			"--command", "SELECT string_agg(extname, ',' ORDER BY extname) || ' ' || current_setting('pgaudit.log') FROM pg_extension")
		if err != nil || out != "pg_stat_statements,pgaudit,plpgsql none" {
			t.Errorf("extensions in app, and pgaudit.log: %q %v", out, err)
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

	// A pooler in transaction mode stays in front of the primary through
	// the switchover and the rolls of the next steps: its clients see none.
	pooler := &databasev1alpha1.MyDatabasePooler{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: dbName + "-pool"},
		Spec: databasev1alpha1.MyDatabasePoolerSpec{Database: dbName, PoolMode: databasev1alpha1.PoolModeTransaction}}
	var throughPooler string
	// pooled runs move (a change of primary) under clients of the pooler,
	// and checks that none of their writes failed.
	pooled := func(t *testing.T, what, result string, move func()) {
		clients := startClients(ctx, throughPooler, 4)
		began := time.Now()
		move()
		acked, failed, unknown := clients.stop(), clients.failures(), clients.unacknowledged()
		n := count(t, uri)
		t.Logf("THROUGH THE POOLER during %s: %d writes acknowledged, %d failed; the slowest took %s, the longest gap %s",
			what, acked, failed, clients.slowest.Round(time.Millisecond), clients.longestGap().Round(time.Millisecond))
		writeResult(t, result, clients.slowest)
		// Those the stop cut may or may not be there.
		if failed != 0 || n < rows+acked || n > rows+acked+unknown {
			t.Errorf("through the pooler: %d writes failed (%q), %d rows for %d before, %d acknowledged and %d unknown; want none failed, none lost",
				failed, clients.errs, n, rows, acked, unknown)
		}
		rows = n
		// Not by luck: each PgBouncer paused and resumed.
		pods := &corev1.PodList{}
		if err := env.c.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels(specs.PoolerSelectorLabels(pooler))); err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			out, err := exec.Command("kubectl", "logs", "--namespace", ns, p.Name, "--container", specs.PoolerContainerName,
				"--since-time", began.UTC().Format(time.RFC3339)).CombinedOutput()
			resumed := regexp.MustCompile(`resumed PgBouncer after a pause of \S+: a new primary`).FindAll(out, -1)
			if err != nil || len(resumed) == 0 {
				t.Errorf("pooler pod %s did not pause and resume on a new primary (%v):\n%s", p.Name, err, out)
			}
			t.Logf("pooler pod %s: %s", p.Name, bytes.Join(resumed, []byte("; ")))
		}
		// The pooler's status reports the last switchover: every pod paused.
		testenv.Eventually(t, time.Minute, "the pooler's status.lastSwitchover", func() error {
			p := &databasev1alpha1.MyDatabasePooler{}
			if err := env.c.Get(ctx, client.ObjectKeyFromObject(pooler), p); err != nil {
				return err
			}
			if last := p.Status.LastSwitchover; last == nil || last.FinishedAt.Before(&metav1.Time{Time: began.Truncate(time.Second)}) ||
				int(last.PausedPods) != len(pods.Items) {
				return fmt.Errorf("lastSwitchover %+v, want %d pods paused since %s", last, len(pods.Items), began.Format(time.RFC3339))
			}
			return nil
		})
	}

	step("a pooler in front of the primary: PgBouncer pods run by the pooler manager, clients log in through its Service with verify-full", func(t *testing.T) {
		if err := env.c.Create(ctx, pooler); err != nil {
			t.Fatal(err)
		}
		created := time.Now()
		var available time.Duration // when the pods were first seen available, waiting for the lookup
		testenv.Eventually(t, 3*time.Minute, "the pooler Ready", func() error {
			if err := env.c.Get(ctx, client.ObjectKeyFromObject(pooler), pooler); err != nil {
				return err
			}
			c := meta.FindStatusCondition(pooler.Status.Conditions, databasev1alpha1.ConditionReady)
			if c != nil && c.Reason == databasev1alpha1.ReasonLookupPending && available == 0 {
				available = time.Since(created)
			}
			if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != pooler.Generation {
				return fmt.Errorf("conditions %+v", pooler.Status.Conditions)
			}
			return nil
		})
		// Before PoolerLookupApplied held Ready back, the pooler was Ready
		// from the first of these times, and a login then failed.
		t.Logf("the pooler Ready %v after it was made; its pods available, the lookup not yet made, at %v (0: not seen)",
			time.Since(created).Round(10*time.Millisecond), available.Round(10*time.Millisecond))
		if pooler.Status.ReadyInstances != 2 {
			t.Errorf("%d PgBouncer pods ready, want the default 2", pooler.Status.ReadyInstances)
		}
		pods := &corev1.PodList{}
		if err := env.c.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels(specs.PoolerSelectorLabels(pooler))); err != nil || len(pods.Items) == 0 {
			t.Fatalf("the pooler's pods: %d (%v)", len(pods.Items), err)
		}
		out, err := exec.Command("kubectl", "exec", "--namespace", ns, pods.Items[0].Name, "--container", specs.PoolerContainerName, "--",
			"sh", "-c", `tr '\0' ' ' </proc/1/cmdline; echo; id -u`).CombinedOutput()
		if want := specs.InstanceManagerPath + " pooler \n999\n"; err != nil || string(out) != want {
			t.Errorf("PID 1 of the pooler's pod and its uid: %q (%v), want %q", out, err, want)
		}
		// The same URI, with the pooler's Service for the host: its
		// certificate is issued by the MyDatabase's CA for that name.
		through := strings.Replace(uri, "@"+dbName+"-rw.", "@"+pooler.Name+".", 1)
		// No named prepared statements: PgBouncer 1.18 does not carry them
		// across server connections in transaction mode.
		throughPooler = through + "&default_query_exec_mode=exec"
		conn := connect(t, through)
		var user string
		var standby bool
		var n int
		if err := conn.QueryRow(ctx, "SELECT current_user, pg_is_in_recovery(), (SELECT count(*) FROM items)").Scan(&user, &standby, &n); err != nil {
			t.Fatal(err)
		}
		if user != "app" || standby || n != rows {
			t.Fatalf("through the pooler: user %s, in recovery %v, %d rows; want app on the primary with %d", user, standby, n, rows)
		}
		if _, err := conn.Exec(ctx, "INSERT INTO items (note) VALUES ('through the pooler')"); err != nil {
			t.Fatalf("a write through the pooler: %v", err)
		}
		rows++
		_ = conn.Close(ctx)
	})

	step("kubectl mydb: status; psql on the primary and on a replica, with the Secret's password", func(t *testing.T) {
		checkPlugin(t, ns, password, rows)
	})

	step("kubectl mydb pooler pause: a write through the pooler waits, still connected; resume: it runs", func(t *testing.T) {
		conn := connect(t, throughPooler)
		defer func() { _ = conn.Close(ctx) }()
		pods := &corev1.PodList{}
		if err := env.c.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels(specs.PoolerSelectorLabels(pooler))); err != nil || len(pods.Items) == 0 {
			t.Fatalf("the pooler's pods: %d (%v)", len(pods.Items), err)
		}
		began := time.Now()
		if out, err := kubectlMydb(t, "pooler", "pause", pooler.Name, "-n", ns); err != nil {
			t.Fatalf("kubectl mydb pooler pause: %v\n%s", err, out)
		}
		// The operator nudges the pods, the kubelet refreshes their
		// ConfigMap volume, each pooler manager pauses its PgBouncer.
		testenv.Eventually(t, 2*time.Minute, "every PgBouncer pod paused by hand", func() error {
			for _, p := range pods.Items {
				out, err := exec.Command("kubectl", "logs", "--namespace", ns, p.Name, "--container", specs.PoolerContainerName,
					"--since-time", began.UTC().Format(time.RFC3339)).CombinedOutput()
				if err != nil || !bytes.Contains(out, []byte("pausing PgBouncer by hand")) {
					return fmt.Errorf("%s not yet (%v)", p.Name, err)
				}
			}
			return nil
		})
		paused := time.Since(began)
		done := make(chan error, 1)
		go func() {
			_, err := conn.Exec(ctx, "INSERT INTO items (note) VALUES ('held by a pause by hand')")
			done <- err
		}()
		select {
		case err := <-done:
			t.Fatalf("a write through the paused pooler ran (%v)", err)
		case <-time.After(2 * time.Second):
		}
		resumed := time.Now()
		if out, err := kubectlMydb(t, "pooler", "resume", pooler.Name, "-n", ns); err != nil {
			t.Fatalf("kubectl mydb pooler resume: %v\n%s", err, out)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("the held write, once resumed: %v", err)
			}
		case <-time.After(2 * time.Minute):
			t.Fatal("the held write did not run within 2 minutes of the resume")
		}
		rows++
		t.Logf("PAUSE BY HAND: every PgBouncer pod paused %s after kubectl mydb pooler pause; the held write ran %s after resume",
			paused.Round(10*time.Millisecond), time.Since(resumed).Round(10*time.Millisecond))
		writeResult(t, "pooler-pause-by-hand", paused)
	})

	step("kubectl mydb: a switchover, then a rolling restart through the switchover path", func(t *testing.T) {
		pooled(t, "kubectl mydb switchover and restart", "pooler-slowest-write-switchover-and-restart", func() { checkPluginMoves(t, ns, dbName+"-2") })
		checkPlugin(t, ns, password, rows)
	})

	step("a parameter change rolls every pod and takes effect", func(t *testing.T) {
		before := podUIDs(t, ns)
		pooled(t, "the roll of a parameter change", "pooler-slowest-write-parameter-roll", func() {
			patch(t, ns, func(db *databasev1alpha1.MyDatabase) { db.Spec.Parameters["max_connections"] = "60" })
			waitRolled(t, ns, before, 5*time.Minute)
		})
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
		for _, p := range podsOf(t, ns) {
			if img := p.Spec.Containers[0].Image; img != "postgres:"+version {
				t.Errorf("pod %s runs %s, want postgres:%s", p.Name, img, version)
			}
		}
		rows = rolledUnderWrites(t, ns, uri, w, rows, primary, "the rolling minor update", "write-gap-rolling-minor-update")
	})

	step("a new operator version replaces every instance manager in place under writes: no server restarts, no write fails", func(t *testing.T) {
		before := podUIDs(t, ns)
		started, restarts := map[string]string{}, map[string]int32{}
		for _, p := range podsOf(t, ns) {
			started[p.Name] = superuser(t, ns, p.Name, "SELECT pg_postmaster_start_time()")
			restarts[p.Name] = p.Status.ContainerStatuses[0].RestartCount
		}
		sts := &appsv1.StatefulSet{}
		if err := env.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: dbName}, sts); err != nil {
			t.Fatal(err)
		}
		oldImage := sts.Spec.Template.Spec.InitContainers[0].Image
		w := startWriter(ctx, uri)
		digest := env.nextOperatorVersion(t)
		newOperator := time.Now()
		testenv.Eventually(t, 3*time.Minute, "every instance reporting instance manager "+digest[:12], func() error {
			db := getDB(t, ns)
			for _, in := range db.Status.Instances {
				if in.Manager != digest[:12] {
					return fmt.Errorf("%s runs instance manager %q", in.Name, in.Manager)
				}
			}
			if len(db.Status.Instances) != 3 {
				return fmt.Errorf("%d instances", len(db.Status.Instances))
			}
			return nil
		})
		t.Logf("every instance manager replaced %s after the new operator started", time.Since(newOperator).Round(time.Second))
		acked, failed := w.stop(), w.failures()
		if failed > 0 {
			t.Errorf("%d writes failed while the instance managers were replaced (%d acknowledged)", failed, acked)
		}
		if now := podUIDs(t, ns); !maps.Equal(now, before) {
			t.Errorf("pods %v, before %v: replaced", now, before)
		}
		for _, p := range podsOf(t, ns) {
			if now := superuser(t, ns, p.Name, "SELECT pg_postmaster_start_time()"); now != started[p.Name] {
				t.Errorf("%s's server started at %s, before at %s: restarted", p.Name, now, started[p.Name])
			}
			if n := p.Status.ContainerStatuses[0].RestartCount; n != restarts[p.Name] {
				t.Errorf("%s's container restarted (%d restarts, before %d)", p.Name, n, restarts[p.Name])
			}
		}
		if err := env.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: dbName}, sts); err != nil {
			t.Fatal(err)
		}
		if image := sts.Spec.Template.Spec.InitContainers[0].Image; image != oldImage {
			t.Errorf("the template's instance manager image went from %s to %s: the next pod restart would roll", oldImage, image)
		}
		rows = count(t, uri)
		gap, ended := w.longestGapEnded()
		t.Logf("WRITE GAP while every instance manager was replaced in place: %s (ended %s); %d writes acknowledged, %d failed",
			gap.Round(10*time.Millisecond), ended.UTC().Format("15:04:05.000"), acked, failed)
		writeResult(t, "write-gap-instance-managers-replaced", gap)
		// The primary's commits went on through its fence bridge, which
		// its new instance manager stopped once its own fence streamed.
		primary := getDB(t, ns).Status.CurrentPrimary
		var exec []string
		var execAt time.Time
		for line := range strings.Lines(podLogs(t, ns, primary)) {
			if strings.Contains(line, "fence bridge") || strings.Contains(line, "re-executing") || strings.Contains(line, "adopted postgres") {
				exec = append(exec, strings.TrimSpace(line))
			}
			if stamp, _, ok := strings.Cut(line, " "); ok && strings.Contains(line, "re-executing") {
				execAt, _ = time.Parse(time.RFC3339Nano, stamp)
			}
		}
		t.Logf("the primary %s across its replacement (the writes either side of its exec %s apart):\n%s",
			primary, w.gapAcross(execAt).Round(time.Millisecond), strings.Join(exec, "\n"))
		if !slices.ContainsFunc(exec, func(l string) bool { return strings.Contains(l, "stopped: this process's fence streams") }) {
			t.Errorf("the primary %s's fence bridge did not hold its fence until the new instance manager's streamed", primary)
		}
	})

	// A second MyDatabase subscribes to items_pub (declared above) by the
	// publisher's name; its slot is a failover slot, which every replica
	// of the publisher keeps (PostgreSQL 17), so the subscription goes on
	// from the promoted replica in the next step.
	sub := &databasev1alpha1.MyDatabase{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sub"},
		Spec: databasev1alpha1.MyDatabaseSpec{
			Version: "17", Replicas: ptr.To[int32](1), Storage: databasev1alpha1.StorageSpec{Size: resource.MustParse("1Gi")},
			DatabaseName: "app", User: "app", DeletionPolicy: databasev1alpha1.DeletionPolicyDelete,
			Databases: []databasev1alpha1.DatabaseSpec{{Name: "app", Subscriptions: []databasev1alpha1.SubscriptionSpec{{
				Name: "items_sub", Publications: []string{"items_pub"}, Source: databasev1alpha1.SubscriptionSource{MyDatabase: dbName}}}}},
		},
	}
	var subURI string
	// sameItems waits for the subscriber to hold exactly the publisher's
	// items: every id once (its primary key), none missing, none more.
	sameItems := func(t *testing.T, timeout time.Duration) {
		t.Helper()
		const digest = "SELECT count(*) || ' ' || coalesce(md5(string_agg(id::text, ',' ORDER BY id)), '') FROM items"
		var want string
		if err := connect(t, uri).QueryRow(ctx, digest).Scan(&want); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, timeout, "the subscriber's items the publisher's: "+want, func() error {
			conn, err := dial(ctx, subURI)
			if err != nil {
				return err
			}
			defer func() { _ = conn.Close(context.Background()) }()
			var got string
			if err := conn.QueryRow(ctx, digest).Scan(&got); err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("the subscriber has %s", got)
			}
			return nil
		})
		t.Logf("subscriber and publisher: %s (rows, md5 of the ids)", want)
	}

	// slotSynced waits for the replica pod to hold a synchronised copy of
	// the subscription's slot.
	slotSynced := func(t *testing.T, pod string) {
		t.Helper()
		testenv.Eventually(t, time.Minute, "the slot synchronised on "+pod, func() error {
			out, err := superuserSQL(ns, pod, "SELECT slot_type || ' ' || failover || ' ' || synced || ' ' || NOT temporary FROM pg_replication_slots WHERE slot_name = 'items_sub'")
			if err != nil || out != "logical true true true" {
				return fmt.Errorf("items_sub on %s: %q %v, want a logical failover slot, synced, persistent", pod, out, err)
			}
			return nil
		})
	}

	step("a subscriber MyDatabase receives the publication through a failover slot every replica keeps", func(t *testing.T) {
		if err := env.c.Create(ctx, sub.DeepCopy()); err != nil {
			t.Fatal(err)
		}
		waitReadyOf(t, ns, sub.Name, 1, 3*time.Minute)
		subURI, _ = credentialsOf(t, sub)
		// The subscription waits for the table it receives into.
		if _, err := connect(t, subURI).Exec(ctx, "CREATE TABLE items (id bigint PRIMARY KEY, note text NOT NULL)"); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 2*time.Minute, "the subscriber's DatabasesApplied", func() error {
			db := &databasev1alpha1.MyDatabase{}
			if err := env.c.Get(ctx, client.ObjectKeyFromObject(sub), db); err != nil {
				return err
			}
			if c := meta.FindStatusCondition(db.Status.Conditions, databasev1alpha1.ConditionDatabasesApplied); c == nil || c.Status != metav1.ConditionTrue {
				return fmt.Errorf("%+v", c)
			}
			return nil
		})
		sameItems(t, time.Minute)
		primary := getDB(t, ns).Status.CurrentPrimary
		var members []string
		for _, p := range podsOf(t, ns) {
			if p.Name == primary {
				continue
			}
			members = append(members, "mydb_"+strings.ReplaceAll(p.Name, "-", "_"))
			slotSynced(t, p.Name)
		}
		slices.Sort(members)
		if got := superuser(t, ns, primary, "SHOW synchronized_standby_slots"); got != strings.Join(members, ",") {
			t.Errorf("synchronized_standby_slots %q on %s, want the members' slots %q", got, primary, strings.Join(members, ","))
		}
	})

	step("deleting the primary pod: a replica takes over, none acknowledged is lost; the pooler's clients see no error", func(t *testing.T) {
		// The rolls above moved the primary, each by a switchover.
		var db databasev1alpha1.MyDatabase
		if err := env.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: dbName}, &db); err != nil {
			t.Fatal(err)
		}
		primary := db.Status.CurrentPrimary
		// Clients of the rw Service, and of the pooler in front of it.
		w, clients := startWriter(ctx, uri), startClients(ctx, throughPooler, 4)
		testenv.Eventually(t, 30*time.Second, "the writers' first writes", func() error {
			if w.acked() < 20 || clients.acked() < 20 {
				return fmt.Errorf("%d and %d writes so far", w.acked(), clients.acked())
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
			if _, ok := clients.gapAfter(deleted); !ok {
				return fmt.Errorf("no write through the pooler has succeeded since the pod was deleted (%s ago)", time.Since(deleted).Round(time.Second))
			}
			return nil
		})
		acked, pooledAcked := w.stop(), clients.stop()
		gap, _ := w.gapAfter(deleted)
		// Reported, not asserted: tests assert behaviour, benchmarks time.
		t.Logf("WRITE GAP after deleting the primary pod %s: %s (last acknowledged write to the first one after); through the pooler %s, the slowest write %s, %d failed",
			primary, gap.Round(10*time.Millisecond), clients.longestGap().Round(10*time.Millisecond), clients.slowest.Round(10*time.Millisecond), clients.failures())
		writeResult(t, "write-gap-primary-pod-deleted", gap)
		writeResult(t, "pooler-write-gap-primary-pod-deleted", clients.longestGap())
		// The primary asked the poolers to pause before it stopped: their
		// clients' transactions waited for the election instead of
		// failing, and ran as soon as the new primary served (within a
		// few seconds of the rw Service's clients).
		if n := clients.failures(); n != 0 {
			t.Errorf("through the pooler %d writes failed (%q); want none: the poolers pause before the primary stops", n, clients.errs)
		}
		_, directBack := w.longestGapEnded()
		if _, pooledBack := clients.longestGapEnded(); pooledBack.Sub(directBack) > 5*time.Second {
			t.Errorf("through the pooler the writes came back %s after the rw Service's", pooledBack.Sub(directBack).Round(10*time.Millisecond))
		}
		waitReady(t, ns, 3, 5*time.Minute)
		// Every acknowledged write is there; a failed one may be too (its
		// commit reached the WAL, and the replicas, but not the client).
		acked += pooledAcked
		unknown := w.unacknowledged() + clients.unacknowledged()
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
		// The subscription went on from the new primary's copy of its
		// slot: the rows written before, across and after the failover,
		// each once.
		sameItems(t, 2*time.Minute)
		// The old primary, a replica now, holds a synchronised copy, not
		// the slot it made as the primary (pg_rewind kept that one).
		slotSynced(t, primary)
	})

	step("deleted, the pooler leaves nothing", func(t *testing.T) {
		if err := env.c.Delete(ctx, pooler); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 2*time.Minute, "the pooler's children collected", func() error {
			var left []string
			for name, obj := range map[string]client.Object{pooler.Name + " Deployment": &appsv1.Deployment{},
				pooler.Name + " Service": &corev1.Service{}, pooler.Name + " PodDisruptionBudget": &policyv1.PodDisruptionBudget{},
				specs.PoolerConfigMapName(pooler) + " ConfigMap": &corev1.ConfigMap{}, specs.PoolerSecretName(pooler) + " Secret": &corev1.Secret{}} {
				if err := env.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: strings.Fields(name)[0]}, obj); !apierrors.IsNotFound(err) {
					left = append(left, name)
				}
			}
			if len(left) > 0 {
				return fmt.Errorf("left: %v", left)
			}
			return nil
		})
	})

	step("the primary frozen under writes, as a hung node: a replica takes over, none acknowledged is lost, the subscriber gets every row once", func(t *testing.T) {
		primary := getDB(t, ns).Status.CurrentPrimary
		w := startWriter(ctx, uri)
		testenv.Eventually(t, 30*time.Second, "the writer's first writes", func() error {
			if w.acked() < 20 {
				return fmt.Errorf("%d writes so far", w.acked())
			}
			return nil
		})
		// Nothing of the old primary runs: what it wrote but its replicas
		// did not receive is lost with it, so no subscriber may have it
		// (synchronized_standby_slots).
		thaw := freezePod(t, ns, primary)
		frozen := time.Now()
		testenv.Eventually(t, 2*time.Minute, "writes on another primary", func() error {
			if p := getDB(t, ns).Status.CurrentPrimary; p == primary || !w.ackedAfter(frozen) {
				return fmt.Errorf("primary %s, acknowledged since the freeze: %t", p, w.ackedAfter(frozen))
			}
			return nil
		})
		thaw() // it finds itself deposed, and follows the new primary
		acked := w.stop()
		t.Logf("WRITE GAP across the freeze of %s: %s", primary, w.gapAcross(frozen).Round(10*time.Millisecond))
		waitReady(t, ns, 3, 5*time.Minute)
		unknown := w.unacknowledged()
		n := count(t, uri)
		if n < rows+acked || n > rows+acked+unknown {
			t.Fatalf("%d rows, want %d to %d: %d acknowledged writes, %d failed", n, rows+acked, rows+acked+unknown, acked, unknown)
		}
		rows = n
		sameItems(t, 2*time.Minute)
		slotSynced(t, primary)
	})

	step("the subscription declared absent is dropped with its slot, on the publisher's replicas too", func(t *testing.T) {
		current := &databasev1alpha1.MyDatabase{}
		if err := env.c.Get(ctx, client.ObjectKeyFromObject(sub), current); err != nil {
			t.Fatal(err)
		}
		current.Spec.Databases[0].Subscriptions[0].Ensure = databasev1alpha1.EnsureAbsent
		if err := env.c.Update(ctx, current); err != nil {
			t.Fatal(err)
		}
		for _, p := range podsOf(t, ns) {
			testenv.Eventually(t, time.Minute, "no slot items_sub on "+p.Name, func() error {
				out, err := superuserSQL(ns, p.Name, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'items_sub'")
				if err != nil || out != "0" {
					return fmt.Errorf("%q %v", out, err)
				}
				return nil
			})
		}
		if err := env.c.Delete(ctx, current); err != nil {
			t.Fatal(err)
		}
		// Gone with its claims before the last step counts the volumes.
		testenv.Eventually(t, 2*time.Minute, "the subscriber gone with its claims", func() error {
			var claims corev1.PersistentVolumeClaimList
			if err := env.c.List(ctx, &claims, client.InNamespace(ns), client.MatchingLabels{databasev1alpha1.LabelInstance: sub.Name}); err != nil {
				return err
			}
			err := env.c.Get(ctx, client.ObjectKeyFromObject(sub), &databasev1alpha1.MyDatabase{})
			if !apierrors.IsNotFound(err) || len(claims.Items) > 0 {
				return fmt.Errorf("MyDatabase: %v; %d claims", err, len(claims.Items))
			}
			return nil
		})
	})

	step("the API server paused for 30 s under writes: the primary keeps taking them, no election", func(t *testing.T) {
		primary := getDB(t, ns).Status.CurrentPrimary
		before := podIdentities(t, ns)
		timeline := walTimeline(t, ns, primary)
		w := startWriter(ctx, uri)
		testenv.Eventually(t, 30*time.Second, "the writer's first writes", func() error {
			if w.acked() < 20 {
				return fmt.Errorf("%d writes so far", w.acked())
			}
			return nil
		})
		// SIGSTOP, as a hung control plane: connections open, no answer.
		// The instance managers cannot renew the Lease or report; the
		// primary holds on its members' failsafe promises.
		if out, err := exec.CommandContext(ctx, env.node, "pause", "kube-apiserver", "30").CombinedOutput(); err != nil {
			t.Fatalf("pausing the API server: %v\n%s", err, out)
		}
		resumed := time.Now()
		t.Logf("the API server paused from %s to %s", resumed.Add(-30*time.Second).UTC().Format("15:04:05.000"), resumed.UTC().Format("15:04:05.000"))
		testenv.Eventually(t, 30*time.Second, "writes after the API server resumed", func() error {
			if !w.ackedAfter(resumed) {
				return fmt.Errorf("no write acknowledged since the API server resumed")
			}
			return nil
		})
		acked, failed, unknown := w.stop(), w.failures(), w.unacknowledged()
		gap, ended := w.longestGapEnded()
		t.Logf("WRITE GAP while the API server was paused for 30 s: %s (ended %s); %d writes acknowledged, %d failed",
			gap.Round(10*time.Millisecond), ended.UTC().Format("15:04:05.000"), acked, failed)
		writeResult(t, "write-gap-api-server-paused-30s", gap)
		if failed > 0 || gap > time.Second {
			t.Errorf("%d writes failed %v, longest gap %s: want none failed and no gap beyond 1 s", failed, w.errs, gap)
		}
		waitReady(t, ns, 3, 2*time.Minute)
		stillPrimary(t, ns, primary, timeline)
		if after := podIdentities(t, ns); !maps.Equal(after, before) {
			t.Errorf("pods and their restarts changed: %v, were %v", after, before)
		}
		n := count(t, uri)
		if n < rows+acked || n > rows+acked+unknown {
			t.Fatalf("%d rows, want %d to %d: %d acknowledged writes, %d unacknowledged", n, rows+acked, rows+acked+unknown, acked, unknown)
		}
		rows = n
	})

	step("the primary cut off from the API server and from one replica: the other, promised and more advanced, wins; none acknowledged is lost", func(t *testing.T) {
		// Issue 58's fault (a): b still streams from the primary and is
		// promised to it; a receives nothing more and cannot answer it.
		// The primary cannot hold on every member's promise, so it fences
		// and a failover follows: b, which holds every acknowledged write,
		// must win it although promised.
		primary := getDB(t, ns).Status.CurrentPrimary
		a, b := othersThan(t, ns, primary)
		w := startWriter(ctx, uri)
		w.waitAcked(t, 20)
		logged := len(podLogs(t, ns, primary))
		undoLink := cutFromPod(t, ns, a, primary)
		undoAPI := cutFromAPIServer(t, ns, primary)
		testenv.Eventually(t, 2*time.Minute, "another primary", func() error {
			if p := getDB(t, ns).Status.CurrentPrimary; p == primary {
				return fmt.Errorf("primary %s", p)
			}
			return nil
		})
		moved := time.Now()
		testenv.Eventually(t, time.Minute, "writes on the new primary", func() error {
			if !w.ackedAfter(moved) {
				return errors.New("no write acknowledged since the primary moved")
			}
			return nil
		})
		if now := getDB(t, ns).Status.CurrentPrimary; now != b {
			t.Errorf("%s was elected, not %s, which held every acknowledged write", now, b)
		}
		// b's promise counted in the primary's failed rounds: the fault
		// tested a promised member.
		if log := podLogs(t, ns, primary); len(log) < logged || !strings.Contains(log[logged:], "failsafe: 1 of [") {
			t.Errorf("%s's log since the cut has no round that counted %s's promise (\"failsafe: 1 of [\"): the fault did not test a promised member", primary, b)
		}
		undoAPI()
		undoLink()
		acked, unknown := w.stop(), w.unacknowledged()
		gap, ended := w.longestGapEnded()
		t.Logf("WRITE GAP while %s was cut off from the API server and %s, and %s took over: %s (ended %s); %d writes acknowledged",
			primary, a, b, gap.Round(10*time.Millisecond), ended.Format("15:04:05.000"), acked)
		waitReady(t, ns, 3, 5*time.Minute)
		n := count(t, uri)
		if n < rows+acked || n > rows+acked+unknown {
			t.Fatalf("%d rows, want %d to %d: %d acknowledged writes, %d unacknowledged", n, rows+acked, rows+acked+unknown, acked, unknown)
		}
		rows = n
	})

	step("a replica restarted while the primary is cut off from the API server, with a required quorum of one: one promise is enough, no failover", func(t *testing.T) {
		// Issue 58's fault (d): with a required quorum of 1 of 2
		// replicas, no election can succeed while one replica is
		// promised, so the primary holds on the other's promise while
		// one restarts.
		patch(t, ns, func(db *databasev1alpha1.MyDatabase) {
			db.Spec.Replication.Synchronous = &databasev1alpha1.SynchronousReplication{Number: 1, Durability: databasev1alpha1.DurabilityRequired}
		})
		waitQuorum(t, ns, contract.Quorum{Instances: 3, Synchronous: 1, Required: true})
		waitReady(t, ns, 3, 2*time.Minute)
		primary := getDB(t, ns).Status.CurrentPrimary
		replica, _ := othersThan(t, ns, primary)
		timeline := walTimeline(t, ns, primary)
		w := startWriter(ctx, uri)
		w.waitAcked(t, 20)
		undoAPI := cutFromAPIServer(t, ns, primary)
		if err := env.c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: replica}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Second) // five Leases: the replica's pod is recreated and its server back meanwhile
		undoAPI()
		acked, failed, unknown, gap := w.stop(), w.failures(), w.unacknowledged(), w.longestGap()
		t.Logf("WRITE GAP while %s restarted and %s was cut off from the API server: %s; %d writes acknowledged, %d failed",
			replica, primary, gap.Round(10*time.Millisecond), acked, failed)
		if failed > 0 || gap > 2*time.Second {
			t.Errorf("%d writes failed, longest gap %s: want none failed and no gap beyond 2 s", failed, gap)
		}
		waitReady(t, ns, 3, 3*time.Minute)
		stillPrimary(t, ns, primary, timeline)
		n := count(t, uri)
		if n < rows+acked || n > rows+acked+unknown {
			t.Fatalf("%d rows, want %d to %d: %d acknowledged writes, %d unacknowledged", n, rows+acked, rows+acked+unknown, acked, unknown)
		}
		rows = n
		// Asynchronous again, for the steps that follow (a failed step
		// ends the test).
		patch(t, ns, func(db *databasev1alpha1.MyDatabase) { db.Spec.Replication.Synchronous = nil })
		waitQuorum(t, ns, contract.Quorum{Instances: 3})
	})

	step("a replica down while 1 GiB of WAL is written catches up through its slot, without a clone", func(t *testing.T) {
		primary := getDB(t, ns).Status.CurrentPrimary
		var replica string
		for _, p := range podsOf(t, ns) {
			if p.Name != primary {
				replica = p.Name
				break
			}
		}
		// The node cordoned, the replica's pod, deleted, stays Pending
		// until the WAL is written.
		cordon(t, true)
		t.Cleanup(func() { cordon(t, false) })
		if err := env.c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: replica}}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, time.Minute, replica+" gone", func() error {
			for _, p := range podsOf(t, ns) {
				if p.Name == replica && p.Spec.NodeName != "" {
					return fmt.Errorf("%s still runs on %s", replica, p.Spec.NodeName)
				}
			}
			return nil
		})
		start := superuser(t, ns, primary, "SELECT pg_current_wal_lsn()")
		// 1 GiB: logical messages (WAL with no table behind it) in 64 MB
		// statements, and rows among them.
		conn := connect(t, uri)
		for range 16 {
			superuser(t, ns, primary, "SELECT count(pg_logical_emit_message(false, 'filler', repeat('x', 1048576))) FROM generate_series(1, 64)")
			if _, err := conn.Exec(ctx, "INSERT INTO items (note) VALUES ('written while a replica was down')"); err != nil {
				t.Fatal(err)
			}
			rows++
		}
		superuser(t, ns, primary, "CHECKPOINT")
		end := superuser(t, ns, primary, "SELECT pg_current_wal_lsn()")
		if written := superuser(t, ns, primary, fmt.Sprintf("SELECT pg_wal_lsn_diff('%s', '%s') >= 1024*1024*1024", end, start)); written != "t" {
			t.Fatalf("the WAL from %s to %s is less than 1 GiB", start, end)
		}
		cordon(t, false)
		waitReady(t, ns, 3, 5*time.Minute)
		testenv.Eventually(t, 3*time.Minute, replica+" replayed the WAL written while it was down", func() error {
			out, err := superuserSQL(ns, replica, fmt.Sprintf("SELECT pg_last_wal_replay_lsn() >= '%s'", end))
			if err != nil || out != "t" {
				return fmt.Errorf("replayed past %s: %q (%v)", end, out, err)
			}
			return nil
		})
		if log := podLogs(t, ns, replica); strings.Contains(log, "cloning the primary") {
			t.Errorf("%s cloned the primary again instead of streaming through its slot:\n%s", replica, log)
		}
		if got, err := podExec(ns, replica, "psql", "--no-psqlrc", "--tuples-only", "--no-align", "--username", "postgres",
			"--dbname", "app", "--command", "SELECT count(*) FROM items"); err != nil || got != fmt.Sprint(rows) {
			t.Errorf("%s has %s rows (%v), the primary %d", replica, got, err, rows)
		}
	})

	step("spec.walStorage added under writes: every server rolls once, lowest ordinal first, the primary by switchover, its WAL moved to its own claim, none lost", func(t *testing.T) {
		before := podUIDs(t, ns)
		w := startWriter(ctx, uri)
		db.Spec.WALStorage = &databasev1alpha1.StorageSpec{Size: resource.MustParse("2Gi")} // for the re-create below
		patch(t, ns, func(d *databasev1alpha1.MyDatabase) { d.Spec.WALStorage = db.Spec.WALStorage.DeepCopy() })
		waitRolled(t, ns, before, 6*time.Minute)
		// Two switchovers when the primary is not the highest ordinal.
		rows = rolledUnderWrites(t, ns, uri, w, rows, "", "the move of the WAL to its own volumes", "write-gap-wal-volume-added")
		for _, p := range podsOf(t, ns) {
			if !slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool {
				return v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "wal-"+p.Name
			}) {
				t.Errorf("pod %s does not mount claim wal-%s", p.Name, p.Name)
			}
			if got, err := podExec(ns, p.Name, "readlink", specs.PGDATA+"/pg_wal"); err != nil || got != specs.WALDir {
				t.Errorf("pg_wal on %s links to %q (%v), want %s", p.Name, got, err, specs.WALDir)
			}
			// The WAL volume is a file system of its own, where the server writes.
			if got, err := podExec(ns, p.Name, "df", "--output=target", specs.WALDir+"/"); err != nil || !strings.HasSuffix(got, specs.WALMountPath) {
				t.Errorf("df of %s on %s: %q (%v), want the mount %s", specs.WALDir, p.Name, got, err, specs.WALMountPath)
			}
			if log := podLogs(t, ns, p.Name); !strings.Contains(log, "moved pg_wal to the WAL volume") {
				t.Errorf("%s did not log the move of its WAL:\n%s", p.Name, log)
			}
		}
		if s := getDB(t, ns).Status.WALStorage; s == nil || s.Size == nil || s.Size.String() != "2Gi" {
			t.Errorf("status.walStorage %+v, want a size of 2Gi", s)
		}
	})

	step("hibernate with the primary at ordinal 2: it moves to 0, every server stops, the claims stay; resumed, the same primary, rows and password", func(t *testing.T) {
		if getDB(t, ns).Status.CurrentPrimary != dbName+"-2" {
			patch(t, ns, func(db *databasev1alpha1.MyDatabase) {
				db.Spec.Switchover = &databasev1alpha1.SwitchoverSpec{To: dbName + "-2", RequestedAt: metav1.Now()}
			})
			testenv.Eventually(t, 2*time.Minute, dbName+"-2 the primary", func() error {
				if db := getDB(t, ns); db.Status.CurrentPrimary != dbName+"-2" || db.Status.TargetPrimary != "" {
					return fmt.Errorf("primary %s, target %q", db.Status.CurrentPrimary, db.Status.TargetPrimary)
				}
				return nil
			})
		}
		// The rw Service follows the new primary's role label.
		testenv.Eventually(t, time.Minute, "the rw Service on the primary", func() error {
			conn, err := dial(ctx, uri)
			if err != nil {
				return err
			}
			defer func() { _ = conn.Close(ctx) }()
			var standby bool
			if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&standby); err != nil || standby {
				return fmt.Errorf("in recovery %t (%v)", standby, err)
			}
			return nil
		})
		conn := connect(t, uri)
		if _, err := conn.Exec(ctx, "INSERT INTO items (note) VALUES ('the last write before the hibernation')"); err != nil {
			t.Fatal(err)
		}
		rows++
		_ = conn.Close(ctx)

		out, err := kubectlMydb(t, "hibernate", dbName, "-n", ns, "--wait=4m")
		if want := "Hibernated: no server of pg runs; pg-0 resumes as the primary."; err != nil || !strings.Contains(out, want) {
			t.Fatalf("kubectl mydb hibernate: %v, output lacks %q", err, want)
		}
		testenv.Eventually(t, time.Minute, "Hibernated with no pod", func() error {
			db := getDB(t, ns)
			if db.Status.Phase != databasev1alpha1.PhaseHibernated || db.Status.ObservedGeneration != db.Generation ||
				!meta.IsStatusConditionTrue(db.Status.Conditions, databasev1alpha1.ConditionHibernated) {
				return fmt.Errorf("phase %s, hibernation %+v", db.Status.Phase, db.Status.Hibernation)
			}
			if pods := podsOf(t, ns); len(pods) > 0 {
				return fmt.Errorf("%d pods left", len(pods))
			}
			return nil
		})
		db := getDB(t, ns)
		if sw := db.Status.Switchover; sw == nil || sw.Reason != databasev1alpha1.SwitchoverHibernation ||
			sw.Phase != databasev1alpha1.SwitchoverSucceeded || sw.To != dbName+"-0" {
			t.Errorf("switchover %+v, want the hibernation's to %s-0", sw, dbName)
		}
		if h := db.Status.Hibernation; h.Primary != dbName+"-0" {
			t.Errorf("hibernation %+v, want %s-0 the primary", h, dbName)
		}
		var pvcs corev1.PersistentVolumeClaimList
		if err := env.c.List(ctx, &pvcs, client.InNamespace(ns)); err != nil || len(pvcs.Items) != 6 {
			t.Fatalf("%d claims while hibernated (%v), want 6 (data and WAL of 3 servers)", len(pvcs.Items), err)
		}

		if out, err := kubectlMydb(t, "hibernate", dbName, "--off", "-n", ns, "--wait=5m"); err != nil || !strings.Contains(out, "Resumed: pg is Ready.") {
			t.Fatalf("kubectl mydb hibernate --off: %v, output lacks its success line", err)
		}
		waitReady(t, ns, 3, time.Minute)
		if db := getDB(t, ns); db.Status.CurrentPrimary != dbName+"-0" {
			t.Errorf("resumed with %s the primary, want %s-0, the primary when the servers stopped", db.Status.CurrentPrimary, dbName)
		}
		newURI, newPassword := credentials(t, ns)
		if newPassword != password {
			t.Fatal("the password changed across the hibernation")
		}
		if n := count(t, newURI); n != rows {
			t.Fatalf("%d rows after the resume, want %d", n, rows)
		}
	})

	step("delete under Retain keeps the volumes and the Secret; re-create brings the rows and the password back", func(t *testing.T) {
		deleteAndWait(t, ns)
		var pvcs corev1.PersistentVolumeClaimList
		if err := env.c.List(ctx, &pvcs, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		if len(pvcs.Items) != 6 {
			t.Fatalf("%d claims after delete under Retain, want 6 (data and WAL of 3 servers)", len(pvcs.Items))
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
		if len(dirs) != 6 {
			t.Fatalf("found %d local volumes of %s, want 6 (data and WAL of 3 servers)", len(dirs), ns)
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

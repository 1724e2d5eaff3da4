//go:build real

package real

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
	"github.com/jackc/pgx/v5"
)

func newNamespace(t *testing.T, name string, labels map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if err := env.c.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpNamespace(t, name)
		}
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
	waitReadyOf(t, ns, dbName, replicas, timeout)
}

// waitReadyOf waits for the MyDatabase name to be Ready with replicas
// servers.
func waitReadyOf(t *testing.T, ns, name string, replicas int32, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, fmt.Sprintf("MyDatabase %s Ready with %d servers", name, replicas), func() error {
		db := &databasev1alpha1.MyDatabase{}
		if err := env.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, db); err != nil {
			return err
		}
		st := db.Status
		if st.ObservedGeneration != db.Generation || !meta.IsStatusConditionTrue(st.Conditions, databasev1alpha1.ConditionReady) ||
			st.ReadyReplicas != replicas || st.Replicas != replicas {
			return fmt.Errorf("generation %d, observed %d, phase %s, ready %s", db.Generation, st.ObservedGeneration, st.Phase, st.Ready)
		}
		if pods := podsNamed(t, ns, name); len(pods) != int(replicas) {
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

// rolledUnderWrites stops the writer of a roll of every pod and checks
// that every acknowledged write is there (a failed one may be too) and
// that the primary moved by a rolling-update switchover, the last one from
// primary unless that is ""; it reports the longest write gap and returns
// the rows now.
func rolledUnderWrites(t *testing.T, ns, uri string, w *writer, rows int, primary, what, result string) int {
	t.Helper()
	acked, failed := w.stop(), w.unacknowledged()
	n := count(t, uri)
	if n < rows+acked || n > rows+acked+failed {
		t.Fatalf("%d rows after the roll, want %d to %d: %d writes acknowledged during it, %d failed", n, rows+acked, rows+acked+failed, acked, failed)
	}
	db := getDB(t, ns)
	if sw := db.Status.Switchover; sw == nil || sw.Reason != databasev1alpha1.SwitchoverRollingUpdate ||
		sw.Phase != databasev1alpha1.SwitchoverSucceeded || (primary != "" && sw.From != primary) || db.Status.CurrentPrimary != sw.To {
		t.Fatalf("after the roll: primary %s, switchover %+v; want a rolling-update switchover (from %q)", db.Status.CurrentPrimary, sw, primary)
	}
	gap := w.longestGap()
	t.Logf("WRITE GAP during %s (the last switchover %s -> %s): %s; %d writes acknowledged, %d failed",
		what, db.Status.Switchover.From, db.Status.CurrentPrimary, gap.Round(10*time.Millisecond), acked, failed)
	writeResult(t, result, gap)
	return n
}

func podsOf(t *testing.T, ns string) []corev1.Pod {
	t.Helper()
	return podsNamed(t, ns, dbName)
}

// podsNamed are the pods of the MyDatabase name.
func podsNamed(t *testing.T, ns, name string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := env.c.List(t.Context(), &pods, client.InNamespace(ns),
		client.MatchingLabels{databasev1alpha1.LabelInstance: name}); err != nil {
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
	return credentialsOf(t, getDB(t, ns))
}

// credentialsOf is credentials of the MyDatabase db.
func credentialsOf(t *testing.T, db *databasev1alpha1.MyDatabase) (uri, password string) {
	t.Helper()
	var s corev1.Secret
	ns, name := db.Namespace, specs.CredentialsSecretName(db)
	if err := env.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Data["uri"]) == 0 || len(s.Data["password"]) == 0 || len(s.Data[specs.CACertKey]) == 0 {
		t.Fatalf("Secret %s has no uri, password or %s", name, specs.CACertKey)
	}
	// The uri asks for sslmode=verify-full: the client verifies the server
	// with the Secret's ca.crt only, as an application would.
	ca := filepath.Join(env.work, ns+"-"+db.Name+"-"+specs.CACertKey)
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

// superuser is superuserSQL's output; an error ends the test.
func superuser(t *testing.T, ns, pod, query string) string {
	t.Helper()
	out, err := superuserSQL(ns, pod, query)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// walTimeline is the timeline the primary on pod writes on, as the first
// part of a WAL file name.
func walTimeline(t *testing.T, ns, pod string) string {
	t.Helper()
	return superuser(t, ns, pod, "SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)")
}

// podIdentities maps each database pod to its UID and its container's
// restarts: equal maps mean no pod was replaced or restarted.
func podIdentities(t *testing.T, ns string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range podsOf(t, ns) {
		restarts := int32(-1)
		for _, c := range p.Status.ContainerStatuses {
			if c.Name == specs.ContainerName {
				restarts = c.RestartCount
			}
		}
		out[p.Name] = fmt.Sprintf("%s restarted %d times", p.UID, restarts)
	}
	return out
}

// cordon marks the node (un)schedulable.
func cordon(t *testing.T, unschedulable bool) {
	t.Helper()
	var nodes corev1.NodeList
	if err := env.c.List(context.Background(), &nodes); err != nil {
		t.Fatal(err)
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		orig := n.DeepCopy()
		n.Spec.Unschedulable = unschedulable
		if err := env.c.Patch(context.Background(), n, client.MergeFrom(orig)); err != nil {
			t.Fatal(err)
		}
	}
}

// psqlPod runs psql in a pod of the namespace, with the URI from the
// connection Secret (never seen by the test), and returns its output.
func psqlPod(t *testing.T, ns, name, query string) string {
	t.Helper()
	secret := specs.CredentialsSecretName(getDB(t, ns))
	return psqlPodWith(t, ns, name, corev1.EnvVar{Name: "DATABASE_URI", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "uri"},
	}}, query)
}

// psqlPodWith is psqlPod with the URI uri (a variable named DATABASE_URI)
// gives, verified with the connection Secret's CA.
func psqlPodWith(t *testing.T, ns, name string, uri corev1.EnvVar, query string) string {
	t.Helper()
	secret := specs.CredentialsSecretName(getDB(t, ns))
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

// dumpNamespace logs what a failed test leaves in ns, to read the failure
// by; the pods' whole logs go to files in bin/real/pods.
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
			// The whole log goes to a file (the node and its logs are gone
			// once the suite ends), its tail to the test's output.
			for _, previous := range []bool{true, false} {
				b, err := env.cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Previous: previous}).DoRaw(ctx)
				if err != nil {
					continue
				}
				path := filepath.Join(env.work, "pods", fmt.Sprintf("%s_%s_previous-%v.log", ns, p.Name, previous))
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
					_ = os.WriteFile(path, b, 0o644)
				}
				t.Logf("pod %s log (previous container: %v; whole in %s), its end:\n%s", p.Name, previous, path, testenv.LastLines(string(b), 20))
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
// connection (startWriter), or through a pooler on kept connections
// (startClients), and records when each insert was acknowledged.
type writer struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	ok     []time.Time
	failed []time.Time
	// cut counts the writes that stop interrupted: like a failed one, such
	// a write may have committed without the writer hearing of it.
	cut int
	// slowest is the longest a write took, from its start to its
	// acknowledgement (startClients), and errs the first errors.
	slowest time.Duration
	errs    []string
}

// startClients starts n clients that keep their connection, as an
// application's pool does, and write one row per transaction through uri,
// each given 30 s: the clients of a pooler, which holds their
// transactions while it pauses. A failed write costs its connection.
func startClients(ctx context.Context, uri string, n int) *writer {
	ctx, cancel := context.WithCancel(ctx)
	w := &writer{cancel: cancel, done: make(chan struct{})}
	lookup := serviceLookup()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			var conn *pgx.Conn
			defer func() {
				if conn != nil {
					_ = conn.Close(context.Background())
				}
			}()
			for ctx.Err() == nil {
				began := time.Now()
				err := func() (err error) {
					actx, acancel := context.WithTimeout(ctx, 30*time.Second)
					defer acancel()
					if conn == nil {
						if conn, err = dialWith(actx, uri, lookup); err != nil {
							return err
						}
					}
					if _, err = conn.Exec(actx, "INSERT INTO items (note) VALUES ('through the pooler while the primary changes')"); err != nil {
						_ = conn.Close(context.Background())
						conn = nil
					}
					return err
				}()
				w.record(ctx, err, began)
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	go func() { wg.Wait(); close(w.done) }()
	return w
}

func startWriter(ctx context.Context, uri string) *writer {
	ctx, cancel := context.WithCancel(ctx)
	w := &writer{cancel: cancel, done: make(chan struct{})}
	lookup := serviceLookup()
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			err := func() error {
				actx, acancel := context.WithTimeout(ctx, 2*time.Second)
				defer acancel()
				conn, err := dialWith(actx, uri, lookup)
				if err != nil {
					return fmt.Errorf("connecting: %w", err)
				}
				defer func() { _ = conn.Close(context.Background()) }()
				if _, err = conn.Exec(actx, "INSERT INTO items (note) VALUES ('written while the primary changes')"); err != nil {
					return fmt.Errorf("inserting: %w", err)
				}
				return nil
			}()
			w.record(ctx, err, time.Time{})
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return w
}

// record counts a write that began at began (zero: not timed) and ended
// with err: acknowledged, failed (its error kept among the first five,
// with the time), or cut short by the writer's stop.
func (w *writer) record(ctx context.Context, err error, began time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case err == nil:
		w.ok = append(w.ok, time.Now())
		if !began.IsZero() {
			w.slowest = max(w.slowest, time.Since(began))
		}
	case ctx.Err() == nil:
		w.failed = append(w.failed, time.Now())
		if len(w.errs) < 5 {
			w.errs = append(w.errs, time.Now().UTC().Format("15:04:05.000 ")+err.Error())
		}
	default:
		w.cut++
	}
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

// ackedAfter tells whether a write was acknowledged after at.
func (w *writer) ackedAfter(at time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ok) > 0 && w.ok[len(w.ok)-1].After(at)
}

// longestGap is the longest time between two acknowledged writes.
func (w *writer) longestGap() time.Duration {
	gap, _ := w.longestGapEnded()
	return gap
}

// gapAcross is the time between the last acknowledged write before at
// and the first after it; 0 when there is no write on either side.
func (w *writer) gapAcross(at time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	i, _ := slices.BinarySearchFunc(w.ok, at, time.Time.Compare)
	if i == 0 || i == len(w.ok) {
		return 0
	}
	return w.ok[i].Sub(w.ok[i-1])
}

// longestGapEnded is longestGap and the acknowledgement that ended it.
func (w *writer) longestGapEnded() (time.Duration, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var longest time.Duration
	var ended time.Time
	for i := 1; i < len(w.ok); i++ {
		if gap := w.ok[i].Sub(w.ok[i-1]); gap > longest {
			longest, ended = gap, w.ok[i]
		}
	}
	return longest, ended
}

// unacknowledged is the number of writes that may or may not have
// committed: those that failed, and the one stop interrupted, if any.
func (w *writer) unacknowledged() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.failed) + w.cut
}

// failures is the number of writes that failed while the writer ran.
func (w *writer) failures() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.failed)
}

// stop ends the writer and returns how many writes were acknowledged.

func (w *writer) stop() int {
	w.cancel()
	<-w.done
	return w.acked()
}

// freezePod stops every process of the pod at once through its cgroup
// (the cgroup v1 freezer the kubelet's cgroupfs driver leaves to us), as
// a hung node does: connections stay open and nothing answers, nothing
// is flushed or shut down. thaw lets them run again; the test's end
// thaws too, so that a failed step leaves no frozen pod behind.
func freezePod(t *testing.T, ns, name string) (thaw func()) {
	t.Helper()
	state := filepath.Join(podFreezer(t, ns, name), "freezer.state")
	set := func(v string) error { return os.WriteFile(state, []byte(v), 0o644) }
	if err := set("FROZEN"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, name+" frozen", func() error {
		b, err := os.ReadFile(state)
		if err != nil || strings.TrimSpace(string(b)) != "FROZEN" {
			return fmt.Errorf("freezer.state %q %v", b, err)
		}
		return nil
	})
	thawed := false
	thaw = func() {
		if !thawed {
			thawed = true
			if err := set("THAWED"); err != nil {
				t.Errorf("thawing %s: %v", name, err)
			}
		}
	}
	t.Cleanup(thaw)
	return thaw
}

// podFreezer is the pod's freezer cgroup directory, which holds a
// directory per container (the sandbox's included).
func podFreezer(t *testing.T, ns, name string) string {
	t.Helper()
	var pod corev1.Pod
	if err := env.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &pod); err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, pattern := range []string{"/sys/fs/cgroup/freezer/kubepods/pod%s", "/sys/fs/cgroup/freezer/kubepods/*/pod%s"} {
		found, _ := filepath.Glob(fmt.Sprintf(pattern, pod.UID))
		dirs = append(dirs, found...)
	}
	if len(dirs) != 1 {
		t.Fatalf("the freezer cgroup of pod %s (uid %s): found %v", name, pod.UID, dirs)
	}
	return dirs[0]
}

// dropInPod adds iptables rules (each the arguments after the chain, the
// target DROP appended) to the filter table of the pod's network
// namespace, as a cut link does: packets vanish, connections hang. undo
// deletes them; the test's end undoes too.
func dropInPod(t *testing.T, ns, name string, rules map[string][][]string) (undo func()) {
	t.Helper()
	freezer := podFreezer(t, ns, name)
	// The namespace is found again for every command, by a process that
	// runs then: the processes of a container come and go (a server
	// restarted by a failover), the namespace is the pod's.
	iptables := func(op, chain string, rule []string) error {
		var err error
		var out []byte
		for range 3 {
			netns := podNetns(freezer)
			if netns == "" {
				return fmt.Errorf("no process of pod %s to find its network namespace by", name)
			}
			argv := append([]string{"--net=" + netns, "iptables", "-w", op, chain}, rule...)
			if out, err = exec.Command("nsenter", append(argv, "-j", "DROP")...).CombinedOutput(); err == nil {
				return nil
			}
			if !strings.Contains(string(out), "No such file") {
				break // not a process gone between the lookup and nsenter
			}
		}
		return fmt.Errorf("iptables %s %s %v in pod %s: %v: %s", op, chain, rule, name, err, out)
	}
	for chain, list := range rules {
		for _, rule := range list {
			if err := iptables("-A", chain, rule); err != nil {
				t.Fatal(err)
			}
		}
	}
	done := false
	undo = func() {
		if done {
			return
		}
		done = true
		for chain, list := range rules {
			for _, rule := range list {
				if err := iptables("-D", chain, rule); err != nil {
					t.Error(err)
				}
			}
		}
	}
	t.Cleanup(undo)
	return undo
}

// podNetns is the network namespace of a process of the pod whose
// freezer cgroup is freezer, "" when it has none now.
func podNetns(freezer string) string {
	procs, _ := filepath.Glob(filepath.Join(freezer, "*", "cgroup.procs"))
	for _, path := range procs {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for _, pid := range strings.Fields(string(b)) {
			if netns := "/proc/" + pid + "/ns/net"; fileExists(netns) {
				return netns
			}
		}
	}
	return ""
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// cutFromAPIServer drops what the pod sends to the API server: through
// the kubernetes Service and to the address behind it.
func cutFromAPIServer(t *testing.T, ns, name string) (undo func()) {
	t.Helper()
	var svc corev1.Service
	if err := env.c.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: "kubernetes"}, &svc); err != nil {
		t.Fatal(err)
	}
	var eps discoveryv1.EndpointSliceList
	if err := env.c.List(t.Context(), &eps, client.InNamespace("default"),
		client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"}); err != nil {
		t.Fatal(err)
	}
	rules := [][]string{{"-p", "tcp", "-d", svc.Spec.ClusterIP, "--dport", fmt.Sprint(svc.Spec.Ports[0].Port)}}
	for _, s := range eps.Items {
		for _, e := range s.Endpoints {
			for _, port := range s.Ports {
				rules = append(rules, []string{"-p", "tcp", "-d", e.Addresses[0], "--dport", fmt.Sprint(*port.Port)})
			}
		}
	}
	return dropInPod(t, ns, name, map[string][][]string{"OUTPUT": rules})
}

// cutFromPod drops everything between the pod and the address of
// another.
func cutFromPod(t *testing.T, ns, name, other string) (undo func()) {
	t.Helper()
	var pod corev1.Pod
	if err := env.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: other}, &pod); err != nil {
		t.Fatal(err)
	}
	return dropInPod(t, ns, name, map[string][][]string{
		"INPUT": {{"-s", pod.Status.PodIP}}, "OUTPUT": {{"-d", pod.Status.PodIP}},
	})
}

// othersThan is the two pods of a three-instance MyDatabase other than
// the primary, by name.
func othersThan(t *testing.T, ns, primary string) (string, string) {
	t.Helper()
	var names []string
	for _, p := range podsOf(t, ns) {
		if p.Name != primary {
			names = append(names, p.Name)
		}
	}
	if len(names) != 2 {
		t.Fatalf("pods other than the primary %s: %v, want 2", primary, names)
	}
	slices.Sort(names)
	return names[0], names[1]
}

// waitQuorum waits until the primary Lease carries want, which the
// instance managers then apply.
func waitQuorum(t *testing.T, ns string, want contract.Quorum) {
	t.Helper()
	db := getDB(t, ns)
	testenv.Eventually(t, time.Minute, "the Lease's quorum "+want.String(), func() error {
		var lease coordinationv1.Lease
		if err := env.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: specs.LeaseName(db)}, &lease); err != nil {
			return err
		}
		if got, err := contract.ParseQuorum(lease.Annotations[contract.AnnotationQuorum]); err != nil || got != want {
			return fmt.Errorf("%v (%v)", got, err)
		}
		return nil
	})
}

// waitAcked waits for n acknowledged writes.
func (w *writer) waitAcked(t *testing.T, n int) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, "the writer's first writes", func() error {
		if got := w.acked(); got < n {
			return fmt.Errorf("%d writes so far", got)
		}
		return nil
	})
}

// stillPrimary checks that no failover happened: the same primary, on the
// same timeline.
func stillPrimary(t *testing.T, ns, primary, timeline string) {
	t.Helper()
	if got := getDB(t, ns).Status.CurrentPrimary; got != primary {
		t.Errorf("the primary moved from %s to %s", primary, got)
	}
	if got := walTimeline(t, ns, primary); got != timeline {
		t.Errorf("%s writes on timeline %s, was %s: a promotion happened", primary, got, timeline)
	}
}

package plugin

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) *metav1.Time { t := metav1.NewTime(now.Add(-d)); return &t }

func readyPod(name, role, node string) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{databasev1alpha1.LabelRole: role},
			CreationTimestamp: *ago(time.Hour)},
		Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

func TestWriteStatus(t *testing.T) {
	db := &databasev1alpha1.MyDatabase{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", Generation: 3},
		Spec:       databasev1alpha1.MyDatabaseSpec{Engine: "postgres", Version: "17", User: "app", DatabaseName: "app"},
		Status: databasev1alpha1.MyDatabaseStatus{
			ObservedGeneration: 3, Phase: databasev1alpha1.PhaseReady, Ready: "2/2",
			Endpoint: "orders-rw.shop.svc:5432", ReadEndpoint: "orders-ro.shop.svc:5432",
			CurrentPrimary: "orders-1", TargetPrimary: "orders-1", CurrentVersion: "17.2",
			CredentialsSecret: "orders-credentials",
			Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Available",
				Message: "2/2 servers ready", LastTransitionTime: *ago(5 * time.Minute)}},
			Instances: []databasev1alpha1.InstanceStatus{
				{Name: "orders-0", Role: "replica", Ready: true, Timeline: 2, LSN: "0/5000000", LagBytes: ptr.To[int64](256), ReportedAt: ago(3 * time.Second),
					Storage: &databasev1alpha1.InstanceStorage{CapacityBytes: 1 << 30, AvailableBytes: 768 << 20, WALBytes: 80 << 20}, Manager: "0123456789ab"},
				{Name: "orders-1", Role: "primary", Ready: true, Timeline: 2, LSN: "0/5000100", ReportedAt: ago(2 * time.Second),
					Storage: &databasev1alpha1.InstanceStorage{CapacityBytes: 4 << 30, AvailableBytes: 3 << 30, WALBytes: 128 << 20,
						WALCapacityBytes: 512 << 20, WALAvailableBytes: 384 << 20}},
			},
			Switchover: &databasev1alpha1.SwitchoverStatus{Reason: "Requested", From: "orders-0", To: "orders-1",
				Phase: databasev1alpha1.SwitchoverSucceeded, Message: "orders-1 is the primary",
				StartedAt: ago(2 * time.Minute), FinishedAt: ago(110 * time.Second)},
			Passwords: []databasev1alpha1.PasswordStatus{
				{Role: "app", Secret: "orders-credentials", LastRotationTime: ago(48 * time.Hour), Rotating: "the replicas to accept it"},
			},
			Roles: []databasev1alpha1.RoleStatus{{Name: "reader", Applied: true, PasswordSecret: "orders-role-reader"}},
			Databases: []databasev1alpha1.DatabaseStatus{{Name: "app", Applied: true,
				Extensions:    []databasev1alpha1.ItemStatus{{Name: "vector", Applied: true}},
				Publications:  []databasev1alpha1.ItemStatus{{Name: "orders_pub", Applied: true}},
				Subscriptions: []databasev1alpha1.ItemStatus{{Name: "stock_sub", Message: "its worker failed within the last minute"}}}},
		},
	}
	events := make([]corev1.Event, 0, 12)
	for i := range 12 {
		events = append(events, corev1.Event{Type: "Normal", Reason: "Step", Message: "step " + string(rune('a'+i)),
			LastTimestamp: *ago(time.Duration(12-i) * time.Minute)})
	}
	view := &statusView{DB: db, Events: events,
		Pods: []corev1.Pod{readyPod("orders-0", "replica", "node-a"), readyPod("orders-1", "primary", "node-b")},
		Poolers: []databasev1alpha1.MyDatabasePooler{
			{ObjectMeta: metav1.ObjectMeta{Name: "orders-pool"},
				Spec: databasev1alpha1.MyDatabasePoolerSpec{Database: "orders", Type: "rw", PoolMode: "transaction"},
				Status: databasev1alpha1.MyDatabasePoolerStatus{Instances: 2, ReadyInstances: 2, Endpoint: "orders-pool.shop.svc:5432",
					LastSwitchover: &databasev1alpha1.PoolerSwitchoverStatus{From: "orders-0", To: "orders-1", PausedPods: 2},
					Conditions:     []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Available"}}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "orders-ro"},
				Spec: databasev1alpha1.MyDatabasePoolerSpec{Database: "orders", Type: "ro", PoolMode: "session"},
				Status: databasev1alpha1.MyDatabasePoolerStatus{Instances: 1,
					Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "PodsNotReady", Message: "0 of 1 PgBouncer pods available"}}}},
		}}
	var out bytes.Buffer
	if err := writeStatus(&out, view, now); err != nil {
		t.Fatal(err)
	}
	want := `MyDatabase   shop/orders
Engine       postgres 17.2
Phase        Ready
Ready        2/2 servers (generation 3, observed 3)
Primary      orders-1
Read-write   orders-rw.shop.svc:5432
Read-only    orders-ro.shop.svc:5432
Credentials  Secret orders-credentials (user app, database app)

Conditions:
  TYPE   STATUS  REASON     AGE  MESSAGE
  Ready  True    Available  5m   2/2 servers ready

Instances (as their instance managers report them):
  NAME      ROLE     READY  TIMELINE  LSN        LAG (BYTES)  VOLUME USED    WAL                  MANAGER       REPORTED
  orders-0  replica  true   2         0/5000000  256          25% of 1024Mi  80Mi                 0123456789ab  3s ago
  orders-1  primary  true   2         0/5000100  -            25% of 4096Mi  128Mi, 25% of 512Mi  -             2s ago

Pods:
  NAME      ROLE LABEL  PHASE    READY  NODE    AGE
  orders-0  replica     Running  true   node-a  60m
  orders-1  primary     Running  true   node-b  60m

Switchover:
  Succeeded: orders-0 -> orders-1 (Requested, started 2m ago, finished 110s ago): orders-1 is the primary

Passwords:
  ROLE  SECRET              LAST ROTATION  ROTATING
  app   orders-credentials  2d ago         the replicas to accept it

Declared (spec.roles, spec.databases; as the primary applied them):
  KIND          NAME            APPLIED  MESSAGE
  role          reader          true     -
  database      app             true     -
  extension     app/vector      true     -
  publication   app/orders_pub  true     -
  subscription  app/stock_sub   false    its worker failed within the last minute

Poolers:
  NAME         TYPE  MODE         READY  ENDPOINT                   STATUS
  orders-pool  rw    transaction  2/2    orders-pool.shop.svc:5432  Available; 2/2 pods paused through the switchover to orders-1
  orders-ro    ro    session      0/1    -                          PodsNotReady: 0 of 1 PgBouncer pods available

Events (the last 10):
  AGE  TYPE    REASON  MESSAGE
  10m  Normal  Step    step c
  9m   Normal  Step    step d
  8m   Normal  Step    step e
  7m   Normal  Step    step f
  6m   Normal  Step    step g
  5m   Normal  Step    step h
  4m   Normal  Step    step i
  3m   Normal  Step    step j
  2m   Normal  Step    step k
  60s  Normal  Step    step l
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("status output (-want +got):\n%s", diff)
	}
}

// A new MyDatabase: nothing reported yet, and every empty field says so.
func TestWriteStatusEmpty(t *testing.T) {
	db := &databasev1alpha1.MyDatabase{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x", Generation: 1}}
	var out bytes.Buffer
	if err := writeStatus(&out, &statusView{DB: db}, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Phase        -\n", "Primary      -\n", "  none reported yet\n",
		"  none has reported: no instance manager runs yet", "Switchover:\n  none so far\n", "Events (the last 10):\n  none\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestTLSLine(t *testing.T) {
	st := &databasev1alpha1.TLSStatus{ServerCertSecret: "x-server-tls",
		NotAfter: &metav1.Time{Time: now.Add(90 * 24 * time.Hour)}, RenewAt: &metav1.Time{Time: now.Add(60 * 24 * time.Hour)}}
	got := tlsLine(databasev1alpha1.TLSClientsRequired, st, now)
	if want := "clients Required; certificate in Secret x-server-tls, expires in 90d, renewed by the operator in 60d"; got != want {
		t.Errorf("tlsLine = %q, want %q", got, want)
	}
}

func TestPrimaryLineDuringSwitchover(t *testing.T) {
	got := primaryLine(databasev1alpha1.MyDatabaseStatus{CurrentPrimary: "x-0", TargetPrimary: "x-2"})
	if want := "x-0 (switching over to x-2)"; got != want {
		t.Errorf("primaryLine = %q, want %q", got, want)
	}
}

func TestObjectYAMLRedactsSecrets(t *testing.T) {
	const password = "s3cr3t-Passw0rd-xyz"
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "x-credentials", Annotations: map[string]string{
			lastApplied:             `{"stringData":{"password":"` + password + `"}}`,
			"example.com/unrelated": "kept"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Data:       map[string][]byte{"password": []byte(password), "username": []byte("app")},
		StringData: map[string]string{"uri": "postgresql://app:" + password + "@x-rw:5432/app"},
	}
	out, err := ObjectYAML(secret, "Secret")
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	for _, leak := range []string{password, "YXBw" /* base64 of app */, base64(password)} {
		if strings.Contains(got, leak) {
			t.Errorf("the redacted Secret contains %q:\n%s", leak, got)
		}
	}
	for _, want := range []string{"password: " + Redacted, "username: " + Redacted, "uri: " + Redacted,
		lastApplied + ": " + Redacted, "example.com/unrelated: kept", "kind: Secret", "name: x-credentials"} {
		if !strings.Contains(got, want) {
			t.Errorf("the redacted Secret lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "managedFields") {
		t.Errorf("managedFields kept:\n%s", got)
	}
	if string(secret.Data["password"]) != password {
		t.Error("ObjectYAML changed the Secret it was given")
	}
}

func base64(s string) string {
	b, _ := json.Marshal([]byte(s)) // encoding/json writes []byte as base64
	return strings.Trim(string(b), `"`)
}

// Other kinds are written as they are (a ConfigMap's data is no secret).
func TestObjectYAMLKeepsOtherKinds(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x-config"}, Data: map[string]string{"postgresql.conf": "max_connections = 100"}}
	out, err := ObjectYAML(cm, "ConfigMap")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "max_connections = 100") {
		t.Errorf("ConfigMap data lost:\n%s", out)
	}
}

func TestTarBundle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report-ns-x.tar.gz")
	b, err := openBundle(path, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.add("objects/Pod/x-0.yaml", []byte("kind: Pod\n")); err != nil {
		t.Fatal(err)
	}
	if err := b.close(); err != nil {
		t.Fatal(err)
	}
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
	h, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(tr)
	if h.Name != "report-ns-x/objects/Pod/x-0.yaml" || string(data) != "kind: Pod\n" {
		t.Errorf("archive holds %q = %q", h.Name, data)
	}
	if _, err := openBundle(path, now); err == nil {
		t.Error("openBundle overwrote an existing archive")
	}
}

func TestSwitchoverPatch(t *testing.T) {
	patch, err := switchoverPatch("x-2", time.Date(2026, 11, 30, 12, 0, 0, 500, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"spec":{"switchover":{"to":"x-2","requestedAt":"2026-11-30T12:00:00Z"}}}`; string(patch) != want {
		t.Errorf("patch = %s, want %s", patch, want)
	}
	patch, _ = switchoverPatch("", now)
	if want := `{"spec":{"switchover":{"requestedAt":"2026-11-30T12:00:00Z"}}}`; string(patch) != want {
		t.Errorf("patch = %s, want %s", patch, want)
	}
}

func TestSwitchoverDone(t *testing.T) {
	at := metav1.NewTime(now)
	earlier := metav1.NewTime(now.Add(-time.Hour))
	cases := map[string]struct {
		sw   *databasev1alpha1.SwitchoverStatus
		want bool
	}{
		"none":              {nil, false},
		"an earlier one":    {&databasev1alpha1.SwitchoverStatus{RequestedAt: &earlier, Phase: "Succeeded"}, false},
		"this one, running": {&databasev1alpha1.SwitchoverStatus{RequestedAt: &at, Phase: "Running"}, false},
		"this one, done":    {&databasev1alpha1.SwitchoverStatus{RequestedAt: &at, Phase: "Succeeded"}, true},
		"this one, failed":  {&databasev1alpha1.SwitchoverStatus{RequestedAt: &at, Phase: "Failed"}, true},
	}
	for name, tc := range cases {
		if got := switchoverDone(tc.sw, now); got != tc.want {
			t.Errorf("%s: switchoverDone = %v, want %v", name, got, tc.want)
		}
	}
}

func TestRestartPatch(t *testing.T) {
	patch, err := restartPatch(now)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"spec":{"podAnnotations":{"kubectl.kubernetes.io/restartedAt":"2026-11-30T12:00:00Z"}}}`; string(patch) != want {
		t.Errorf("patch = %s, want %s", patch, want)
	}
}

// restart works only because spec.podAnnotations reaches the pod template,
// whose change is what starts the operator's rolling update.
func TestPodAnnotationsReachThePodTemplate(t *testing.T) {
	db := &databasev1alpha1.MyDatabase{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x"},
		Spec: databasev1alpha1.MyDatabaseSpec{PodAnnotations: map[string]string{RestartedAtAnnotation: "2026-11-30T12:00:00Z"}}}
	sts := specs.StatefulSet(db, specs.Platform{})
	if got := sts.Spec.Template.Annotations[RestartedAtAnnotation]; got != "2026-11-30T12:00:00Z" {
		t.Errorf("pod template annotation %s = %q", RestartedAtAnnotation, got)
	}
	// And psql forwards to the port the server container names postgres.
	var port int32
	for _, c := range sts.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if ptr.Deref(p.Name, "") == postgresPortName {
				port = ptr.Deref(p.ContainerPort, 0)
			}
		}
	}
	if port == 0 {
		t.Fatalf("no container port named %q in the server pod template", postgresPortName)
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Ports: []corev1.ContainerPort{{Name: postgresPortName, ContainerPort: port}}}}}}
	if got := PostgresPort(pod); got != port {
		t.Errorf("PostgresPort = %d, want %d", got, port)
	}
}

func TestSimulatedNode(t *testing.T) {
	kwok := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kwok-node-0",
		Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}, Labels: map[string]string{"type": "kwok"}}}
	real := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"kubernetes.io/os": "linux"}}}
	if !SimulatedNode(kwok) || SimulatedNode(real) {
		t.Errorf("SimulatedNode: kwok %v, real %v", SimulatedNode(kwok), SimulatedNode(real))
	}
}

func TestBytesOf(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1545000: "1.5 MiB", 3 << 30: "3.0 GiB"} {
		if got := bytesOf(n); got != want {
			t.Errorf("bytesOf(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestHibernateDone: --wait ends at the phase spec.hibernate asks for, at
// the generation of the patch, and says what a hibernation waits for.
func TestHibernateDone(t *testing.T) {
	db := &databasev1alpha1.MyDatabase{}
	db.Status.ObservedGeneration, db.Status.Phase = 4, databasev1alpha1.PhaseUpdating
	db.Status.Hibernation = &databasev1alpha1.HibernationStatus{Phase: databasev1alpha1.HibernationStopping, Message: "stopping the servers cleanly, db-0 last: 2 still running"}
	if done, state := hibernateDone(db, 5, true); done || !strings.Contains(state, "2 still running") {
		t.Errorf("stopping: done %t, %q", done, state)
	}
	db.Status.ObservedGeneration, db.Status.Phase = 5, databasev1alpha1.PhaseHibernated
	if done, _ := hibernateDone(db, 5, true); !done {
		t.Error("Hibernated at the generation: not done")
	}
	if done, _ := hibernateDone(db, 6, false); done {
		t.Error("resuming, still Hibernated: done")
	}
	db.Status.ObservedGeneration, db.Status.Phase = 6, databasev1alpha1.PhaseReady
	if done, _ := hibernateDone(db, 6, false); !done {
		t.Error("resumed and Ready: not done")
	}
}

func TestHibernationLine(t *testing.T) {
	at := metav1.NewTime(now.Add(-3 * time.Hour))
	age := func(t *metav1.Time) string { return now.Sub(t.Time).String() }
	for _, tc := range []struct {
		h    databasev1alpha1.HibernationStatus
		want string
	}{
		{databasev1alpha1.HibernationStatus{Phase: databasev1alpha1.HibernationHibernated, Primary: "db-0", HibernatedAt: &at},
			"no server runs (for 3h0m0s); db-0 resumes as the primary (kubectl mydb hibernate NAME --off)"},
		{databasev1alpha1.HibernationStatus{Phase: databasev1alpha1.HibernationStopping, Primary: "db-0", Message: "stopping the servers cleanly, db-0 last: 2 still running"},
			"Stopping: stopping the servers cleanly, db-0 last: 2 still running"},
	} {
		if got := hibernationLine(&tc.h, age); got != tc.want {
			t.Errorf("hibernationLine(%s) = %q, want %q", tc.h.Phase, got, tc.want)
		}
	}
}

func TestReplicaLine(t *testing.T) {
	at := metav1.NewTime(now.Add(-90 * time.Second))
	age := func(t *metav1.Time) string { return now.Sub(t.Time).String() }
	for _, tc := range []struct {
		r    databasev1alpha1.ReplicaStatus
		want string
	}{
		{databasev1alpha1.ReplicaStatus{Source: "backups/prod/shop", DesignatedPrimary: "shop-dr-0", LastFetchedWAL: "000000010000000000000004", LastReplayedTime: &at},
			"backups/prod/shop: no writes; from the archive, last WAL 000000010000000000000004; replayed the source's commits of 1m30s ago (designated primary shop-dr-0)"},
		{databasev1alpha1.ReplicaStatus{Source: "backups/prod/shop and shop-rw.prod.svc:5432", Streaming: true, LagBytes: new(int64(512)), DesignatedPrimary: "shop-dr-1"},
			"backups/prod/shop and shop-rw.prod.svc:5432: no writes; streaming, 512 bytes behind (designated primary shop-dr-1)"},
		{databasev1alpha1.ReplicaStatus{Source: "shop-rw.prod.svc:5432"}, "shop-rw.prod.svc:5432: no writes"},
	} {
		if got := replicaLine(&tc.r, age); got != tc.want {
			t.Errorf("replicaLine(%+v) = %q, want %q", tc.r, got, tc.want)
		}
	}
}

// TestPausePooler: pause and resume set spec.pgbouncer.paused, and say
// when the pods act on it; a pooler the operator does not reconcile is
// refused, since the change would never reach its pods.
func TestPausePooler(t *testing.T) {
	p := &databasev1alpha1.MyDatabasePooler{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-pool"},
		Spec: databasev1alpha1.MyDatabasePoolerSpec{Database: "orders"}}
	var out strings.Builder
	e := &Env{c: fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(p).Build(), namespace: "shop", Stdout: &out}
	get := func() *databasev1alpha1.MyDatabasePooler {
		got := &databasev1alpha1.MyDatabasePooler{}
		if err := e.c.Get(t.Context(), client.ObjectKeyFromObject(p), got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if err := e.pausePooler(t.Context(), "orders-pool", true); err != nil {
		t.Fatal(err)
	}
	if !get().Spec.PgBouncer.Paused || !strings.Contains(out.String(), `Pause of shop/orders-pool requested (spec.pgbouncer.paused true)`) {
		t.Errorf("after pause: paused %v, output %q", get().Spec.PgBouncer.Paused, out.String())
	}
	out.Reset()
	if err := e.pausePooler(t.Context(), "orders-pool", true); err != nil || !strings.Contains(out.String(), "already") {
		t.Errorf("pause again: %v, %q", err, out.String())
	}
	if err := e.pausePooler(t.Context(), "orders-pool", false); err != nil || get().Spec.PgBouncer.Paused {
		t.Errorf("resume: %v, paused %v", err, get().Spec.PgBouncer.Paused)
	}
	held := get()
	held.Spec.Paused = true
	if err := e.c.Update(t.Context(), held); err != nil {
		t.Fatal(err)
	}
	if err := e.pausePooler(t.Context(), "orders-pool", true); err == nil || !strings.Contains(err.Error(), "set spec.paused to false first") {
		t.Errorf("a pooler with spec.paused: %v, want a refusal", err)
	}
	if err := e.pausePooler(t.Context(), "nothing", true); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("no such pooler: %v", err)
	}
}

func TestRotateCAPatch(t *testing.T) {
	patch, err := rotateCAPatch(now.Add(500 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"spec":{"tls":{"caRotation":{"requestedAt":"2026-11-30T12:00:00Z"}}}}`; string(patch) != want {
		t.Errorf("patch %s, want %s", patch, want)
	}
}

// TestRotateCA: rotate-ca sets spec.tls.caRotation.requestedAt and keeps
// the rest of spec.tls; --wait is done only once status reports this
// request Succeeded; a paused MyDatabase is refused.
func TestRotateCA(t *testing.T) {
	db := &databasev1alpha1.MyDatabase{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"},
		Spec: databasev1alpha1.MyDatabaseSpec{TLS: databasev1alpha1.TLSSpec{Clients: databasev1alpha1.TLSClientsRequired,
			CARotation: &databasev1alpha1.CARotationSpec{MaxAge: &metav1.Duration{Duration: 8760 * time.Hour}}}}}
	var out strings.Builder
	e := &Env{c: fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(db).Build(), namespace: "shop", Stdout: &out,
		Now: func() time.Time { return now }}
	if err := e.rotateCA(t.Context(), "orders", 0); err != nil {
		t.Fatal(err)
	}
	got := &databasev1alpha1.MyDatabase{}
	if err := e.c.Get(t.Context(), client.ObjectKeyFromObject(db), got); err != nil {
		t.Fatal(err)
	}
	r := got.Spec.TLS.CARotation
	if r == nil || r.RequestedAt == nil || !r.RequestedAt.Equal(&metav1.Time{Time: now}) || r.MaxAge == nil ||
		got.Spec.TLS.Clients != databasev1alpha1.TLSClientsRequired {
		t.Errorf("spec.tls after rotate-ca: %+v", got.Spec.TLS)
	}
	if !strings.Contains(out.String(), "CA rotation of shop/orders requested (spec.tls.caRotation.requestedAt 2026-11-30T12:00:00Z)") {
		t.Errorf("output %q", out.String())
	}

	for name, tc := range map[string]struct {
		st   *databasev1alpha1.CARotationStatus
		done bool
		says string
	}{
		"not started":        {nil, false, "not started"},
		"an earlier request": {&databasev1alpha1.CARotationStatus{Phase: databasev1alpha1.CARotationSucceeded, Request: "2026-11-01T00:00:00Z"}, false, "not started"},
		"trusting":           {&databasev1alpha1.CARotationStatus{Phase: databasev1alpha1.CARotationTrusting, Request: "2026-11-30T12:00:00Z", Message: "waiting for x-0"}, false, "Trusting: waiting for x-0"},
		"succeeded":          {&databasev1alpha1.CARotationStatus{Phase: databasev1alpha1.CARotationSucceeded, Request: "2026-11-30T12:00:00Z"}, true, "Succeeded"},
	} {
		d := got.DeepCopy()
		d.Status.TLS = &databasev1alpha1.TLSStatus{CARotation: tc.st}
		if done, says := rotateCADone(d, caRequest(now)); done != tc.done || !strings.Contains(says, tc.says) {
			t.Errorf("%s: done %t %q, want %t %q", name, done, says, tc.done, tc.says)
		}
	}

	got.Spec.Paused = true
	if err := e.c.Update(t.Context(), got); err != nil {
		t.Fatal(err)
	}
	if err := e.rotateCA(t.Context(), "orders", 0); err == nil || !strings.Contains(err.Error(), "paused") {
		t.Errorf("a paused MyDatabase: %v", err)
	}
}

func TestTLSLineDuringCARotation(t *testing.T) {
	st := &databasev1alpha1.TLSStatus{ServerCertSecret: "x-server-tls", CARotation: &databasev1alpha1.CARotationStatus{
		Phase: databasev1alpha1.CARotationReissuing, Message: "Reissuing: waiting for the servers x-1 to report certificates from the new CA loaded"}}
	if got := tlsLine(databasev1alpha1.TLSClientsAllowed, st, now); !strings.HasSuffix(got, "; CA rotation Reissuing: "+st.CARotation.Message) {
		t.Errorf("tlsLine = %q", got)
	}
}

// TestVerify: verify asks for a verification of the newest completed
// backup of the MyDatabase, or of the one named, through the annotation;
// a backup of another database, an unfinished one, or none at all is
// refused with what to do.
func TestVerify(t *testing.T) {
	db := &databasev1alpha1.MyDatabase{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"},
		Spec: databasev1alpha1.MyDatabaseSpec{Backup: &databasev1alpha1.BackupSpec{}}}
	backup := func(name, database string, phase databasev1alpha1.BackupPhase, stopped time.Duration) *databasev1alpha1.MyDatabaseBackup {
		return &databasev1alpha1.MyDatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			Spec:   databasev1alpha1.MyDatabaseBackupSpec{Database: database},
			Status: databasev1alpha1.MyDatabaseBackupStatus{Phase: phase, BackupID: name, StoppedAt: ago(stopped)}}
	}
	var out strings.Builder
	e := &Env{c: fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(db,
		backup("orders-old", "orders", databasev1alpha1.BackupCompleted, 2*time.Hour),
		backup("orders-new", "orders", databasev1alpha1.BackupCompleted, time.Hour),
		backup("orders-failed", "orders", databasev1alpha1.BackupFailed, time.Minute),
		backup("carts-new", "carts", databasev1alpha1.BackupCompleted, time.Minute)).Build(),
		namespace: "shop", Stdout: &out, Now: func() time.Time { return now }}
	asked := func(name string) string {
		b := &databasev1alpha1.MyDatabaseBackup{}
		if err := e.c.Get(t.Context(), client.ObjectKey{Namespace: "shop", Name: name}, b); err != nil {
			t.Fatal(err)
		}
		return b.Annotations[databasev1alpha1.AnnotationVerify]
	}
	if err := e.verify(t.Context(), "orders", "", 0); err != nil {
		t.Fatal(err)
	}
	if got, old := asked("orders-new"), asked("orders-old"); got != "2026-11-30T12:00:00Z" || old != "" {
		t.Errorf("the newest backup asks for %q and the older one for %q; want the newest alone, at now", got, old)
	}
	for backup, want := range map[string]string{"carts-new": `a backup of "carts"`, "orders-failed": "Failed: only a completed backup"} {
		if err := e.verify(t.Context(), "orders", backup, 0); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--backup %s: %v, want %q", backup, err, want)
		}
	}
	e.c = fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(db).Build()
	if err := e.verify(t.Context(), "orders", "", 0); err == nil || !strings.Contains(err.Error(), "kubectl mydb backup orders") {
		t.Errorf("no backup: %v", err)
	}
}

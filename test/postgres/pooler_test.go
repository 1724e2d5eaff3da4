package postgres

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/pki"
	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
)

// TestPooler runs a MyDatabasePooler's pod as processes: the operator (in
// this process) makes the pooler's ConfigMap and certificates and tells
// the primary to keep the lookup; the test plays the kubelet, copying them
// into the pod's volumes; the pooler manager (`instance pooler`, this
// checkout's) runs a real PgBouncer in front of a real server. Clients log
// in with their own passwords (the auth query, run as the pooler's role
// over its certificate) with verify-full against the pooler; a settings
// change and a renewed certificate reach the running PgBouncer without a
// restart and without dropping a client.
func TestPooler(t *testing.T) {
	pc := startPooled(t, 1, nil, databasev1alpha1.MyDatabasePoolerSpec{})
	c, primary, pod, p := pc.c, pc.primary, pc.pod, pc.p
	db, user, appPassword, dbname := c.db, pc.user, pc.password, pc.dbname
	ctx := context.Background()
	api := c.api.Client
	ns := db.Namespace
	login := pc.login
	var err error

	t.Run("clients log in with their own password over verify-full, and reach the server over TLS", func(t *testing.T) {
		var out string
		eventually(t, 30*time.Second, "a login through the pooler", func() (bool, string) {
			out, err = c.psql(login(user, appPassword), "",
				"SELECT current_user, inet_server_port(), s.ssl FROM pg_stat_ssl s WHERE s.pid = pg_backend_pid()")
			return err == nil, out + pod.logTail()
		})
		if want := fmt.Sprintf("%s|%d|t", user, primary.port); out != want {
			t.Errorf("through the pooler: %q, want %q", out, want)
		}
		// The lookup logged in with the pooler's certificate: no password.
		dn := c.query(t, primary.socket("postgres", "postgres"), "",
			"SELECT string_agg(DISTINCT s.client_dn, ',') FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.usename = 'mydatabase_pooler'")
		if dn != "/CN=mydatabase_pooler" {
			t.Errorf("the pooler role's connections present %q, want its certificate", dn)
		}
	})

	t.Run("a wrong password, the superuser and the pooler's own role are refused", func(t *testing.T) {
		c.refused(t, login(user, "not-the-password"), "", "SASL authentication failed", "SELECT 1")
		// The lookup returns no row for the superuser, which PgBouncer 1.18
		// reports as "bouncer config error"; its own auth_user it knows, with
		// no password.
		c.refused(t, login("postgres", "anything"), "", "bouncer config error", "SELECT 1")
		c.refused(t, login(contract.PoolerRole, "anything"), "", "SASL authentication failed", "SELECT 1")
		got := c.query(t, primary.socket("postgres", dbname), "", fmt.Sprintf(
			"SELECT string_agg(format('%%s:%%s', name, (SELECT left(password, 14) FROM %s(name))), ',' ORDER BY name) FROM unnest(ARRAY['%s', 'postgres', 'replicator', '%s']) name",
			contract.PoolerLookup, user, contract.PoolerRole))
		if want := fmt.Sprintf("%s:,postgres:,replicator:,%s:SCRAM-SHA-256$", contract.PoolerRole, user); got != want {
			t.Errorf("the lookup returns %q, want %q", got, want)
		}
		// Nor can anyone else run the lookup.
		c.refused(t, fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=require password=%s", primary.port, user, dbname, appPassword), "",
			"permission denied", "SELECT * FROM "+contract.PoolerLookup+"('postgres')")
	})

	// held is a client connected in session mode, which no reload may
	// drop.
	held := pod.connect(t, user, appPassword, dbname)
	defer func() { _ = held.Close(ctx) }()
	backend := func(conn *pgx.Conn) int {
		t.Helper()
		var pid int
		if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatalf("a client of the pooler: %v", err)
		}
		return pid
	}
	heldPID := backend(held)
	bouncer := pod.pgbouncerPID(t)

	t.Run("the pooler manager serves PgBouncer's pools and statistics as metrics", func(t *testing.T) {
		metrics := pod.metrics(t)
		for _, want := range []string{
			"pgbouncer_up 1\n",
			fmt.Sprintf("pgbouncer_pool_client_active_connections{database=%q,user=%q} 1\n", dbname, user),
			fmt.Sprintf("pgbouncer_pool_server_active_connections{database=%q,user=%q} 1\n", dbname, user),
			fmt.Sprintf("pgbouncer_pool_client_waiting_connections{database=%q,user=%q} 0\n", dbname, user),
		} {
			if !strings.Contains(metrics, want) {
				t.Errorf("the metrics lack %q:\n%s", want, metrics)
			}
		}
		if m := regexp.MustCompile(fmt.Sprintf(`pgbouncer_transactions_total\{database=%q\} (\d+)`, dbname)).FindStringSubmatch(metrics); m == nil || m[1] == "0" {
			t.Errorf("no transaction counted for %s:\n%s", dbname, metrics)
		}
	})

	t.Run("a settings change reloads PgBouncer: no restart, no client dropped", func(t *testing.T) {
		other := pod.connect(t, user, appPassword, dbname)
		defer func() { _ = other.Close(ctx) }()
		if backend(other) == heldPID {
			t.Fatal("session mode: two clients share a server connection")
		}
		logged := pod.logSize()
		updatePooler(t, api, p, func(p *databasev1alpha1.MyDatabasePooler) {
			p.Spec.PoolMode = databasev1alpha1.PoolModeTransaction
			p.Spec.PgBouncer.DefaultPoolSize = ptr.To(int32(1))
		})
		eventually(t, 30*time.Second, "the ConfigMap in transaction mode", func() (bool, string) {
			cfg := pod.config(t)
			return cfg.Settings["pool_mode"] == "transaction" && cfg.Settings["default_pool_size"] == "1", fmt.Sprint(cfg.Settings)
		})
		pod.sync(t)
		eventually(t, 30*time.Second, "PgBouncer reloaded", func() (bool, string) {
			log := pod.logSince(logged)
			return strings.Contains(log, "reloading PgBouncer"), log
		})
		if got := pod.pgbouncerPID(t); got != bouncer {
			t.Errorf("PgBouncer is pid %d, was %d: it restarted", got, bouncer)
		}
		if got := backend(held); got != heldPID {
			t.Errorf("the held client's server connection changed: %d, was %d", got, heldPID)
		}
		_ = other.Close(ctx)
		_ = held.Close(ctx)
		// Transaction mode with one server connection per pool: two
		// clients, each between transactions, share it.
		a, b := pod.connect(t, user, appPassword, dbname), pod.connect(t, user, appPassword, dbname)
		defer func() { _ = a.Close(ctx); _ = b.Close(ctx) }()
		if pa, pb := backend(a), backend(b); pa != pb {
			t.Errorf("transaction mode, pool size 1: the clients ran on backends %d and %d", pa, pb)
		}
	})

	t.Run("pg_hba.conf is reloaded when it changes, as when an operator upgrade brings the poolers' lines", func(t *testing.T) {
		tls := filepath.Join(pod.dir, "tls")
		asPooler := fmt.Sprintf("host=localhost port=%d user=%s dbname=%s sslmode=verify-full sslrootcert=%s sslcert=%s sslkey=%s",
			primary.port, contract.PoolerRole, dbname, filepath.Join(tls, contract.PoolerServerCAKey),
			filepath.Join(tls, contract.PoolerClientCertKey), filepath.Join(tls, contract.PoolerClientKeyKey))
		started := c.query(t, primary.socket("postgres", "postgres"), "", "SELECT pg_postmaster_start_time()")
		c.query(t, asPooler, "", "SELECT 1")
		// The ConfigMap of the operator before the poolers.
		current := specs.ConfigData(db)
		var before []string
		for line := range strings.Lines(current[contract.HBAConfFile]) {
			if !strings.Contains(line, contract.PoolerRole) && !strings.Contains(line, "The poolers' role") && !strings.Contains(line, "client certificate from the same CA to look up") {
				before = append(before, line)
			}
		}
		old := map[string]string{contract.PostgresConfFile: current[contract.PostgresConfFile], contract.HBAConfFile: strings.Join(before, "")}
		off := primary.logSize()
		primary.updateConfig(t, old)
		waitLogged(t, primary, off, "pg_hba.conf changed: reloading")
		c.refused(t, asPooler, "", "no password supplied", "SELECT 1")
		off = primary.logSize()
		primary.updateConfig(t, current)
		waitLogged(t, primary, off, "pg_hba.conf changed: reloading")
		c.query(t, asPooler, "", "SELECT 1")
		if now := c.query(t, primary.socket("postgres", "postgres"), "", "SELECT pg_postmaster_start_time()"); now != started {
			t.Errorf("the server restarted: started at %s, was %s", now, started)
		}
	})

	t.Run("a renewed certificate is served without a restart", func(t *testing.T) {
		before := pod.servedSerial(t, user, appPassword, dbname)
		old := &corev1.Secret{}
		if err := api.Get(ctx, client.ObjectKey{Namespace: ns, Name: specs.PoolerSecretName(p)}, old); err != nil {
			t.Fatal(err)
		}
		// The operator issues the certificates again when they no longer
		// verify: a deleted Secret is the quickest way there.
		if err := api.Delete(ctx, old); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "the operator issues the pooler's certificates again", func() (bool, string) {
			s := &corev1.Secret{}
			err := api.Get(ctx, client.ObjectKey{Namespace: ns, Name: specs.PoolerSecretName(p)}, s)
			return err == nil && s.UID != old.UID, fmt.Sprint(err)
		})
		logged := pod.logSize()
		pod.sync(t)
		eventually(t, 30*time.Second, "PgBouncer reloaded", func() (bool, string) {
			log := pod.logSince(logged)
			return strings.Contains(log, "reloading PgBouncer"), log
		})
		after := pod.servedSerial(t, user, appPassword, dbname)
		if after.Cmp(before) == 0 {
			t.Errorf("PgBouncer still serves the certificate %x", before)
		}
		if got := pod.pgbouncerPID(t); got != bouncer {
			t.Errorf("PgBouncer is pid %d, was %d: it restarted", got, bouncer)
		}
	})

	t.Run("paused by hand: a client's transaction waits, still connected, and runs once resumed", func(t *testing.T) {
		conn := pod.connect(t, user, appPassword, dbname)
		defer func() { _ = conn.Close(ctx) }()
		hold := func(paused bool, logged string) {
			t.Helper()
			off := pod.logSize()
			updatePooler(t, api, p, func(p *databasev1alpha1.MyDatabasePooler) { p.Spec.PgBouncer.Paused = paused })
			eventually(t, 30*time.Second, fmt.Sprintf("the ConfigMap with paused %v", paused), func() (bool, string) {
				cfg := pod.config(t)
				return cfg.Paused == paused, fmt.Sprintf("%+v", cfg)
			})
			pod.sync(t)
			eventually(t, 30*time.Second, logged, func() (bool, string) {
				log := pod.logSince(off)
				return strings.Contains(log, logged), log
			})
		}
		hold(true, "pausing PgBouncer by hand")
		eventually(t, 10*time.Second, "the pause in the metrics", func() (bool, string) {
			m := pod.metrics(t)
			return strings.Contains(m, `pgbouncer_paused{reason="hand"} 1`), m
		})
		done := make(chan error, 1)
		go func() {
			var one int
			done <- conn.QueryRow(ctx, "SELECT 1").Scan(&one)
		}()
		select {
		case err := <-done:
			t.Fatalf("a transaction ran while PgBouncer was paused (%v)", err)
		case <-time.After(2 * time.Second):
		}
		hold(false, "resuming PgBouncer")
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("the held transaction, once resumed: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the held transaction did not run within 30 s of the resume")
		}
		if got := pod.pgbouncerPID(t); got != bouncer {
			t.Errorf("PgBouncer is pid %d, was %d: it restarted", got, bouncer)
		}
	})
}

// TestPoolerSwitchover: a switchover under a write load through a pooler
// in transaction mode, which pauses PgBouncer before the primary stops and
// resumes it on the new one. Every write either is acknowledged and
// present on the new primary, or fails: none fails, none is lost, and the
// clients keep their connections to the pooler throughout.
func TestPoolerSwitchover(t *testing.T) {
	pc := startPooled(t, 2, nil, databasev1alpha1.MyDatabasePoolerSpec{PoolMode: databasev1alpha1.PoolModeTransaction})
	c, old, next := pc.c, pc.pods[0], pc.pods[1]
	if cfg := pc.pod.config(t); !cfg.PauseOnSwitchover {
		t.Fatalf("a read-write pooler in transaction mode: pauseOnSwitchover false in %+v", cfg)
	}
	// pgx has no hostaddr: verify-ca, against 127.0.0.1. No named
	// prepared statements: PgBouncer 1.18 does not carry them across
	// server connections in transaction mode.
	through := fmt.Sprintf("host=127.0.0.1 port=%d user=%s password=%s dbname=%s sslmode=verify-ca sslrootcert=%s connect_timeout=5",
		pc.pod.port, pc.user, pc.password, pc.dbname, pc.pod.caFile)
	c.query(t, through, "", checkerTable)
	through += " default_query_exec_mode=exec"
	eventually(t, 30*time.Second, "the pooler's control connection on the primary", func() (bool, string) {
		out, err := c.psql(old.socket("postgres", "postgres"), "",
			fmt.Sprintf("SELECT count(*) FROM pg_stat_activity WHERE usename = '%s' AND application_name = '%s'", contract.PoolerRole, contract.PoolerApp(contract.PoolerID(string(pc.p.UID)), false)))
		return err == nil && out == "1", fmt.Sprint(out, err)
	})
	w := startWriters(t, through, nil, 4)
	w.waitAcks(t, 200, time.Minute)
	logged := pc.pod.logSize()
	c.requestSwitchover(t, next)
	w.waitAcks(t, 200, time.Minute)
	v := w.check(t, fmt.Sprintf("host=127.0.0.1 port=%d user=%s password=%s dbname=%s sslmode=disable", next.port, pc.user, pc.password, pc.dbname))

	log := pc.pod.logSince(logged)
	logContains(t, log, "hands over to "+next.name+": pausing PgBouncer", "PgBouncer paused", "a new primary at")
	longest := time.Duration(0)
	for _, a := range w.acks {
		longest = max(longest, a.acked.Sub(a.invoked))
	}
	t.Logf("%d writes acknowledged by %v, %d failed, %d lost; the longest took %s, the longest time without an acknowledgement %s",
		v.acked, v.servers, w.failures, v.lost, longest.Round(time.Millisecond), v.longestGap.Round(time.Millisecond))
	if w.failures != 0 || v.lost != 0 || len(v.splitBrain) != 0 {
		t.Errorf("through the pooler: %d writes failed, %d acknowledged ones lost, split brain %v; want none", w.failures, v.lost, v.splitBrain)
	}
	if len(v.servers) != 2 {
		t.Errorf("writes acknowledged by %v, want the old primary then the new", v.servers)
	}
	// The primary counted the paused pooler into the Lease; the operator
	// reports it with the switchover.
	sw := c.database(t).Status.Switchover
	if sw == nil || !strings.HasSuffix(sw.Message, "; the poolers held their clients' transactions through it (PgBouncer pods paused: 1 of shop-pool)") ||
		!slices.Equal(sw.Poolers, []databasev1alpha1.SwitchoverPooler{{Name: "shop-pool", PausedPods: 1}}) {
		t.Errorf("status.switchover %+v: want the paused pooler named, with its 1 pod", sw)
	}
	// The pooler's status and events say it too.
	eventually(t, 30*time.Second, "the pooler's status.lastSwitchover", func() (bool, string) {
		p := &databasev1alpha1.MyDatabasePooler{}
		if err := c.api.Client.Get(context.Background(), client.ObjectKeyFromObject(pc.p), p); err != nil {
			return false, err.Error()
		}
		got := p.Status.LastSwitchover
		return got != nil && got.From == old.name && got.To == next.name && got.PausedPods == 1 && got.FinishedAt.Equal(sw.FinishedAt), fmt.Sprintf("%+v", got)
	})
	c.eventSaid(t, pc.p, "PausedThroughSwitchover")
}

// pooled is a MyDatabase with its operator, and a pooler of one pod
// running in front of it.
type pooled struct {
	c                      *cluster
	pods                   []*pod
	primary                *pod // the first
	p                      *databasev1alpha1.MyDatabasePooler
	pod                    *poolerPod
	user, password, dbname string
}

// startPooled starts a MyDatabase of n servers with params, the operator,
// and a pooler of spec (database and instances set here) in front of it,
// and waits until PgBouncer listens. With more than one server the pooler
// reaches the primary through a front that plays the -rw Service.
func startPooled(t *testing.T, n int, params map[string]string, spec databasev1alpha1.MyDatabasePoolerSpec) *pooled {
	t.Helper()
	servers := findServers(t)
	srv := servers[len(servers)-1]
	pgbouncer, err := testenv.PgBouncerBin()
	if err != nil {
		t.Fatal(err)
	}
	db := newDatabase(srv.major, params)
	db.Spec.Replicas = new(int32(n))
	pc := &pooled{password: "app-password"}
	creds := specs.CredentialsSecret(db, pc.password)
	pc.user, pc.dbname = string(creds.Data[specs.SecretUsernameKey]), string(creds.Data[specs.SecretDatabaseKey])
	c := newCluster(t, srv, db, creds)
	pc.c, pc.pods = c, c.startPods(t, n)
	pc.primary = pc.pods[0]
	c.op = c.startOperator(t)
	rw := pc.primary.port
	if n > 1 {
		rw = c.front(t, pc.pods).Port()
	}

	// The pooler reaches the servers by the -rw Service's name in a
	// cluster; here by localhost, which their certificates must then
	// cover for PgBouncer's verify-full: the same CA issues them one that
	// does, into their volumes alone.
	ca := pki.KeyPair{Cert: c.secrets[specs.CASecretName(db)].Data[specs.CACertKey], Key: c.secrets[specs.CASecretName(db)].Data[specs.CAKeyKey]}
	local, err := pki.NewServer(ca, specs.ServerCommonName(db), append(specs.ServerDNSNames(db), "localhost"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pc.pods {
		p.updateSecret(t, specs.ServerCertSecret(db, local, ca.Cert))
	}

	spec.Database, spec.Instances = db.Name, ptr.To(int32(1))
	pc.p = &databasev1alpha1.MyDatabasePooler{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: "shop-pool"}, Spec: spec}
	if err := c.api.Client.Create(context.Background(), pc.p); err != nil {
		t.Fatal(err)
	}
	pc.pod = newPoolerPod(t, c, pc.p, rw, pgbouncer)
	pc.pod.sync(t)
	eventually(t, time.Minute, "the primary keeps the lookup in "+pc.dbname+" and template1", func() (bool, string) {
		out, err := c.psql(pc.primary.socket("postgres", "postgres"), "",
			"SELECT string_agg(datname, ',' ORDER BY datname) FROM pg_database WHERE has_database_privilege('mydatabase_pooler', datname, 'CONNECT')")
		return err == nil && strings.Contains(out, pc.dbname) && strings.Contains(out, "template1"), out
	})
	pc.pod.start(t)
	return pc
}

// login is a conninfo through the pooler, verify-full against its
// Service's name.
func (pc *pooled) login(role, password string) string {
	return fmt.Sprintf("host=%s hostaddr=127.0.0.1 port=%d user=%s dbname=%s sslmode=verify-full sslrootcert=%s password=%s connect_timeout=5",
		specs.PoolerDNSNames(pc.p)[2], pc.pod.port, role, pc.dbname, pc.pod.caFile, password)
}

// poolerPod is one PgBouncer pod of a pooler: its volumes, and the pooler
// manager running as the postgres OS user.
type poolerPod struct {
	c      *cluster
	p      *databasev1alpha1.MyDatabasePooler
	dir    string
	port   int
	server int // the port the pooler reaches the server on
	// metricsAddr is where the pooler manager serves /metrics.
	metricsAddr string
	bin         string
	caFile      string // the pooler's ca.crt, for clients
	logPath     string
	cmd         *exec.Cmd
	exited      chan struct{}
}

func newPoolerPod(t *testing.T, c *cluster, p *databasev1alpha1.MyDatabasePooler, server int, pgbouncer string) *poolerPod {
	t.Helper()
	ports := freePorts(t, 2)
	pp := &poolerPod{c: c, p: p, dir: filepath.Join(c.base, p.Name), port: ports[0], server: server,
		metricsAddr: fmt.Sprintf("127.0.0.1:%d", ports[1])}
	// The postgres OS user may not reach the cache (under root's home):
	// PgBouncer and its library are copied into the pod, as an image
	// holds them.
	pp.bin = filepath.Join(pp.dir, "image", "pgbouncer")
	if err := os.MkdirAll(filepath.Dir(pp.bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-R", pgbouncer, filepath.Join(filepath.Dir(pgbouncer), "lib"), filepath.Dir(pp.bin)).CombinedOutput(); err != nil {
		t.Fatalf("copying PgBouncer: %v\n%s", err, out)
	}
	for _, d := range []string{"config", "tls", "run"} {
		if err := os.MkdirAll(filepath.Join(pp.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(filepath.Join(pp.dir, d), c.user.uid, c.user.gid); err != nil {
			t.Fatal(err)
		}
	}
	pp.caFile = filepath.Join(pp.dir, "client-ca.crt")
	pp.logPath = filepath.Join(pp.dir, "container.log")
	t.Cleanup(pp.stop)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the pooler pod's log:\n%s", pp.logSince(0))
		}
	})
	return pp
}

// sync plays the kubelet: the pooler's ConfigMap and Secret, as they are
// now, into the pod's volumes. The configuration's server is the test's
// (localhost and the server's port): no Service resolves here.
func (pp *poolerPod) sync(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	api := pp.c.api.Client
	var s corev1.Secret
	var cm corev1.ConfigMap
	eventually(t, time.Minute, "the pooler's ConfigMap and Secret", func() (bool, string) {
		errS := api.Get(ctx, client.ObjectKey{Namespace: pp.p.Namespace, Name: specs.PoolerSecretName(pp.p)}, &s)
		errC := api.Get(ctx, client.ObjectKey{Namespace: pp.p.Namespace, Name: specs.PoolerConfigMapName(pp.p)}, &cm)
		return errS == nil && errC == nil, fmt.Sprint(errS, errC)
	})
	var cfg contract.Pooler
	if err := json.Unmarshal([]byte(cm.Data[contract.PoolerConfigKey]), &cfg); err != nil {
		t.Fatal(err)
	}
	if want := specs.ReadWriteServiceName(pp.c.db) + "." + pp.p.Namespace + ".svc"; cfg.Host != want {
		t.Fatalf("the pooler leads to %s, want %s", cfg.Host, want)
	}
	cfg.Host, cfg.Port = "localhost", int32(pp.server)
	raw, _ := json.Marshal(cfg)
	writeOwned(t, pp.c, filepath.Join(pp.dir, "config", ".new"), raw)
	if err := os.Rename(filepath.Join(pp.dir, "config", ".new"), filepath.Join(pp.dir, "config", contract.PoolerConfigKey)); err != nil {
		t.Fatal(err)
	}
	for key, value := range s.Data {
		writeOwned(t, pp.c, filepath.Join(pp.dir, "tls", ".new"), value)
		if err := os.Rename(filepath.Join(pp.dir, "tls", ".new"), filepath.Join(pp.dir, "tls", key)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(pp.caFile, s.Data[specs.CACertKey], 0o644); err != nil {
		t.Fatal(err)
	}
}

// config is the pooler's configuration as the operator last wrote it.
func (pp *poolerPod) config(t *testing.T) contract.Pooler {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := pp.c.api.Client.Get(context.Background(), client.ObjectKey{Namespace: pp.p.Namespace, Name: specs.PoolerConfigMapName(pp.p)}, cm); err != nil {
		t.Fatal(err)
	}
	var cfg contract.Pooler
	if err := json.Unmarshal([]byte(cm.Data[contract.PoolerConfigKey]), &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// start runs the pooler manager as the container would, with the
// environment the Deployment gives it (but the paths and the port).
func (pp *poolerPod) start(t *testing.T) {
	t.Helper()
	logf, err := os.OpenFile(pp.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = logf.Close() }()
	argv := append(slices.Clone(pp.c.user.wrap), pp.c.instanceBin, "pooler")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{
		"PATH=" + filepath.Dir(pp.bin) + ":/usr/bin:/bin",
		"LD_LIBRARY_PATH=" + filepath.Join(filepath.Dir(pp.bin), "lib"),
		contract.PoolerConfigEnv + "=" + filepath.Join(pp.dir, "config", contract.PoolerConfigKey),
		contract.PoolerTLSEnv + "=" + filepath.Join(pp.dir, "tls"),
		contract.PoolerRunEnv + "=" + filepath.Join(pp.dir, "run"),
		contract.PoolerPortEnv + "=" + strconv.Itoa(pp.port),
		contract.PoolerMetricsEnv + "=" + pp.metricsAddr,
	}
	cmd.Dir = pp.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pp.cmd, pp.exited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(pp.exited) }()
	eventually(t, 30*time.Second, "PgBouncer listening", func() (bool, string) {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", pp.port), time.Second)
		if err == nil {
			_ = conn.Close()
		}
		return err == nil, fmt.Sprint(err) + pp.logTail()
	})
}

// stop sends SIGTERM, as the kubelet does, and kills the process group if
// it still runs 30 s later.
func (pp *poolerPod) stop() {
	if pp.cmd == nil {
		return
	}
	_ = pp.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-pp.exited:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-pp.cmd.Process.Pid, syscall.SIGKILL)
		<-pp.exited
	}
}

var startedPgBouncer = regexp.MustCompile(`started PgBouncer \(pid (\d+)\)`)

// pgbouncerPID is the PgBouncer the pooler manager started last; the test
// fails if it no longer runs.
func (pp *poolerPod) pgbouncerPID(t *testing.T) int {
	t.Helper()
	m := startedPgBouncer.FindAllStringSubmatch(pp.logSince(0), -1)
	if len(m) == 0 {
		t.Fatal("the pooler manager logged no PgBouncer start")
	}
	pid, _ := strconv.Atoi(m[len(m)-1][1])
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("PgBouncer (pid %d) no longer runs: %v", pid, err)
	}
	return pid
}

func (pp *poolerPod) logSize() int64               { return logFile(pp.logPath).size() }
func (pp *poolerPod) logSince(offset int64) string { return logFile(pp.logPath).since(offset) }

func (pp *poolerPod) logTail() string {
	log := pp.logSince(0)
	if len(log) > 2000 {
		log = log[len(log)-2000:]
	}
	return "\n" + log
}

// metrics is what the pooler manager's /metrics serves.
func (pp *poolerPod) metrics(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://" + pp.metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// clientConfig is a client of the pooler with verify-full against its
// Service's name, which resolves to the test's loopback. The simple
// protocol: PgBouncer 1.18 in transaction mode cannot keep a protocol-level
// prepared statement (docs/pooler.md).
func (pp *poolerPod) clientConfig(t *testing.T, user, password, dbname string) *pgx.ConnConfig {
	t.Helper()
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=%s sslmode=verify-full sslrootcert=%s connect_timeout=5",
		specs.PoolerDNSNames(pp.p)[2], pp.port, user, password, dbname, pp.caFile))
	if err != nil {
		t.Fatal(err)
	}
	cfg.LookupFunc = func(context.Context, string) ([]string, error) { return []string{"127.0.0.1"}, nil }
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	return cfg
}

func (pp *poolerPod) connect(t *testing.T, user, password, dbname string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.ConnectConfig(context.Background(), pp.clientConfig(t, user, password, dbname))
	if err != nil {
		t.Fatalf("connecting through the pooler: %v%s", err, pp.logTail())
	}
	return conn
}

// servedSerial is the serial number of the certificate PgBouncer presents
// to a new client.
func (pp *poolerPod) servedSerial(t *testing.T, user, password, dbname string) *big.Int {
	t.Helper()
	cfg := pp.clientConfig(t, user, password, dbname)
	var serial *big.Int
	cfg.TLSConfig.VerifyConnection = func(cs tls.ConnectionState) error {
		serial = cs.PeerCertificates[0].SerialNumber
		return nil
	}
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("connecting through the pooler: %v%s", err, pp.logTail())
	}
	_ = conn.Close(context.Background())
	return serial
}

// updatePooler changes the pooler, retrying on a conflict.
func updatePooler(t *testing.T, api client.Client, p *databasev1alpha1.MyDatabasePooler, change func(*databasev1alpha1.MyDatabasePooler)) {
	t.Helper()
	eventually(t, 30*time.Second, "the pooler updated", func() (bool, string) {
		live := &databasev1alpha1.MyDatabasePooler{}
		if err := api.Get(context.Background(), client.ObjectKeyFromObject(p), live); err != nil {
			return false, err.Error()
		}
		change(live)
		err := api.Update(context.Background(), live)
		return err == nil, fmt.Sprint(err)
	})
}

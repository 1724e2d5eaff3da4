package postgres

// The harness runs a "pod" of the generated StatefulSet as a process tree on
// this machine. It maps only what cannot be the same on the host:
//
//   - every volume mount of the container (the data volume, the ConfigMap at
//     specs.ConfigDir, the server certificate Secret at specs.TLSDir, the
//     replication client certificate Secret at specs.ReplicationTLSDir, the
//     instance manager's, run and tmp emptyDirs) becomes a directory under
//     one temporary directory (a Secret volume holds its items alone when
//     it lists some), so PGDATA, PGHOST, CONFIG_DIR, TLS_DIR,
//     REPLICATION_TLS_DIR and the *_IDENTITIES_FILE of encrypted object
//     stores (and every path in the init container's and the
//     container's commands) point into it;
//   - /instance in the operator's image, which the init container copies, is
//     cmd/instance built from this checkout;
//   - PGPORT and the metrics port (METRICS_ADDRESS) become free ports of
//     this machine, and ADVERTISE_ADDRESS
//     (the pod's name on the headless Service) a proxy to it, through
//     which the other instances reach it (cut, it partitions the pod from
//     its peers);
//   - POD_NAME (fieldRef metadata.name) is <statefulset>-<ordinal>,
//     NAMESPACE (fieldRef metadata.namespace) the MyDatabase's;
//   - the pod's service account token becomes a kubeconfig (KUBECONFIG)
//     with a token of the same ServiceAccount, whose API server address is
//     a proxy of the pod's own (cut, it partitions the pod from the API
//     server);
//   - secretKeyRef values are read from the Secrets the builders generate
//     (also created in the API server, where the instance managers read
//     them for password rotation), as they were when the pod was made;
//   - the container runs as the postgres OS user of this machine instead of
//     uid 999, with PATH led by the bin directory of the major under test
//     (the official image has its own on PATH) and HOME in the pod directory,
//     so that nothing of the host user's (~/.pgpass, ~/.psqlrc) leaks in.
//
// The API server is a real one (internal/testenv), where the harness
// creates what the operator and the StatefulSet controller would: the
// MyDatabase, the instance managers' ServiceAccount, Role, RoleBinding and
// primary Lease (from internal/specs), and a Pod object per pod, which the
// instance manager labels and reports on.
//
// Everything else is used as generated: the init container's command,
// which installs the instance manager, then the container's, which runs it;
// postgresql.conf and pg_hba.conf from specs.ConfigData, every other
// environment variable of the container, and the argv of the startup,
// readiness and liveness probes. A container is stopped as the kubelet
// stops it: SIGTERM, then the grace period.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/pki"
	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
)

// minMajor is the oldest supported major: the bootstrap uses psql's
// \getenv, new in PostgreSQL 15.
const minMajor = 15

// server is one installed PostgreSQL major.
type server struct {
	major int
	bin   string
}

// tools are the programs the pod uses (the instance manager and the probes)
// and the test.
var tools = []string{"postgres", "initdb", "psql", "pg_isready", "pg_basebackup", "pg_controldata"}

// findServers lists every major >= 15 under /usr/lib/postgresql/*/bin, or
// fails the test with what to do: no server binaries is an error, not a
// reason to skip, unless MYDB_SKIP_POSTGRES=1.
func findServers(t *testing.T) []server {
	t.Helper()
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	var found []server
	for _, dir := range dirs {
		major, err := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
		if err != nil || major < minMajor || !executable(filepath.Join(dir, "postgres")) {
			continue
		}
		for _, tool := range tools {
			if !executable(filepath.Join(dir, tool)) {
				t.Fatalf("%s has a PostgreSQL %d server but no %s: reinstall it (hack/postgres.sh)", dir, major, tool)
			}
		}
		found = append(found, server{major: major, bin: dir})
	}
	slices.SortFunc(found, func(a, b server) int { return a.major - b.major })
	if len(found) == 0 {
		if os.Getenv("MYDB_SKIP_POSTGRES") == "1" {
			t.Skip("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin; skipped because MYDB_SKIP_POSTGRES=1")
		}
		t.Fatalf("no PostgreSQL server binaries (major >= %d) under /usr/lib/postgresql/*/bin: "+
			"run hack/postgres.sh (as root; it installs Debian's postgresql package) or `make test-postgres`, "+
			"or set MYDB_SKIP_POSTGRES=1 to skip this test", minMajor)
	}
	return found
}

func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// osUser is who the servers and every command run as: the postgres OS user.
// As root the harness switches to it with setpriv (which execs, so the PID
// it starts is the PID of bash and then of postgres); as the postgres user
// itself it runs commands directly.
type osUser struct {
	uid, gid int
	wrap     []string
}

func postgresUser(t *testing.T) osUser {
	t.Helper()
	if os.Geteuid() != 0 {
		if u, err := user.Current(); err == nil && u.Username == "postgres" {
			return osUser{uid: os.Getuid(), gid: os.Getgid()}
		}
		t.Fatalf("this test runs PostgreSQL as the postgres OS user: run it as root (it switches with setpriv) " +
			"or as postgres, or set MYDB_SKIP_POSTGRES=1 to skip it")
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("no postgres OS user (%v): run hack/postgres.sh, Debian's postgresql package creates it", err)
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatalf("setpriv (util-linux) is needed to run PostgreSQL as the postgres user: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return osUser{uid: uid, gid: gid,
		wrap: []string{setpriv, "--reuid=" + u.Uid, "--regid=" + u.Gid, "--clear-groups", "--"}}
}

// cluster is the StatefulSet of one MyDatabase on one major.
type cluster struct {
	// t is the test of the whole cluster: newCluster's, which outlives
	// every step's subtest and owns the cleanup.
	t       *testing.T
	srv     server
	user    osUser
	base    string
	db      *databasev1alpha1.MyDatabase
	secrets map[string]*corev1.Secret
	// configMaps are the data of ConfigMap volumes other than the
	// operator's (the custom queries'), which the test gives.
	configMaps map[string]map[string]string
	podSpec    *corev1ac.PodSpecApplyConfiguration
	claims     []string // volumeClaimTemplates: a PVC per pod
	ctr        *corev1ac.ContainerApplyConfiguration
	pods       []*pod
	// instanceBin is cmd/instance built from this checkout: what the
	// operator's image holds at /instance.
	instanceBin string
	api         *testenv.Env
	op          *operator // the operator, when the test runs it
	token       string    // of the instance managers' ServiceAccount
	podLabels   map[string]string
	// rw is the read-write front, when the test made one (front).
	rw *testenv.Proxy
}

func newCluster(t *testing.T, srv server, db *databasev1alpha1.MyDatabase, secrets ...*corev1.Secret) *cluster {
	t.Helper()
	return newClusterOn(t, nil, srv, db, secrets...)
}

// newClusterOn makes a cluster on api, the API server of another cluster
// of the test (whose db must be in another namespace), or on one of its
// own when api is nil: a test of many short clusters (the restore matrix)
// starts one API server, not one each.
func newClusterOn(t *testing.T, api *testenv.Env, srv server, db *databasev1alpha1.MyDatabase, secrets ...*corev1.Secret) *cluster {
	t.Helper()
	c := &cluster{t: t, srv: srv, user: postgresUser(t), db: db, secrets: map[string]*corev1.Secret{},
		configMaps: map[string]map[string]string{}, api: api}
	for _, s := range secrets {
		c.secrets[s.Name] = s
	}
	// The CA and certificates the operator would issue, unless the test
	// brings its own.
	if _, ok := c.secrets[specs.CASecretName(db)]; !ok {
		ca, server := issueCertificates(t, db)
		c.secrets[specs.CASecretName(db)] = specs.CASecret(db, ca)
		if !specs.UserSuppliedServerCert(db) {
			c.secrets[specs.IssuedServerCertSecretName(db)] = specs.ServerCertSecret(db, server, ca.Cert)
		}
		replication, err := pki.NewClient(ca, contract.ReplicationRole, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		c.secrets[specs.ReplicationCertSecretName(db)] = specs.ReplicationCertSecret(db, replication, ca.Cert)
	}
	c.startAPI()
	sts := specs.StatefulSet(c.db, specs.Platform{})
	c.podSpec = sts.Spec.Template.Spec
	c.podLabels = sts.Spec.Template.Labels
	for _, claim := range sts.Spec.VolumeClaimTemplates {
		c.claims = append(c.claims, *claim.Name)
	}
	if len(c.podSpec.Containers) != 1 {
		t.Fatalf("the harness runs one container per pod, the StatefulSet has %d", len(c.podSpec.Containers))
	}
	c.ctr = &c.podSpec.Containers[0]

	// A short base path: the socket path must fit in 107 bytes.
	base, err := os.MkdirTemp("", "mydb-pg")
	if err != nil {
		t.Fatal(err)
	}
	c.base = base
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs after every other cleanup of the test.
	t.Cleanup(func() {
		c.reapLeftovers()
		if os.Getenv("MYDB_POSTGRES_KEEP") == "1" {
			t.Logf("kept %s (MYDB_POSTGRES_KEEP=1)", base)
			return
		}
		_ = os.RemoveAll(base)
	})
	c.instanceBin = filepath.Join(base, "instance")
	if err := testenv.GoBuild(testenv.RepoRoot(), c.instanceBin, "./cmd/instance"); err != nil {
		t.Fatal(err)
	}
	if out, err := c.run(context.Background(), c.baseEnv(), "/bin/sh", "-c", `test -x "$HOME"`); err != nil {
		t.Fatalf("the postgres OS user cannot reach %s (set TMPDIR to a directory it can traverse): %v\n%s", base, err, out)
	}
	return c
}

// addSecret creates s, a Secret a person adds once the cluster runs, for
// the operator and the pods to read.
func (c *cluster) addSecret(t *testing.T, s *corev1.Secret) {
	t.Helper()
	if err := c.api.Client.Create(context.Background(), s.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	c.secrets[s.Name] = s
}

// startAPI starts the API server unless the cluster shares another's,
// creates the MyDatabase (which gives it its UID), what the operator would
// create for its instance managers, and a token of their ServiceAccount.
func (c *cluster) startAPI() {
	t := c.t
	if c.api == nil {
		api, err := testenv.Start()
		if err != nil {
			t.Fatal(err)
		}
		c.api = api
		t.Cleanup(func() { _ = api.Stop() })
	}
	api := c.api
	ctx := context.Background()
	if err := api.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.db.Namespace}}); err != nil {
		t.Fatal(err)
	}
	if err := api.Client.Create(ctx, c.db); err != nil {
		t.Fatal(err)
	}
	// The Secrets, which the instance managers read for password rotation,
	// owned by the MyDatabase the API server just gave its UID, as the
	// operator expects of its own.
	for _, s := range c.secrets {
		s := s.DeepCopy()
		for i := range s.OwnerReferences {
			s.OwnerReferences[i].UID = c.db.UID
		}
		if _, ok := s.Labels[databasev1alpha1.LabelOwnerUID]; ok {
			s.Labels[databasev1alpha1.LabelOwnerUID] = string(c.db.UID)
		}
		if err := api.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	for _, obj := range []runtime.ApplyConfiguration{specs.InstanceServiceAccount(c.db), specs.InstanceRole(c.db),
		specs.InstanceRoleBinding(c.db), specs.Lease(c.db, "", false)} {
		if err := api.Client.Apply(ctx, obj, client.FieldOwner("harness"), client.ForceOwnership); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := kubernetes.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(c.db.Namespace).CreateToken(ctx, specs.InstanceAccessName(c.db),
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](7200)}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.token = tr.Status.Token
}

// kubeconfig writes a kubeconfig of the instance managers' token for the
// API server at host.
func (c *cluster) kubeconfig(t *testing.T, path, host string) {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["api"] = &clientcmdapi.Cluster{Server: "https://" + host, CertificateAuthorityData: c.api.Config.CAData}
	cfg.AuthInfos["instance"] = &clientcmdapi.AuthInfo{Token: c.token}
	cfg.Contexts["instance"] = &clientcmdapi.Context{Cluster: "api", AuthInfo: "instance"}
	cfg.CurrentContext = "instance"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
}

// baseEnv is the environment of every command the harness runs that is not
// part of a pod (psql as a client).
func (c *cluster) baseEnv() []string {
	return []string{
		"PATH=" + c.srv.bin + ":/usr/local/bin:/usr/bin:/bin",
		"HOME=" + c.base,
		// No password file: a password is only ever the one a check passes.
		"PGPASSFILE=" + filepath.Join(c.base, "no-such-passfile"),
		"PGCONNECT_TIMEOUT=10",
	}
}

// run runs argv as the postgres OS user in its own process group, killed
// as a group when ctx ends.
func (c *cluster) run(ctx context.Context, env []string, argv ...string) (string, error) {
	full := append(slices.Clone(c.user.wrap), argv...)
	cmd := exec.CommandContext(ctx, full[0], full[1:]...)
	cmd.Env = env
	cmd.Dir = c.base
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// psql runs SQL statements with the psql of the major under test and returns
// the unaligned, tuples-only output. password goes into PGPASSWORD of this
// psql call only; empty means none.
func (c *cluster) psql(conninfo, password string, statements ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env := c.baseEnv()
	if password != "" {
		env = append(env, "PGPASSWORD="+password)
	}
	argv := make([]string, 0, 8+len(statements))
	argv = append(argv, filepath.Join(c.srv.bin, "psql"), "--no-psqlrc", "--no-password", "--no-align",
		"--tuples-only", "--quiet", "--set=ON_ERROR_STOP=1", "--dbname="+conninfo)
	for _, s := range statements {
		argv = append(argv, "--command="+s)
	}
	out, err := c.run(ctx, env, argv...)
	return strings.TrimRight(out, "\n"), err
}

// query is psql that must succeed.
func (c *cluster) query(t *testing.T, conninfo, password string, statements ...string) string {
	t.Helper()
	out, err := c.psql(conninfo, password, statements...)
	if err != nil {
		t.Fatalf("psql %q %q: %v\n%s", conninfo, statements, err, out)
	}
	return out
}

// refused is psql that must fail with an error containing want.
func (c *cluster) refused(t *testing.T, conninfo, password, want string, statements ...string) {
	t.Helper()
	out, err := c.psql(conninfo, password, statements...)
	if err == nil {
		t.Fatalf("psql %q %q succeeded, want it refused (%q): %s", conninfo, statements, want, out)
	}
	if !strings.Contains(out, want) {
		t.Fatalf("psql %q %q failed, but not with %q:\n%s", conninfo, statements, want, out)
	}
}

func tcp(port int, role, dbname string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable", port, role, dbname)
}

// pod is one ordinal of the StatefulSet: its volumes, its environment and,
// while it runs, the container's process.
type pod struct {
	c       *cluster
	ordinal int
	name    string
	dir     string
	port    int
	metrics string            // host:port of the metrics endpoint
	mounts  map[string]string // container mount path -> host directory
	env     []string
	logPath string
	// peers is the proxy the other instances reach this one through
	// (ADVERTISE_ADDRESS); failsafe the one to its failsafe endpoint
	// (FAILSAFE_ADDRESS); api the one it reaches the API server through.
	peers, failsafe, api *testenv.Proxy

	cmd    *exec.Cmd
	exited chan struct{}
	err    error // of the container process, once exited
}

// newPod lays out the volumes of an ordinal, creates its Pod object and
// proxies, and resolves its environment.
func (c *cluster) newPod(ordinal, port int) *pod {
	t := c.t
	t.Helper()
	p := &pod{c: c, ordinal: ordinal, port: port, mounts: map[string]string{},
		name: specs.PodName(c.db, int32(ordinal))}
	p.dir = filepath.Join(c.base, p.name)
	p.logPath = filepath.Join(p.dir, "container.log")
	if err := os.Mkdir(p.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var err error
	if p.peers, err = testenv.StartProxy(testenv.To(fmt.Sprintf("127.0.0.1:%d", port))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.peers.Close)
	apiURL, err := url.Parse(c.api.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	if p.api, err = testenv.StartProxy(testenv.To(apiURL.Host)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.api.Close)
	kubeconfig := filepath.Join(p.dir, "kubeconfig")
	c.kubeconfig(t, kubeconfig, p.api.Addr())
	obj := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: c.db.Namespace, Labels: maps.Clone(c.podLabels)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: *c.ctr.Name, Image: *c.ctr.Image}}},
	}
	if err := c.api.Client.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	for i, m := range c.ctr.VolumeMounts {
		dir := filepath.Join(p.dir, fmt.Sprintf("vol%d-%s", i, *m.Name))
		p.mounts[*m.MountPath] = dir
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		vol := c.volume(*m.Name)
		switch {
		case vol.Secret != nil:
			// A Secret volume: root's, group-readable through fsGroup.
			secret, ok := c.secrets[*vol.Secret.SecretName]
			if !ok {
				t.Fatalf("volume %s mounts Secret %s, which the test did not give the harness", *m.Name, *vol.Secret.SecretName)
			}
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			p.writeSecret(t, dir, secret, vol.Secret)
		case vol.ConfigMap != nil:
			// The ConfigMap: root's, read-only, files at the volume's mode.
			mode := os.FileMode(0o644)
			if vol.ConfigMap.DefaultMode != nil {
				mode = os.FileMode(*vol.ConfigMap.DefaultMode)
			}
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			data := specs.ConfigData(c.db)
			if name := *vol.ConfigMap.Name; name != specs.ConfigMapName(c.db) {
				data = c.configMaps[name] // nil: a ConfigMap that does not exist
			}
			p.writeConfig(t, data, dir, mode)
		case m.ReadOnly != nil && *m.ReadOnly && !c.filledByInit(*m.Name, *m.MountPath):
			t.Fatalf("volume mount %s is read-only, no ConfigMap and no init container's: the harness does not know its content", *m.Name)
		default:
			// The data volume and the emptyDirs: writable by the server.
			if err := os.Chown(dir, c.user.uid, c.user.gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, want := range []string{specs.DataMountPath, specs.SocketDir, specs.ConfigDir} {
		if _, ok := p.mounts[want]; !ok {
			t.Fatalf("the container mounts nothing at %s", want)
		}
	}

	containerPort := fmt.Sprint(*c.ctr.Ports[0].ContainerPort)
	p.env = []string{"PATH=" + c.srv.bin + ":/usr/local/bin:/usr/bin:/bin", "HOME=" + p.dir, "KUBECONFIG=" + kubeconfig}
	for _, e := range c.ctr.Env {
		name, value := *e.Name, ""
		switch {
		case e.ValueFrom == nil:
			if e.Value != nil {
				value = *e.Value
			}
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s, ok := c.secrets[*ref.Name]
			if !ok && ref.Optional != nil && *ref.Optional {
				continue // the kubelet leaves the variable out
			}
			if !ok {
				t.Fatalf("env %s refers to Secret %s, which the builders did not generate", name, *ref.Name)
			}
			v, ok := s.Data[*ref.Key]
			if !ok {
				t.Fatalf("env %s refers to key %s of Secret %s, which has no such key", name, *ref.Key, *ref.Name)
			}
			value = string(v)
		case e.ValueFrom.FieldRef != nil && *e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			value = p.name
		case e.ValueFrom.FieldRef != nil && *e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			value = c.db.Namespace
		default:
			t.Fatalf("env %s: the harness cannot resolve this valueFrom", name)
		}
		switch name {
		case "PGDATA", "WAL_DIR", "PGHOST", "CONFIG_DIR", "TLS_DIR", "REPLICATION_TLS_DIR", "CUSTOM_QUERIES", "REPLICA_STREAM_TLS_DIR",
			"BACKUP_IDENTITIES_FILE", "RESTORE_IDENTITIES_FILE", "REPLICA_IDENTITIES_FILE":
			value = p.hostPath(t, value)
		case "PGPORT":
			if value != containerPort {
				t.Fatalf("PGPORT is %s, the container port %s", value, containerPort)
			}
			value = strconv.Itoa(port)
		case "ADVERTISE_ADDRESS":
			want := fmt.Sprintf("$(POD_NAME).%s.%s.svc:%s", specs.HeadlessServiceName(c.db), c.db.Namespace, containerPort)
			if value != want {
				t.Fatalf("ADVERTISE_ADDRESS is %q, not the pod's name on the headless Service and its port (%s)", value, want)
			}
			value = p.peers.Addr()
		case "METRICS_ADDRESS":
			if value != fmt.Sprintf(":%d", specs.MetricsPort) {
				t.Fatalf("METRICS_ADDRESS is %q, not the metrics port %d", value, specs.MetricsPort)
			}
			p.metrics = fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1)[0])
			value = p.metrics
		}
		p.env = append(p.env, name+"="+value)
	}
	if p.metrics != "" {
		if p.failsafe, err = testenv.StartProxy(testenv.To(p.metrics)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.failsafe.Close)
		p.env = append(p.env, "FAILSAFE_ADDRESS="+p.failsafe.Addr())
	}
	for _, name := range []string{"PGDATA", "PGHOST", "PGPORT", "POD_NAME"} {
		if p.getenv(name) == "" {
			t.Fatalf("the container has no env %s", name)
		}
	}
	c.pods = append(c.pods, p)
	p.runInit(t)
	return p
}

// filledByInit tells whether an init container mounts the volume writable
// at the same path (the harness maps one directory per mount path).
func (c *cluster) filledByInit(volume, path string) bool {
	for _, ic := range c.podSpec.InitContainers {
		for _, m := range ic.VolumeMounts {
			if *m.Name == volume && *m.MountPath == path && (m.ReadOnly == nil || !*m.ReadOnly) {
				return true
			}
		}
	}
	return false
}

func (c *cluster) volume(name string) *corev1ac.VolumeApplyConfiguration {
	for i := range c.podSpec.Volumes {
		if *c.podSpec.Volumes[i].Name == name {
			return &c.podSpec.Volumes[i]
		}
	}
	if slices.Contains(c.claims, name) {
		return &corev1ac.VolumeApplyConfiguration{Name: &name} // the pod's PVC
	}
	c.t.Fatalf("the container mounts volume %s, which the pod does not have", name)
	return nil
}

// hostPath maps a path in the container to this pod's directories.
func (p *pod) hostPath(t *testing.T, path string) string {
	t.Helper()
	if dir, ok := p.mapPath(path); ok {
		return dir
	}
	t.Fatalf("%s is on no volume of the container", path)
	return ""
}

func (p *pod) mapPath(path string) (string, bool) {
	for mount, dir := range p.mounts {
		if path == mount {
			return dir, true
		}
		if rest, ok := strings.CutPrefix(path, mount+"/"); ok {
			return filepath.Join(dir, rest), true
		}
	}
	return "", false
}

// argv is a container's command and arguments, with every path on a
// volume mapped to this pod's directories, and the operator image's
// instance manager to the one built from this checkout.
func (p *pod) argv(t *testing.T, ctr *corev1ac.ContainerApplyConfiguration) []string {
	t.Helper()
	argv := append(slices.Clone(ctr.Command), ctr.Args...)
	for i, a := range argv {
		if dir, ok := p.mapPath(a); ok {
			argv[i] = dir
		} else if i == 0 && a == "/instance" {
			argv[i] = p.c.instanceBin
		}
	}
	return argv
}

// runInit runs the pod's init containers to completion, as the kubelet
// does before it starts the database container.
func (p *pod) runInit(t *testing.T) {
	t.Helper()
	for i := range p.c.podSpec.InitContainers {
		ctr := &p.c.podSpec.InitContainers[i]
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := p.c.run(ctx, p.c.baseEnv(), p.argv(t, ctr)...)
		cancel()
		if err != nil {
			t.Fatalf("%s: init container %s: %v\n%s", p.name, *ctr.Name, err, out)
		}
	}
}

// writeConfig writes the ConfigMap's files, as a ConfigMap update does.
func (p *pod) writeConfig(t *testing.T, data map[string]string, dir string, mode os.FileMode) {
	t.Helper()
	for name, content := range data {
		path := filepath.Join(dir, name)
		_ = os.Remove(path)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
}

// writeSecret writes a Secret volume's files as the kubelet does: each
// key a file at the volume's mode, its group the pod's fsGroup (here the
// postgres OS user's), swapped in whole (written aside, then renamed).
func (p *pod) writeSecret(t *testing.T, dir string, secret *corev1.Secret, vol *corev1ac.SecretVolumeSourceApplyConfiguration) {
	t.Helper()
	mode := os.FileMode(0o644)
	if vol.DefaultMode != nil {
		mode = os.FileMode(*vol.DefaultMode)
	}
	// With items, only the keys listed, at their paths.
	files := map[string]string{}
	for key := range secret.Data {
		files[key] = key
	}
	if len(vol.Items) > 0 {
		files = map[string]string{}
		for _, item := range vol.Items {
			files[*item.Key] = *item.Path
		}
	}
	for key, name := range files {
		value, ok := secret.Data[key]
		if !ok {
			t.Fatalf("volume of Secret %s lists key %s, which it does not have", secret.Name, key)
		}
		tmp := filepath.Join(dir, ".."+name)
		if err := os.WriteFile(tmp, value, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(tmp, 0, p.c.user.gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(tmp, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

// updateSecret gives this pod's volume of Secret name its new content, as
// the kubelet does some time after the Secret changes.
func (p *pod) updateSecret(t *testing.T, secret *corev1.Secret) {
	t.Helper()
	for _, m := range p.c.ctr.VolumeMounts {
		if vol := p.c.volume(*m.Name); vol.Secret != nil && *vol.Secret.SecretName == secret.Name {
			p.writeSecret(t, p.hostPath(t, *m.MountPath), secret, vol.Secret)
			return
		}
	}
	t.Fatalf("no volume of the container mounts Secret %s", secret.Name)
}

// issueCertificates makes a CA and a server certificate as the operator
// does (internal/controller/mydatabase, tls.go).
func issueCertificates(t *testing.T, db *databasev1alpha1.MyDatabase) (ca, server pki.KeyPair) {
	t.Helper()
	ca, err := pki.NewCA(specs.CACommonName(db), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if server, err = pki.NewServer(ca, specs.ServerCommonName(db), specs.ServerDNSNames(db), time.Now()); err != nil {
		t.Fatal(err)
	}
	return ca, server
}

// updateConfig replaces the ConfigMap's files of this pod.
func (p *pod) updateConfig(t *testing.T, data map[string]string) {
	t.Helper()
	dir := p.hostPath(t, specs.ConfigDir)
	fi, err := os.Stat(filepath.Join(dir, contract.PostgresConfFile))
	if err != nil {
		t.Fatal(err)
	}
	p.writeConfig(t, data, dir, fi.Mode().Perm())
}

func (p *pod) getenv(name string) string {
	for _, kv := range p.env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

func (p *pod) pgdata() string    { return p.getenv("PGDATA") }
func (p *pod) socketDir() string { return p.getenv("PGHOST") }

// socket is a conninfo over this pod's Unix socket.
func (p *pod) socket(role, dbname string) string {
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s", p.socketDir(), p.port, role, dbname)
}

// start runs the container command, as the container does, and returns
// the offset in the container log where this start's output begins.
func (p *pod) start(t *testing.T) int64 {
	t.Helper()
	if p.running() {
		t.Fatalf("%s is already running", p.name)
	}
	argv := p.argv(t, p.c.ctr)
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = logf.Close() }()
	offset, _ := logf.Seek(0, 2)
	full := append(slices.Clone(p.c.user.wrap), argv...)
	cmd := exec.Command(full[0], full[1:]...)
	cmd.Env = p.env
	cmd.Dir = p.dir
	// A file, not a pipe: Wait must not wait for whatever keeps it open.
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", p.name, err)
	}
	p.cmd, p.exited = cmd, make(chan struct{})
	go func(exited chan struct{}) {
		p.err = cmd.Wait()
		close(exited)
	}(p.exited)
	return offset
}

func (p *pod) running() bool {
	if p.exited == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// kill stops what still runs of the pod: SIGTERM to the container, as the
// kubelet sends (its instance manager stops the server with a fast
// shutdown and exits), SIGKILL to its process group if it still runs 20 s
// later (a stopped or stuck instance manager), and a fast shutdown
// (SIGINT) of any server left on its data (a scratch one the instance
// manager started, or one whose instance manager was killed).
func (p *pod) kill() {
	if p.running() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		_ = p.cmd.Process.Signal(syscall.SIGCONT) // if a test stopped it
		select {
		case <-p.exited:
		case <-time.After(20 * time.Second):
			pid := p.cmd.Process.Pid
			p.c.t.Logf("%s still runs 20 s after SIGTERM: killing process group %d", p.name, pid)
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			<-p.exited
		}
	}
	for _, dir := range []string{p.pgdata(), p.pgdata() + ".init", p.pgdata() + ".clone"} {
		if pid := postmasterPID(dir); pid > 0 && cwdIn(pid, dir) {
			_ = syscall.Kill(pid, syscall.SIGINT)
			for deadline := time.Now().Add(10 * time.Second); cwdIn(pid, dir) && time.Now().Before(deadline); {
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
}

// cwdIn reports whether process pid runs in dir (postgres chdirs to its
// data directory), which guards against a stale postmaster.pid.
func cwdIn(pid int, dir string) bool {
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	return err == nil && cwd == dir
}

// probe runs a probe's exec command in the pod, as the kubelet does: the
// container's environment, the probe's timeout. It returns the exit code.
func (p *pod) probe(t *testing.T, probe *corev1ac.ProbeApplyConfiguration) (int, string) {
	t.Helper()
	timeout := time.Second
	if probe.TimeoutSeconds != nil {
		timeout = time.Duration(*probe.TimeoutSeconds) * time.Second
	}
	return p.exec(t, probe.Exec.Command, timeout)
}

// exec runs argv in the pod within timeout and returns its exit code and
// output. A command that runs past its timeout has failed, as the kubelet
// counts a probe or hook that times out: code -1.
func (p *pod) exec(t *testing.T, argv []string, timeout time.Duration) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := p.c.run(ctx, p.env, argv...)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, out
	case ctx.Err() != nil:
		return -1, fmt.Sprintf("timed out after %s\n%s", timeout, out)
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode(), out
	default:
		t.Fatalf("%s: running %q: %v\n%s", p.name, argv, err, out)
		return -1, ""
	}
}

func (p *pod) ready(t *testing.T) (int, string) { return p.probe(t, p.c.ctr.ReadinessProbe) }
func (p *pod) alive(t *testing.T) (int, string) { return p.probe(t, p.c.ctr.LivenessProbe) }

// readyTimeout bounds a server's start, initdb or base backup included.
const readyTimeout = 2 * time.Minute

// waitReady runs the startup probe until it succeeds, failing if the
// container exits first or after readyTimeout.
func (p *pod) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	for {
		if !p.running() {
			t.Fatalf("%s exited before it was ready: %v\n%s", p.name, p.err, p.log(0))
		}
		code, _ := p.probe(t, p.c.ctr.StartupProbe)
		if code == 0 {
			// What answered must be the container's own server (the
			// instance manager's child on PGDATA), not the private one it
			// starts on the side while it initialises.
			if pid := postmasterPID(p.pgdata()); pid <= 0 || parentPID(t, pid) != p.cmd.Process.Pid {
				t.Fatalf("%s: the startup probe succeeded, but the container's server is not running "+
					"(postmaster.pid in PGDATA: %d, container process: %d)\n%s", p.name, pid, p.cmd.Process.Pid, p.log(0))
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after %s (startup probe exit %d)\n%s", p.name, readyTimeout, code, p.log(0))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop stops the container as the kubelet does: its preStop hook if it has
// one, then SIGTERM to its process, and waits for a clean exit within the
// grace period.
func (p *pod) stop(t *testing.T) {
	t.Helper()
	if !p.running() {
		t.Fatalf("%s is not running", p.name)
	}
	grace := 30 * time.Second
	if s := p.c.podSpec.TerminationGracePeriodSeconds; s != nil {
		grace = time.Duration(*s) * time.Second
	}
	if p.c.ctr.Lifecycle != nil && p.c.ctr.Lifecycle.PreStop != nil {
		if code, out := p.exec(t, p.c.ctr.Lifecycle.PreStop.Exec.Command, grace); code != 0 {
			t.Fatalf("%s: preStop exited %d:\n%s", p.name, code, out)
		}
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		t.Fatalf("%s: the container still runs %s after SIGTERM", p.name, grace)
	}
	if p.err != nil {
		t.Fatalf("%s: the container exited with %v after SIGTERM, want a clean exit\n%s", p.name, p.err, p.log(0))
	}
}

// logSize is where the container log ends now: an offset for log.
func (p *pod) logSize() int64 { return logFile(p.logPath).size() }

// log is the container log from offset on.
func (p *pod) log(offset int64) string { return logFile(p.logPath).since(offset) }

// logFile is the path of a container's log.
type logFile string

func (f logFile) size() int64 {
	fi, err := os.Stat(string(f))
	if err != nil {
		return 0
	}
	return fi.Size()
}

func (f logFile) since(offset int64) string {
	b, err := os.ReadFile(string(f))
	if err != nil || offset > int64(len(b)) {
		return ""
	}
	return string(b[offset:])
}

// postmasterPID reads the PID of the server running on dir, 0 if none.
func postmasterPID(dir string) int {
	f, err := os.Open(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	if !s.Scan() {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(s.Text()))
	return pid
}

// reapLeftovers kills whatever still runs from this cluster: any process
// whose working directory is below the base directory (postgres and its
// children chdir into PGDATA, the instance manager runs in the pod
// directory), such as a server left by an interrupted bootstrap. Each one
// is a test failure: nothing may outlive the test.
func (c *cluster) reapLeftovers() {
	for _, p := range c.pods {
		p.kill()
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, proc := range procs {
		cwd, err := os.Readlink(filepath.Join(proc, "cwd"))
		if err != nil || (cwd != c.base && !strings.HasPrefix(cwd, c.base+"/")) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(proc))
		cmdline, _ := os.ReadFile(filepath.Join(proc, "cmdline"))
		c.t.Errorf("leaked process %d in %s: %s", pid, cwd, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// freePorts returns n distinct ports free on every address of this
// machine, each handed out once per run. They come from below the
// kernel's ephemeral range (ip_local_port_range) when it leaves room: a
// port the kernel gives for ":0" may be given again to any other listener
// between this check and the server's own bind, as a restored server once
// found ("could not bind IPv4 address "0.0.0.0": Address already in use",
// and its clients then reached someone's HTTP server).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	low := ephemeralLow()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		port := 0
		if low > portsFrom+1000 {
			nextPort.CompareAndSwap(0, int32(portsFrom+rand.IntN(low-portsFrom-1000)))
			if port = int(nextPort.Add(1)); port >= low {
				nextPort.Store(portsFrom)
				continue
			}
		}
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if err != nil {
			if tries > 1000 {
				t.Fatal(err)
			}
			continue
		}
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
		_ = l.Close()
	}
	return ports
}

// portsFrom is the lowest port freePorts hands out; nextPort the last.
const portsFrom = 20000

var nextPort atomic.Int32

// ephemeralLow is the lowest port the kernel picks for ":0" (32768 by
// default); 0 when unknown.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	low, _ := strconv.Atoi(strings.Fields(string(b) + " 0")[0])
	return low
}

// writeOwned writes a file only the postgres OS user may read, as libpq
// wants a private key.
func writeOwned(t *testing.T, c *cluster, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, c.user.uid, c.user.gid); err != nil {
		t.Fatal(err)
	}
}

// logsOnFailure shows every pod's container log if t fails.
func (c *cluster) logsOnFailure(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			showLogs(t, c.pods)
		}
	})
}

// showLogs writes the pods' whole container logs to files kept after the
// test, and shows their last lines: the test's own failure messages, above
// them, stay in view in the tail of a long output (as CI reports it).
func showLogs(t *testing.T, pods []*pod) {
	const tail = 15
	dir, err := os.MkdirTemp("", "mydb-logs-")
	if err != nil {
		t.Log(err)
		return
	}
	for _, p := range pods {
		log := p.log(0)
		path := filepath.Join(dir, p.name+".log")
		if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
			t.Log(err)
		}
		lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
		t.Logf("container log of %s, last %d lines (all of it in %s):\n%s", p.name, tail, path,
			strings.Join(lines[max(0, len(lines)-tail):], "\n"))
	}
}

// waitLogged waits until p's container log, from offset off, holds text.
func waitLogged(t *testing.T, p *pod, off int64, text string) {
	t.Helper()
	eventually(t, 10*time.Second, p.name+" logging "+text, func() (bool, string) {
		return strings.Contains(p.log(off), text), ""
	})
}

// cutOff cuts p off from others both ways, as a network partition does:
// their connections to its server and failsafe endpoint, and its requests
// to their failsafe endpoints (restore with reconnect).
func (p *pod) cutOff(others []*pod) {
	p.peers.Cut()
	p.failsafe.Cut()
	for _, o := range others {
		o.failsafe.Cut()
	}
}

// reconnect undoes cutOff.
func (p *pod) reconnect(others []*pod) {
	p.peers.Restore()
	p.failsafe.Restore()
	for _, o := range others {
		o.failsafe.Restore()
	}
}

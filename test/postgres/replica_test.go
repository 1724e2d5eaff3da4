package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/age"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/backup"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
)

// TestReplicaDatabase: a replica MyDatabase, in another namespace of the
// same API server (standing for another Kubernetes cluster: the two share
// nothing but the object store), follows its source through the source's
// WAL archive. Its designated primary restores the source's base backup
// and replays what the source archives, its replica streams from it,
// neither takes a write, and status.replica says where the replay stands.
// Then spec.replica.enabled: false promotes it in place: it takes writes
// on a timeline of its own, archives to its own path and never to its
// source's, and its replica follows it.
func TestReplicaDatabase(t *testing.T) {
	t.Parallel() // doc.go: which tests run side by side
	// The source's archive is encrypted: the replica reads it with the
	// key in spec.replica.source.encryption.
	key := ageIdentity(t)
	src := startReplicaSource(t, 1, key)
	c, source, store, app, password, db := src.c, src.pod, src.store, src.app, src.password, src.db
	insert, ctx := src.insert, context.Background()
	archiveNow(t, c, source)

	replicaOf := *src.archive
	rdb := newDatabase(c.srv.major, nil)
	rdb.Name, rdb.Namespace = "shop-dr", "dr"
	rdb.Spec.Backup = &databasev1alpha1.BackupSpec{ObjectStore: objectStoreOf(store)}
	rdb.Spec.Replica = &databasev1alpha1.ReplicaSpec{Enabled: true, Source: databasev1alpha1.ReplicaSource{ObjectStore: &replicaOf,
		Encryption: &databasev1alpha1.BackupEncryption{Secret: "backup-key"}}}
	const replicaPassword = "password-of-the-replica"
	rc := newClusterOn(t, c.api, c.srv, rdb, specs.CredentialsSecret(rdb, replicaPassword), storeSecret(store, rdb.Namespace),
		keySecret(rdb.Namespace, "backup-key", key))
	pods := rc.startPods(t, 2)
	rc.op = rc.startOperator(t)
	designated, standby := pods[0], pods[1]
	logContains(t, designated.log(0), "as a standby", "postgres started as the designated primary")
	has := func(want int) { t.Helper(); rc.hasRows(t, pods, want) }
	has(200)
	// The data is the source's, its roles' passwords too: the replica's
	// own password is set only once it is promoted.
	rapp := tcp(designated.port, db.Spec.User, db.Spec.DatabaseName)
	rc.refused(t, rapp, password, "read-only transaction", "INSERT INTO orders (id) VALUES (1000)")
	rc.refused(t, tcp(standby.port, db.Spec.User, db.Spec.DatabaseName), password, "read-only transaction", "INSERT INTO orders (id) VALUES (1000)")
	// The standby's clone already holds the rows: it may start streaming
	// a moment after has(200) passes.
	eventually(t, 30*time.Second, "the designated primary's standbys", func() (bool, string) {
		got := rc.query(t, designated.socket("postgres", "postgres"), "",
			"SELECT application_name || ' ' || state FROM pg_stat_replication ORDER BY 1")
		return got == standby.name+" streaming", fmt.Sprintf("%q, want %s streaming (no fence: it confirms no commit)", got, standby.name)
	})

	// What the source writes and archives reaches both.
	insert(c, app, password, 201, 300)
	last := archiveNow(t, c, source)
	has(300)
	eventually(t, 30*time.Second, "status.replica", func() (bool, string) {
		r := rc.database(t).Status.Replica
		if r == nil {
			return false, "none"
		}
		return r.Source == store.Bucket+"/"+replicaOf.Path && r.DesignatedPrimary == designated.name && r.LastFetchedWAL >= last &&
			r.LastReplayedLSN != "" && r.LastReplayedTime != nil, fmt.Sprintf("%+v", *r)
	})

	// The designated primary stops: the replica elected in its place
	// restarts as the designated primary, never promotes (that would make
	// a second writer beside the source), and replays on from the archive;
	// the old one comes back as its replica.
	designated.stop(t)
	designated, standby = standby, designated
	eventually(t, time.Minute, designated.name+" the designated primary", func() (bool, string) {
		r, err := rc.reportOf(designated)
		lease, lerr := rc.readLease()
		if err != nil || lerr != nil {
			return false, fmt.Sprint(err, lerr)
		}
		holder := ptr.Deref(lease.Spec.HolderIdentity, "")
		return holder == designated.name && r.Ready && r.Replica != nil, fmt.Sprintf("holder %q, report %+v", holder, r)
	})
	if got := rc.query(t, designated.socket("postgres", "postgres"), "", "SELECT pg_is_in_recovery()"); got != "t" {
		t.Fatalf("%s, elected, is out of recovery: %s", designated.name, got)
	}
	standby.start(t)
	standby.waitReady(t)
	insert(c, app, password, 301, 350)
	archiveNow(t, c, source)
	has(350)
	rapp = tcp(designated.port, db.Spec.User, db.Spec.DatabaseName)

	// A base backup of a replica is refused, in plain words: its source
	// takes them.
	refused := &databasev1alpha1.MyDatabaseBackup{ObjectMeta: metav1.ObjectMeta{Name: "of-the-replica", Namespace: rdb.Namespace},
		Spec: databasev1alpha1.MyDatabaseBackupSpec{Database: rdb.Name}}
	if err := rc.api.Client.Create(ctx, refused); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the replica's backup refused", func() (bool, string) {
		if err := rc.api.Client.Get(ctx, client.ObjectKeyFromObject(refused), refused); err != nil {
			return false, err.Error()
		}
		return refused.Status.Phase == databasev1alpha1.BackupFailed && strings.Contains(refused.Status.Message, "is a replica of backups/prod/shop"),
			fmt.Sprintf("%s: %s", refused.Status.Phase, refused.Status.Message)
	})

	// Promotion.
	sourceTimeline := c.query(t, source.socket("postgres", "postgres"), "", "SELECT timeline_id FROM pg_control_checkpoint()")
	rc.updateDatabase(t, func(d *databasev1alpha1.MyDatabase) { d.Spec.Replica.Enabled = false })
	rc.eventSaid(t, rdb, "Promoted")
	rsu := designated.socket("postgres", db.Spec.DatabaseName)
	if got := rc.query(t, rsu, "", "SELECT pg_is_in_recovery()"); got != "f" {
		t.Fatalf("%s in recovery after the Promoted event: %s", designated.name, got)
	}
	if st := rc.database(t).Status.Replica; st != nil {
		t.Errorf("status.replica after the promotion: %+v", *st)
	}
	timeline, _ := strconv.Atoi(rc.query(t, rsu, "", "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int"))
	if from, _ := strconv.Atoi(sourceTimeline); timeline <= from {
		t.Errorf("the promoted replica runs on timeline %d, the source on %d: want a new one", timeline, from)
	}
	insert(rc, rsu, "", 1001, 1100)
	has(450)
	// Its own password, once the promoted primary sets it.
	eventually(t, time.Minute, "the replica's own password accepted", func() (bool, string) {
		out, err := rc.psql(rapp, replicaPassword, "SELECT 1")
		return err == nil, out
	})

	// Archived to its own path, never to the source's.
	own, theirs := openArchive(t, store, specs.BackupPath(rdb)), openArchive(t, store, replicaOf.Path)
	segment := archiveNow(t, rc, designated)
	history := fmt.Sprintf("%08X.history", timeline)
	for _, name := range []string{segment, history} {
		if _, err := own.ArchivedSize(ctx, name); err != nil {
			t.Errorf("%s in the promoted replica's archive %s: %v", name, specs.BackupPath(rdb), err)
		}
		if _, err := theirs.ArchivedSize(ctx, name); !errors.Is(err, backup.ErrNotFound) {
			t.Errorf("%s in the source's archive %s: %v, want not found", name, replicaOf.Path, err)
		}
	}
	// The source goes on alone.
	insert(c, app, password, 351, 360)
	if got := c.query(t, app, password, "SELECT count(*) FROM orders"); got != "360" {
		t.Errorf("the source has %s rows, want 360", got)
	}
}

// replicaSource is the source MyDatabase of the replica tests: its
// servers (the first the primary), archiving, with a base backup and the table orders holding ids 1 to 200.
type replicaSource struct {
	c        *cluster
	db       *databasev1alpha1.MyDatabase
	pod      *pod   // the primary
	pods     []*pod // all of its servers
	store    *testenv.ObjectStore
	archive  *databasev1alpha1.ObjectStore // its spec.backup store, path included
	app      string                        // conninfo of the application's role
	password string
	// insert adds the ids from to to in the orders table of c at conninfo.
	insert func(c *cluster, conninfo, password string, from, to int)
}

func startReplicaSource(t *testing.T, servers int, key *age.X25519Identity) *replicaSource {
	t.Helper()
	found := findServers(t)
	srv := found[len(found)-1]
	store := startStore(t, t.TempDir())
	db := newDatabase(srv.major, nil)
	db.Spec.Replicas = new(int32(servers))
	db.Spec.Backup = &databasev1alpha1.BackupSpec{ObjectStore: objectStoreOf(store)}
	s := &replicaSource{db: db, store: store, password: "password-of-the-source"}
	secrets := []*corev1.Secret{specs.CredentialsSecret(db, s.password), storeSecret(store, db.Namespace)}
	if key != nil {
		db.Spec.Backup.Encryption = &databasev1alpha1.BackupEncryption{Secret: "backup-key"}
		secrets = append(secrets, keySecret(db.Namespace, "backup-key", key))
	}
	s.c = newCluster(t, srv, db, secrets...)
	s.pods = s.c.startPods(t, servers)
	s.pod = s.pods[0]
	s.app = tcp(s.pod.port, db.Spec.User, db.Spec.DatabaseName)
	s.insert = func(c *cluster, conninfo, password string, from, to int) {
		c.query(t, conninfo, password, fmt.Sprintf("INSERT INTO orders (id) SELECT generate_series(%d, %d)", from, to))
	}
	s.c.query(t, s.app, s.password, "CREATE TABLE orders (id int PRIMARY KEY)")
	s.insert(s.c, s.app, s.password, 1, 100)
	takeBackup(t, s.c, s.pod)
	s.insert(s.c, s.app, s.password, 101, 200)
	archive := objectStoreOf(store)
	archive.Path = specs.BackupPath(db)
	s.archive = &archive
	return s
}

// startSiteB starts the MyDatabase shop-b of one server in namespace
// site-b, a replica of src through source, which archives to its own path
// once promoted, and the operators of both; it returns once B holds src's
// 200 rows.
func (src *replicaSource) startSiteB(t *testing.T, source databasev1alpha1.ReplicaSource) (*cluster, *pod) {
	t.Helper()
	c, store := src.c, src.store
	bdb := newDatabase(c.srv.major, nil)
	bdb.Name, bdb.Namespace = "shop-b", "site-b"
	bdb.Spec.Replicas = new(int32(1))
	bdb.Spec.Backup = &databasev1alpha1.BackupSpec{ObjectStore: objectStoreOf(store)}
	bdb.Spec.Replica = &databasev1alpha1.ReplicaSpec{Enabled: true, Source: source}
	bc := newClusterOn(t, c.api, c.srv, bdb, specs.CredentialsSecret(bdb, "password-of-b"), storeSecret(store, bdb.Namespace),
		sourceCertCopy(c, bdb.Namespace))
	b := bc.startPods(t, 1)[0]
	bc.op = bc.startOperator(t)
	c.op = c.startOperator(t)
	bc.hasRows(t, []*pod{b}, 200)
	return bc, b
}

// learnSiteB gives src's MyDatabase A the source B (bc, its server b): its
// archive, and its primary when streaming, with B's replication
// certificate copied. spec.replica is added with enabled false, so A
// takes writes on; its pods restart with the source, replicas first, as
// a rollout does. It returns A's primary then.
func (src *replicaSource) learnSiteB(t *testing.T, bc *cluster, b *pod, streaming bool) *pod {
	t.Helper()
	c := src.c
	source := databasev1alpha1.ReplicaSource{ObjectStore: new(objectStoreOf(src.store))}
	source.ObjectStore.Path = specs.BackupPath(bc.db)
	if streaming {
		c.addSecret(t, sourceCertCopy(bc, c.db.Namespace))
		source.Streaming = streamingFrom(b)
	}
	c.updateDatabase(t, func(d *databasev1alpha1.MyDatabase) { d.Spec.Replica = &databasev1alpha1.ReplicaSpec{Source: source} })
	for _, p := range slices.Backward(src.pods) {
		p.learnSource(t)
	}
	return c.waitPrimary(t, src.pods, time.Minute)
}

// hasRows waits until each of pods holds want rows in orders.
func (c *cluster) hasRows(t *testing.T, pods []*pod, want int) {
	t.Helper()
	for _, p := range pods {
		eventually(t, time.Minute, fmt.Sprintf("%d rows on %s", want, p.name), func() (bool, string) {
			out, err := c.psql(p.socket("postgres", c.db.Spec.DatabaseName), "", "SELECT count(*) FROM orders")
			return err == nil && out == strconv.Itoa(want), out
		})
	}
}

// TestReplicaDatabaseStreaming: a replica MyDatabase that streams from its
// source's primary, with the source's archive as a fallback: the rows
// arrive as they commit, no WAL switch needed; with the stream cut it
// replays the archive, and streams again once the stream is back;
// status.replica says which, with the lag in bytes. A second replica
// streams only: it clones the source's primary (no archive at all).
func TestReplicaDatabaseStreaming(t *testing.T) {
	t.Parallel() // doc.go: which tests run side by side
	src := startReplicaSource(t, 1, nil)
	c, store, db := src.c, src.store, src.db
	insert := func(from, to int) { src.insert(c, src.app, src.password, from, to) }
	// The link between the two: a proxy the test can cut.
	link, err := testenv.StartProxy(testenv.To(fmt.Sprintf("127.0.0.1:%d", src.pod.port)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(link.Close)

	replica := func(name string, archive *databasev1alpha1.ObjectStore) (*cluster, *pod) {
		rdb := newDatabase(c.srv.major, nil)
		rdb.Name, rdb.Namespace = name, name
		rdb.Spec.Replicas = new(int32(1))
		rdb.Spec.Replica = &databasev1alpha1.ReplicaSpec{Enabled: true, Source: databasev1alpha1.ReplicaSource{ObjectStore: archive,
			Streaming: &databasev1alpha1.ReplicaStreaming{Host: "127.0.0.1", Port: int32(link.Port()), SecretName: sourceCertName}}}
		rc := newClusterOn(t, c.api, c.srv, rdb, specs.CredentialsSecret(rdb, "unused"), storeSecret(store, rdb.Namespace), sourceCertCopy(c, rdb.Namespace))
		p := rc.startPods(t, 1)[0]
		rc.op = rc.startOperator(t)
		return rc, p
	}
	status := func(rc *cluster, what string, ok func(r databasev1alpha1.ReplicaStatus) bool) {
		t.Helper()
		eventually(t, time.Minute, rc.db.Name+": status.replica "+what, func() (bool, string) {
			r := rc.database(t).Status.Replica
			return r != nil && ok(*r), fmt.Sprintf("%+v", r)
		})
	}

	both, bothPod := replica("both", src.archive)
	bothPods := []*pod{bothPod}
	both.hasRows(t, bothPods, 200)
	status(both, "streaming", func(r databasev1alpha1.ReplicaStatus) bool {
		return r.Streaming && r.LagBytes != nil && r.Source == store.Bucket+"/"+src.archive.Path+" and "+link.Addr()
	})
	insert(201, 250) // no WAL switch: it streams
	both.hasRows(t, bothPods, 250)
	if got := c.query(t, src.pod.socket("postgres", "postgres"), "", "SELECT application_name FROM pg_stat_replication WHERE application_name LIKE 'mydatabase_replica %'"); got != "mydatabase_replica "+bothPod.name {
		t.Errorf("the source's standbys from replicas: %q", got)
	}

	// The stream cut: the archive, segment by segment.
	link.Cut()
	status(both, "not streaming", func(r databasev1alpha1.ReplicaStatus) bool { return !r.Streaming })
	insert(251, 300)
	archiveNow(t, c, src.pod)
	both.hasRows(t, bothPods, 300)
	// Back: streaming again.
	link.Restore()
	status(both, "streaming again", func(r databasev1alpha1.ReplicaStatus) bool { return r.Streaming })
	insert(301, 320)
	both.hasRows(t, bothPods, 320)
	both.refused(t, tcp(bothPod.port, db.Spec.User, db.Spec.DatabaseName), src.password, "read-only transaction", "INSERT INTO orders (id) VALUES (1000)")

	// Streaming only: a clone of the source's primary.
	only, onlyPod := replica("stream-only", nil)
	logContains(t, onlyPod.log(0), "cloning the source's primary at "+link.Addr(), "postgres started as the designated primary")
	only.hasRows(t, []*pod{onlyPod}, 320)
	insert(321, 330)
	only.hasRows(t, []*pod{onlyPod}, 330)
	status(only, "streaming", func(r databasev1alpha1.ReplicaStatus) bool { return r.Streaming && r.LastFetchedWAL == "" })
}

// TestReplicaSwitchover: a planned switchover between two MyDatabases
// under a write loop, no acknowledged write lost. The source is demoted
// (spec.replica added with enabled false, its pod restarted to learn the
// new source, as a rollout does, then enabled true): its primary stops,
// its WAL ends at a checkpoint whose position is its demotion token, and
// it follows the replica's archive. The replica is promoted with that
// token: it promotes only once it has replayed the source's WAL past it.
// Every write the source acknowledged is on the new primary, and the old
// source replays what the new one writes from then on. Then back again,
// the same way.
func TestReplicaSwitchover(t *testing.T) {
	t.Parallel() // doc.go: which tests run side by side
	src := startReplicaSource(t, 1, nil)
	c, a := src.c, src.pod
	archiveNow(t, c, a)

	// B: a replica of A through A's archive and its primary.
	bc, b := src.startSiteB(t, databasev1alpha1.ReplicaSource{ObjectStore: src.archive, Streaming: streamingFrom(a)})
	// A learns B as its source, without following it yet.
	src.learnSiteB(t, bc, b, true)

	// A to B, then back again.
	siteA := &site{c: c, p: a, password: src.password}
	siteB := &site{c: bc, p: b, password: "password-of-b"}
	plannedSwitchover(t, siteA, siteB, 10000)
	plannedSwitchover(t, siteB, siteA, 20000)
}

// learnSource restarts p with the source its MyDatabase's spec.replica
// now names in its environment, and the streaming source's Secret as a
// volume, as the rollout of a StatefulSet does (the harness has no
// StatefulSet controller).
func (p *pod) learnSource(t *testing.T) {
	t.Helper()
	c := p.c
	for _, e := range specs.Env(c.database(t)) {
		switch {
		case !strings.HasPrefix(*e.Name, contract.ReplicaStore):
		case *e.Name == contract.EnvReplicaStreamTLSDir:
			dir := filepath.Join(p.dir, "replica-source")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			p.writeSecret(t, dir, c.secrets[sourceCertName], &corev1ac.SecretVolumeSourceApplyConfiguration{})
			p.setEnv(*e.Name, dir)
		case e.Value != nil:
			p.setEnv(*e.Name, *e.Value)
		default:
			ref := e.ValueFrom.SecretKeyRef
			p.setEnv(*e.Name, string(c.secrets[*ref.Name].Data[*ref.Key]))
		}
	}
	p.stop(t)
	p.start(t)
	p.waitReady(t)
}

// sourceCertName names the source's replication certificate in a replica
// MyDatabase's namespace.
const sourceCertName = "source-replication"

// sourceCertCopy is the replication certificate of source (its client
// certificate and CA), copied into namespace as a person would.
func sourceCertCopy(source *cluster, namespace string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: sourceCertName, Namespace: namespace},
		Data: source.secrets[specs.ReplicationCertSecretName(source.db)].Data}
}

// streamingFrom is a stream from p's server, with sourceCertCopy.
func streamingFrom(p *pod) *databasev1alpha1.ReplicaStreaming {
	return &databasev1alpha1.ReplicaStreaming{Host: "127.0.0.1", Port: int32(p.port), SecretName: sourceCertName}
}

// site is one side of a planned switchover: a MyDatabase of one server, and
// the password of its application role once it takes writes.
type site struct {
	c        *cluster
	p        *pod
	password string
}

// plannedSwitchover moves the primary role from, which takes writes, to
// to, a replica of it that knows from as its source, under a write loop on
// from (ids from firstID up): from is demoted and gives its token, to is
// promoted with it. Every write from acknowledged is on to, and from
// replays what to writes from then on.
func plannedSwitchover(t *testing.T, from, to *site, firstID int) {
	t.Helper()
	user, dbname := from.c.db.Spec.User, from.c.db.Spec.DatabaseName
	app := tcp(from.p.port, user, dbname)
	var acked []int
	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for id := firstID; ; id++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := from.c.psql(app, from.password, fmt.Sprintf("INSERT INTO orders (id) VALUES (%d)", id)); err == nil {
				mu.Lock()
				acked = append(acked, id)
				mu.Unlock()
			}
		}
	})
	time.Sleep(2 * time.Second)

	from.c.updateDatabase(t, func(d *databasev1alpha1.MyDatabase) { d.Spec.Replica.Enabled = true })
	var token string
	eventually(t, time.Minute, from.c.db.Name+"'s demotion token", func() (bool, string) {
		r := from.c.database(t).Status.Replica
		if r == nil {
			return false, "no status.replica"
		}
		token = r.DemotionToken
		return token != "", fmt.Sprintf("%+v", *r)
	})
	from.c.eventSaid(t, from.c.db, "Demoted")
	if got := from.c.query(t, from.p.socket("postgres", "postgres"), "", "SELECT pg_is_in_recovery()"); got != "t" {
		t.Fatalf("%s after its demotion: in recovery %s", from.c.db.Name, got)
	}
	time.Sleep(time.Second) // writes now fail: none is acknowledged
	close(stop)
	wg.Wait()
	t.Logf("%s demoted at %s, %d writes acknowledged before", from.c.db.Name, token, len(acked))
	if len(acked) == 0 {
		t.Fatal("no write acknowledged")
	}

	// The promotion takes the demoted side's last WAL from its archive:
	// the segment the demotion archived (the archiver leaves the last,
	// incomplete one).
	to.c.updateDatabase(t, func(d *databasev1alpha1.MyDatabase) {
		d.Spec.Replica.Enabled, d.Spec.Replica.PromotionToken = false, token
	})
	eventually(t, time.Minute, to.c.db.Name+" promoted", func() (bool, string) {
		out, err := to.c.psql(to.p.socket("postgres", "postgres"), "", "SELECT pg_is_in_recovery()")
		return err == nil && out == "f" && to.c.database(t).Status.Replica == nil, out
	})
	to.c.eventSaid(t, to.c.db, "Promoted")
	su := to.p.socket("postgres", dbname)
	missing := to.c.query(t, su, "", fmt.Sprintf("SELECT count(*) FROM unnest(ARRAY%v::int[]) AS a(id) WHERE id NOT IN (SELECT id FROM orders)",
		strings.ReplaceAll(fmt.Sprint(acked), " ", ",")))
	if missing != "0" {
		t.Fatalf("%s of the %d writes %s acknowledged are missing on %s", missing, len(acked), from.c.db.Name, to.c.db.Name)
	}

	// The demoted side follows: what the new primary writes and archives
	// reaches it, and its token is gone once it follows the new timeline.
	mark := firstID + 9999
	to.c.query(t, su, "", fmt.Sprintf("INSERT INTO orders (id) VALUES (%d)", mark))
	archiveNow(t, to.c, to.p)
	eventually(t, time.Minute, fmt.Sprintf("%s's write on %s", to.c.db.Name, from.c.db.Name), func() (bool, string) {
		out, err := from.c.psql(from.p.socket("postgres", dbname), "", fmt.Sprintf("SELECT count(*) FROM orders WHERE id = %d", mark))
		return err == nil && out == "1", out
	})
	eventually(t, 30*time.Second, from.c.db.Name+"'s token gone once it follows the new timeline", func() (bool, string) {
		r := from.c.database(t).Status.Replica
		return r != nil && r.DemotionToken == "", fmt.Sprintf("%+v", r)
	})
	// And it streams from the new primary.
	eventually(t, time.Minute, from.c.db.Name+" streams from "+to.c.db.Name, func() (bool, string) {
		r := from.c.database(t).Status.Replica
		return r != nil && r.Streaming, fmt.Sprintf("%+v", r)
	})
	if got := to.c.query(t, to.p.socket("postgres", "postgres"), "",
		"SELECT application_name || ' ' || state FROM pg_stat_replication WHERE application_name LIKE 'mydatabase_replica %'"); got != "mydatabase_replica "+from.p.name+" streaming" {
		t.Errorf("%s's standbys from replica MyDatabases: %q, want %s's designated primary streaming", to.c.db.Name, got, from.c.db.Name)
	}
}

// TestReplicaOldSourceRejoins: an unplanned switchover, then the old source
// back. Cut off from the replica MyDatabase B, the source A takes writes B
// never receives (A's replica gets them); B is promoted without a demotion
// token and takes writes of its own. A, demoted to follow B, is past the
// point where B's timeline forked from it: with a stream, its designated
// primary is rewound to B's history with pg_rewind; through the archive
// only, it restores B's latest base backup instead. Its replica, whose data
// holds A's writes too, is cloned again. Both then hold B's rows and none
// of A's writes past the fork, which stay in A's own archive.
func TestReplicaOldSourceRejoins(t *testing.T) {
	t.Parallel() // doc.go: which tests run side by side
	t.Run("streaming", func(t *testing.T) { oldSourceRejoins(t, true) })
	t.Run("archive only", func(t *testing.T) { oldSourceRejoins(t, false) })
}

func oldSourceRejoins(t *testing.T, streaming bool) {
	src := startReplicaSource(t, 2, nil)
	c, store := src.c, src.store
	archiveNow(t, c, src.pod)
	// The link from B to A: a proxy the test can cut.
	link, err := testenv.StartProxy(testenv.To(fmt.Sprintf("127.0.0.1:%d", src.pod.port)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(link.Close)

	aSource := databasev1alpha1.ReplicaSource{ObjectStore: src.archive}
	if streaming {
		aSource.Streaming = &databasev1alpha1.ReplicaStreaming{Host: "127.0.0.1", Port: int32(link.Port()), SecretName: sourceCertName}
	}
	bc, b := src.startSiteB(t, aSource)
	bdb := bc.db
	// A learns B as its source beforehand.
	primary := src.learnSiteB(t, bc, b, streaming)
	replica := without(src.pods, primary)[0]
	app := tcp(primary.port, c.db.Spec.User, c.db.Spec.DatabaseName)
	src.insert(c, app, src.password, 201, 210)
	archiveNow(t, c, primary)
	bc.hasRows(t, []*pod{b}, 210)

	// Cut off: what A writes now reaches its replica, never B (the link
	// cut, the segment not archived).
	link.Cut()
	src.insert(c, app, src.password, 211, 250)
	forkedWAL := c.query(t, primary.socket("postgres", "postgres"), "", "SELECT pg_walfile_name(pg_current_wal_lsn())")
	c.hasRows(t, []*pod{replica}, 250)
	bc.updateDatabase(t, func(d *databasev1alpha1.MyDatabase) { d.Spec.Replica.Enabled = false })
	eventually(t, time.Minute, "B promoted", func() (bool, string) {
		out, err := bc.psql(b.socket("postgres", "postgres"), "", "SELECT pg_is_in_recovery()")
		return err == nil && out == "f", out
	})
	bsu := b.socket("postgres", bdb.Spec.DatabaseName)
	if got := bc.query(t, bsu, "", "SELECT count(*) FROM orders"); got != "210" {
		t.Fatalf("B promoted with %s rows, want the 210 it had before it was cut off", got)
	}
	bc.query(t, bsu, "", "INSERT INTO orders (id) SELECT generate_series(1001, 1010)")
	if !streaming {
		takeBackup(t, bc, b)
		archiveNow(t, bc, b)
	}

	// A back, demoted to follow B.
	offsets := map[*pod]int64{primary: logFile(primary.logPath).size(), replica: logFile(replica.logPath).size()}
	c.updateDatabase(t, func(d *databasev1alpha1.MyDatabase) { d.Spec.Replica.Enabled = true })
	for _, p := range []*pod{primary, replica} {
		// All rows, B's own, A's past the fork: B's 220, its 10, none.
		eventually(t, 2*time.Minute, "B's rows, and none of A's past the fork, on "+p.name, func() (bool, string) {
			out, err := c.psql(p.socket("postgres", c.db.Spec.DatabaseName), "",
				"SELECT count(*), count(*) FILTER (WHERE id > 1000), count(*) FILTER (WHERE id BETWEEN 211 AND 250) FROM orders")
			return err == nil && out == "220|10|0", out
		})
	}
	copied := "rewound to the source's primary"
	if !streaming {
		copied = "restoring base backup"
	}
	logContains(t, primary.log(offsets[primary]), "forked from this data's at", copied,
		"postgres started as the designated primary")
	logContains(t, replica.log(offsets[replica]), "forked its timeline before", "replica cloned")
	// Said where a person looks: status.replica.message and a Warning.
	how := map[bool]string{true: "rewound: ", false: "copied again: "}[streaming]
	eventually(t, time.Minute, "status.replica.message says what the demotion lost", func() (bool, string) {
		r := c.database(t).Status.Replica
		return r != nil && strings.HasPrefix(r.Message, how) && strings.Contains(r.Message, "it stays in this MyDatabase's own archive"),
			fmt.Sprintf("%+v", r)
	})
	c.eventSaid(t, c.db, "Rejoined")
	if streaming {
		eventually(t, time.Minute, "A streams from B", func() (bool, string) {
			r := c.database(t).Status.Replica
			return r != nil && r.Streaming, fmt.Sprintf("%+v", r)
		})
	}
	// A's writes past the fork: in A's own archive, which its demotion
	// completed.
	if _, err := openArchive(t, store, src.archive.Path).ArchivedSize(context.Background(), forkedWAL); err != nil {
		t.Errorf("%s, holding A's writes past the fork, in A's archive: %v", forkedWAL, err)
	}
	// B's data now, with B's password.
	c.refused(t, app, "password-of-b", "read-only transaction", "INSERT INTO orders (id) VALUES (2000)")
}

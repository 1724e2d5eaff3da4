package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/backup"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
)

// TestBackupAndRestore archives the WAL of a real primary into a real S3
// server (the Versity S3 Gateway), takes base backups under write load with `instance
// backup` (what `kubectl exec` runs in the database container), one on the
// primary and one on the replica (where a MyDatabaseBackup's default
// target takes it: such a backup carries the standby's standby.signal),
// and restores each of them into new MyDatabases, row by row, to every
// kind of target, before and after a failover:
//
//	rows "base"     committed before the backups
//	rows "during"   committed while they run (every acknowledged one)
//	rows "after"    committed after them, before time T1
//	rows "late"     after T1, before the restore point rp1 and LSN1
//	                the restore matrix's first column: the archive ends
//	                here, on timeline 1
//	                then the primary is killed: its replica takes over,
//	                on timeline 2, and archives from then on
//	rows "last"     on the new primary, before time T2
//	rows "later"    after T2, before the restore point rp2 and LSN2; then
//	                the table "doomed" is dropped: the second column
//
// Immediate restores stop where each backup became consistent. The end
// of the archive holds everything; each restore takes its own password,
// and a new replica clones a restore to the end and streams. Last, a
// restore whose WAL is missing from the archive is reported Stalled, with
// the missing file, by the operator.
func TestBackupAndRestore(t *testing.T) {
	t.Parallel() // doc.go: which tests run side by side
	servers := findServers(t)
	srv := servers[len(servers)-1]
	store := startStore(t, t.TempDir())

	objectStore := objectStoreOf(store)

	// The replica's slot may hold back two segments: past them it is lost,
	// and the replica stopped below must catch up from the archive.
	db := newDatabase(srv.major, map[string]string{"max_slot_wal_keep_size": "32MB"})
	db.Spec.Backup = &databasev1alpha1.BackupSpec{ObjectStore: objectStore}
	password := "password-of-the-source"
	c := newCluster(t, srv, db, specs.CredentialsSecret(db, password), storeSecret(store, db.Namespace))
	pods := c.startPods(t, 2)
	primary, replica := pods[0], pods[1]
	app := tcp(primary.port, db.Spec.User, db.Spec.DatabaseName)
	superuser := func(p *pod) string { return p.socket("postgres", "postgres") }
	c.query(t, app, password,
		"CREATE TABLE stamped (id bigserial PRIMARY KEY, phase text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())",
		"CREATE TABLE doomed (id int)", "CREATE TABLE marks (note text)")
	insert := func(phase string, n int) {
		c.query(t, app, password, fmt.Sprintf("INSERT INTO stamped (phase) SELECT '%s' FROM generate_series(1, %d)", phase, n))
	}
	now := func(p *pod) time.Time {
		at, err := time.Parse(time.RFC3339Nano, c.query(t, superuser(p), "",
			`SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`))
		if err != nil {
			t.Fatal(err)
		}
		return at
	}
	archived := func(p *pod) { archiveNow(t, c, p) }
	insert("base", 100)

	// The base backups, under write load: every insert acknowledged while
	// they run must be in a restore to the end.
	var during atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c.psql(app, password, "INSERT INTO stamped (phase) VALUES ('during')"); err == nil {
				during.Add(1)
			}
		}
	})
	takeBackup := func(p *pod) backup.Manifest { return takeBackup(t, c, p) }
	onPrimary := takeBackup(primary)
	// The primary lists the store again at once after a backup in its
	// container (one on a replica shows at its next look, minutes later).
	eventually(t, 30*time.Second, "the primary reporting its backup", func() (bool, string) {
		a := reportedArchive(t, c, primary)
		return a != nil && a.Backups != nil && a.Backups.Count == 1 && a.Backups.LastID == onPrimary.ID, fmt.Sprintf("%+v", a)
	})
	time.Sleep(time.Second) // backup IDs are by the second
	onReplica := takeBackup(replica)
	close(stop)
	wg.Wait()
	t.Logf("%d rows written during the backups", during.Load())
	if during.Load() == 0 || onPrimary.Size == 0 || onReplica.Size == 0 {
		t.Fatalf("no write during the backups (%d) or an empty backup", during.Load())
	}

	insert("after", 50)
	time.Sleep(time.Second)
	t1 := now(primary)
	time.Sleep(time.Second)
	insert("late", 30)
	// A restore point's record is not flushed by itself: the next commit
	// that writes makes it durable.
	c.query(t, superuser(primary), "", "SELECT pg_create_restore_point('rp1')")
	c.query(t, app, password, "INSERT INTO marks VALUES ('after rp1')")
	lsn1 := c.query(t, superuser(primary), "", "SELECT pg_current_wal_flush_lsn()")
	archived(primary)

	// Each restore runs on the source's API server, in a namespace of its
	// own; rows gives each phase's count, as [least, most].
	recovery := objectStore
	recovery.Path = specs.BackupPath(db)
	type rows map[string][2]int
	exactly := func(n int) [2]int { return [2]int{n, n} }
	counted := int(during.Load())
	// The writer may have had a commit acknowledged by the server and lost
	// the reply: a restore may hold one "during" row more than it counted.
	allDuring, someDuring := [2]int{counted, counted + 1}, [2]int{0, counted + 1}
	restores := 0
	restore := func(t *testing.T, from backup.Manifest, target *databasev1alpha1.RecoveryTarget, want rows, doomed, clone bool) {
		restores++
		restored := newDatabase(srv.major, nil)
		restored.Name, restored.Namespace = "restored", fmt.Sprintf("restore-%d", restores)
		restored.Spec.Bootstrap = &databasev1alpha1.BootstrapSpec{Recovery: &databasev1alpha1.RecoverySpec{
			ObjectStore: recovery, BackupID: from.ID, Target: target}}
		newPassword := fmt.Sprintf("password-of-restore-%d", restores)
		rc := newClusterOn(t, c.api, srv, restored, specs.CredentialsSecret(restored, newPassword), storeSecret(store, restored.Namespace))
		ports := freePorts(t, 2)
		p := rc.newPod(0, ports[0])
		rc.logsOnFailure(t)
		off := p.start(t)
		p.waitReady(t)
		logContains(t, p.log(off), "restoring base backup "+from.ID, "recovery reached its target and promoted")
		restoredApp := tcp(p.port, restored.Spec.User, restored.Spec.DatabaseName)
		for _, phase := range []string{"base", "during", "after", "late", "last", "later"} {
			got := rc.query(t, restoredApp, newPassword, fmt.Sprintf("SELECT count(*) FROM stamped WHERE phase = '%s'", phase))
			if n, err := strconv.Atoi(got); err != nil || n < want[phase][0] || n > want[phase][1] {
				t.Errorf("rows %q: %s, want %d to %d", phase, got, want[phase][0], want[phase][1])
			}
		}
		if target != nil && target.Time != nil {
			if got := rc.query(t, restoredApp, newPassword, fmt.Sprintf("SELECT count(*) FROM stamped WHERE at > '%s'",
				target.Time.UTC().Format(time.RFC3339Nano))); got != "0" {
				t.Errorf("%s rows committed after the target time", got)
			}
		}
		if got := rc.query(t, restoredApp, newPassword, "SELECT to_regclass('doomed') IS NOT NULL"); got != map[bool]string{true: "t", false: "f"}[doomed] {
			t.Errorf("the table dropped last: present %q, want %t", got, doomed)
		}
		// Its own password, not the source's.
		rc.refused(t, restoredApp, password, "password authentication failed", "SELECT 1")
		if r, err := rc.reportOf(p); err != nil || r.Restore != nil {
			t.Errorf("a restored primary still reports a restore: %+v (%v)", r.Restore, err)
		}
		if clone {
			replica := rc.newPod(1, ports[1])
			replica.start(t)
			replica.waitReady(t)
			waitStreaming(t, rc, p, replica)
			replica.stop(t)
		}
		p.stop(t)
	}
	immediate := rows{"base": exactly(100), "during": someDuring}
	backups := []struct {
		on string
		m  backup.Manifest
	}{{"primary", onPrimary}, {"replica", onReplica}}
	for _, b := range backups {
		for _, tc := range []struct {
			name   string
			target *databasev1alpha1.RecoveryTarget
			rows   rows
		}{
			{"end of the archive", nil, rows{"base": exactly(100), "during": allDuring, "after": exactly(50), "late": exactly(30)}},
			{"time", &databasev1alpha1.RecoveryTarget{Time: &metav1.Time{Time: t1}}, rows{"base": exactly(100), "during": allDuring, "after": exactly(50)}},
			{"LSN", &databasev1alpha1.RecoveryTarget{LSN: lsn1}, rows{"base": exactly(100), "during": allDuring, "after": exactly(50), "late": exactly(30)}},
			{"restore point", &databasev1alpha1.RecoveryTarget{Name: "rp1"}, rows{"base": exactly(100), "during": allDuring, "after": exactly(50), "late": exactly(30)}},
			{"immediate", &databasev1alpha1.RecoveryTarget{Immediate: true}, immediate},
		} {
			t.Run(fmt.Sprintf("backup on the %s, no failover since, to the %s", b.on, tc.name), func(t *testing.T) {
				restore(t, b.m, tc.target, tc.rows, true, false)
			})
		}
	}

	// A replica stopped while the primary writes more WAL than it keeps for
	// replicas (wal_keep_size, and the slot's max_slot_wal_keep_size)
	// catches up from the archive, with no clone, then streams through its
	// slot, which the primary made anew.
	replica.stop(t)
	c.query(t, app, password, "CREATE TABLE filler (n int)")
	for range 12 {
		c.query(t, app, password, "INSERT INTO filler VALUES (1)")
		c.query(t, superuser(primary), "", "SELECT pg_switch_wal()")
	}
	c.query(t, superuser(primary), "", "CHECKPOINT", "CHECKPOINT")
	archived(primary)
	needed := c.query(t, superuser(primary), "", fmt.Sprintf("SELECT pg_walfile_name('%s')", lsn1))
	if oldest := c.query(t, superuser(primary), "", "SELECT min(name) FROM pg_ls_waldir() WHERE name ~ '^[0-9A-F]{24}$'"); oldest <= needed {
		t.Fatalf("the primary still keeps %s (its oldest segment is %s): the replica would not need the archive", needed, oldest)
	}
	off := replica.start(t)
	replica.waitReady(t)
	waitLogged(t, replica, off, "restored log file")
	if strings.Contains(replica.log(off), "cloning the primary") {
		t.Errorf("the replica cloned the primary again instead of fetching the WAL from the archive:\n%s", replica.log(off))
	}

	// The primary lost: the replica takes over and archives its timeline.
	waitStreaming(t, c, primary, replica)
	waitSlotStreaming(t, c, primary, replica)
	eventually(t, 30*time.Second, "the replica caught up", func() (bool, string) {
		got := c.query(t, superuser(replica), "", fmt.Sprintf("SELECT pg_last_wal_replay_lsn() >= '%s'", lsn1))
		return got == "t", got
	})
	primary.killContainer(t)
	eventually(t, 30*time.Second, replica.name+" promoted", func() (bool, string) {
		out, err := c.psql(superuser(replica), "", "SELECT pg_is_in_recovery()")
		return err == nil && out == "f", out
	})
	app = tcp(replica.port, db.Spec.User, db.Spec.DatabaseName)
	insert("last", 20)
	time.Sleep(time.Second)
	t2 := now(replica)
	time.Sleep(time.Second)
	insert("later", 10)
	c.query(t, superuser(replica), "", "SELECT pg_create_restore_point('rp2')")
	c.query(t, app, password, "INSERT INTO marks VALUES ('after rp2')")
	lsn2 := c.query(t, superuser(replica), "", "SELECT pg_current_wal_flush_lsn()")
	c.query(t, app, password, "DROP TABLE doomed")
	// The last segment is archived once it is complete.
	last := c.query(t, superuser(replica), "", "SELECT pg_walfile_name(pg_current_wal_lsn())")
	archived(replica)
	if got := c.query(t, superuser(replica), "", "SELECT failed_count FROM pg_stat_archiver"); got != "0" {
		t.Errorf("%s archive attempts failed", got)
	}
	archive := openArchive(t, store, specs.BackupPath(db))
	if size, err := archive.ArchivedSize(context.Background(), last); err != nil || size >= 16<<20 {
		t.Errorf("the archived segment %s: %d bytes (a segment is 16 MiB; compressed, far less), err %v", last, size, err)
	}
	// The archive never overwrites: the same file again is fine (a retry
	// after a crash), other content under an archived name is refused.
	segment := filepath.Join(t.TempDir(), last)
	if err := os.WriteFile(segment, []byte("not the archived segment"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := archive.PushWAL(context.Background(), segment); err == nil || !strings.Contains(err.Error(), "already archived with other content") {
		t.Errorf("archiving other content as %s: %v, want it refused", last, err)
	}
	if err := archive.FetchWAL(context.Background(), last, segment); err != nil {
		t.Fatal(err)
	}
	if err := archive.PushWAL(context.Background(), segment); err != nil {
		t.Errorf("archiving %s again, unchanged: %v", last, err)
	}
	if _, err := archive.ArchivedSize(context.Background(), "00000002.history"); err != nil {
		t.Errorf("the new timeline's history file: %v", err)
	}
	eventually(t, 30*time.Second, "the new primary reporting "+last+" archived", func() (bool, string) {
		a := reportedArchive(t, c, replica)
		return a != nil && a.LastArchivedWAL >= last && !a.Failing(), fmt.Sprintf("%+v", a)
	})

	// The store lost: the primary reports the failure and why.
	if err := store.Stop(); err != nil {
		t.Fatal(err)
	}
	c.query(t, app, password, "INSERT INTO marks VALUES ('the store is down')")
	c.query(t, superuser(replica), "", "SELECT pg_switch_wal()")
	eventually(t, 60*time.Second, "the failure reported", func() (bool, string) {
		a := reportedArchive(t, c, replica)
		return a != nil && a.Failing() && strings.Contains(a.Error, store.Endpoint[len("http://"):]), fmt.Sprintf("%+v", a)
	})
	t.Logf("reported while the store is down: %s", reportedArchive(t, c, replica).Error)
	replica.stop(t)
	if err := store.Restart(); err != nil {
		t.Fatal(err)
	}

	beforeFork := rows{"base": exactly(100), "during": allDuring, "after": exactly(50), "late": exactly(30), "last": exactly(20)}
	for _, b := range backups {
		for _, tc := range []struct {
			name   string
			target *databasev1alpha1.RecoveryTarget
			rows   rows
			doomed bool
		}{
			{"end of the archive", nil, with(beforeFork, "later", exactly(10)), false},
			{"time", &databasev1alpha1.RecoveryTarget{Time: &metav1.Time{Time: t2}}, beforeFork, true},
			{"LSN", &databasev1alpha1.RecoveryTarget{LSN: lsn2}, with(beforeFork, "later", exactly(10)), true},
			{"restore point", &databasev1alpha1.RecoveryTarget{Name: "rp2"}, with(beforeFork, "later", exactly(10)), true},
			{"immediate", &databasev1alpha1.RecoveryTarget{Immediate: true}, immediate, true},
		} {
			t.Run(fmt.Sprintf("backup on the %s, a failover since, to the %s", b.on, tc.name), func(t *testing.T) {
				restore(t, b.m, tc.target, tc.rows, tc.doomed, tc.target == nil)
			})
		}
	}

	t.Run("a WAL file missing from the archive is reported", func(t *testing.T) {
		testMissingWAL(t, srv, c, store, recovery, onReplica)
	})
	t.Run("a target before every backup is reported", func(t *testing.T) {
		first := onPrimary.FinishedAt
		if onReplica.FinishedAt.Before(first) {
			first = onReplica.FinishedAt
		}
		target := first.Add(-time.Minute)
		restoreReported(t, srv, c, store, "restore-too-early", &databasev1alpha1.RecoverySpec{ObjectStore: recovery,
			Target: &databasev1alpha1.RecoveryTarget{Time: &metav1.Time{Time: target}}}, "before the target "+target.UTC().Format(time.RFC3339))
	})
	t.Run("a path that holds no backup is reported", func(t *testing.T) {
		elsewhere := recovery
		elsewhere.Path += "-elsewhere"
		restoreReported(t, srv, c, store, "restore-wrong-path", &databasev1alpha1.RecoverySpec{ObjectStore: elsewhere},
			"the object store holds no base backup at that bucket and path")
	})
}

// takeBackup runs `instance backup` in p's container, as a
// MyDatabaseBackup does, and returns the backup's manifest.
func takeBackup(t *testing.T, c *cluster, p *pod) backup.Manifest {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := c.run(ctx, p.env, c.instanceBin, "backup")
	if err != nil {
		t.Fatalf("instance backup on %s: %v\n%s", p.name, err, out)
	}
	var manifest backup.Manifest
	if err := json.Unmarshal([]byte(out), &manifest); err != nil {
		t.Fatalf("instance backup printed %q: %v", out, err)
	}
	t.Logf("base backup %s on %s: WAL %s to %s on timeline %d, %d bytes compressed",
		manifest.ID, p.name, manifest.BeginLSN, manifest.EndLSN, manifest.Timeline, manifest.Size)
	return manifest
}

// archiveNow switches p's WAL and waits until the segment is archived:
// the archive then ends there. It returns the segment's name.
func archiveNow(t *testing.T, c *cluster, p *pod) string {
	t.Helper()
	su := p.socket("postgres", "postgres")
	last := c.query(t, su, "", "SELECT pg_walfile_name(pg_switch_wal())")
	eventually(t, 30*time.Second, last+" archived by "+p.name, func() (bool, string) {
		got := c.query(t, su, "", "SELECT coalesce(last_archived_wal, '') || ' ' || failed_count FROM pg_stat_archiver")
		return got >= last+" ", got
	})
	return last
}

// with is r with phase counted n.
func with[M ~map[string]V, V any](r M, phase string, n V) M {
	out := maps.Clone(r)
	out[phase] = n
	return out
}

// testMissingWAL deletes from the archive the first WAL file the restore
// of base backup from needs after its own, and restores it with the
// operator running: the MyDatabase is Stalled within a minute, its message
// naming the missing file, and the first instance never serves.
func testMissingWAL(t *testing.T, srv server, source *cluster, store *testenv.ObjectStore, recovery databasev1alpha1.ObjectStore, from backup.Manifest) {
	begin, err := contract.LSN(from.BeginLSN)
	if err != nil {
		t.Fatal(err)
	}
	missing := fmt.Sprintf("%08X%08X%08X", from.Timeline, begin>>32, (begin&0xffffffff)>>24)
	s3, err := minio.New(strings.TrimPrefix(store.Endpoint, "http://"), &minio.Options{
		Creds: credentials.NewStaticV4(store.AccessKeyID, store.SecretAccessKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	key := recovery.Path + "/wal/" + missing + ".zst"
	if err := s3.RemoveObject(context.Background(), store.Bucket, key, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s3.StatObject(context.Background(), store.Bucket, key, minio.StatObjectOptions{}); err == nil {
		t.Fatalf("%s is still in the archive", key)
	}
	restoreReported(t, srv, source, store, "restore-missing-wal", &databasev1alpha1.RecoverySpec{ObjectStore: recovery, BackupID: from.ID}, missing)
}

// restoreReported restores recovery into a new MyDatabase in namespace ns
// with the operator running: the MyDatabase is Stalled (RestoreFailed)
// within a minute, its message holding says, and the first instance never
// serves. more are Secrets of ns beside the credentials'.
func restoreReported(t *testing.T, srv server, source *cluster, store *testenv.ObjectStore, ns string, recovery *databasev1alpha1.RecoverySpec, says string,
	more ...*corev1.Secret) {
	restored := newDatabase(srv.major, nil)
	restored.Name, restored.Namespace = "restored", ns
	restored.Spec.Bootstrap = &databasev1alpha1.BootstrapSpec{Recovery: recovery}
	rc := newClusterOn(t, source.api, srv, restored, append([]*corev1.Secret{specs.CredentialsSecret(restored, "password"),
		storeSecret(store, restored.Namespace)}, more...)...)
	rc.startOperator(t)
	p := rc.newPod(0, freePorts(t, 1)[0])
	rc.logsOnFailure(t)
	p.start(t)
	started := time.Now()
	var message string
	eventually(t, time.Minute, "the MyDatabase Stalled by the restore", func() (bool, string) {
		got := &databasev1alpha1.MyDatabase{}
		if err := rc.api.Client.Get(context.Background(), client.ObjectKeyFromObject(restored), got); err != nil {
			return false, err.Error()
		}
		stalled := meta.FindStatusCondition(got.Status.Conditions, databasev1alpha1.ConditionStalled)
		if stalled == nil {
			return false, fmt.Sprintf("%+v", got.Status.Conditions)
		}
		message = stalled.Message
		return stalled.Reason == databasev1alpha1.ReasonRestoreFailed && strings.Contains(message, says), message
	})
	t.Logf("Stalled after %s: %s", time.Since(started).Round(time.Second), message)
	if code, _ := p.ready(t); code == 0 {
		t.Error("the instance whose restore failed is ready")
	}
	p.stop(t)
}

// reportedArchive is what p's instance manager last reported of archiving
// (nil before its first report).
func reportedArchive(t *testing.T, c *cluster, p *pod) *contract.Archive {
	t.Helper()
	r, err := c.reportOf(p)
	if err != nil {
		return nil
	}
	return r.Archive
}

package postgres

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/backup"
	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
)

// TestBackupObjectsAndRetention: MyDatabaseBackup objects on real servers
// and a real object store, through the operator. A backup taken on the
// replica (the default) completes once the WAL it ends in is archived,
// and restores consistently; with retention keep 2, a third backup deletes the first
// and the WAL only it needed, and a restore from the oldest kept one
// still works. Archiving goes on across a switchover, with no gap, and
// catches up after the store was down for a minute.
func TestBackupObjectsAndRetention(t *testing.T) {
	t.Parallel() // doc.go: which tests run side by side
	servers := findServers(t)
	srv := servers[len(servers)-1]
	store := startStore(t, t.TempDir())
	// An idle primary completes a WAL file every 10 s here (5 minutes by
	// default): the bound on a replica's backup waiting for its last one.
	db := newDatabase(srv.major, map[string]string{"archive_timeout": "10s"})
	db.Spec.Backup = &databasev1alpha1.BackupSpec{ObjectStore: objectStoreOf(store), Retention: &databasev1alpha1.BackupRetention{Keep: ptr.To[int32](2)}}
	password := "password-of-the-source"
	c := newCluster(t, srv, db, specs.CredentialsSecret(db, password), storeSecret(store, db.Namespace))
	c.logsOnFailure(t)
	pods := c.startPods(t, 2)
	primary, replica := pods[0], pods[1]
	c.op = c.startOperator(t)
	app := tcp(primary.port, db.Spec.User, db.Spec.DatabaseName)
	c.query(t, app, password, "CREATE TABLE phases (phase text)", "INSERT INTO phases VALUES ('first')")
	waitStreaming(t, c, primary, replica)
	// The operator picks the replica by what its pod reports, which can
	// lag behind streaming.
	eventually(t, time.Minute, replica.name+" reports a ready replica", func() (bool, string) {
		r, err := c.reportOf(replica)
		if err != nil {
			return false, err.Error()
		}
		return r.Ready && r.Role == databasev1alpha1.RoleReplica, fmt.Sprintf("%+v", r)
	})

	take := func(name string, target databasev1alpha1.BackupTarget) databasev1alpha1.MyDatabaseBackupStatus {
		t.Helper()
		b := &databasev1alpha1.MyDatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: name},
			Spec: databasev1alpha1.MyDatabaseBackupSpec{Database: db.Name, Target: target}}
		if err := c.api.Client.Create(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		eventually(t, 2*time.Minute, name+" Completed", func() (bool, string) {
			if err := c.api.Client.Get(context.Background(), client.ObjectKeyFromObject(b), b); err != nil {
				return false, err.Error()
			}
			if b.Status.Phase == databasev1alpha1.BackupFailed {
				t.Fatalf("%s failed: %s", name, b.Status.Message)
			}
			return b.Status.Phase == databasev1alpha1.BackupCompleted, fmt.Sprintf("%+v", b.Status)
		})
		st := b.Status
		t.Logf("%s: backup %s on %s, %d bytes, WAL %s (%s) to %s (%s), done in %s", name, st.BackupID, st.Instance, st.Size,
			st.BeginLSN, st.BeginWAL, st.EndLSN, st.EndWAL, time.Since(start).Round(100*time.Millisecond))
		if st.BackupID == "" || st.Size == 0 || st.Timeline != 1 || st.BeginWAL == "" || st.EndWAL < st.BeginWAL ||
			st.StartedAt == nil || st.StoppedAt == nil || st.StoppedAt.Before(st.StartedAt) {
			t.Errorf("%s: incomplete status %+v", name, st)
		}
		return st
	}
	first := take("first", "")
	if first.Instance != replica.name {
		t.Errorf("the first backup was taken on %s, want the replica %s", first.Instance, replica.name)
	}
	// A backup taken on a standby restores consistently.
	if got := restoredPhases(t, srv, store, db, first.BackupID, immediate); got != "first" {
		t.Errorf("restored from the replica's backup: phases %q, want first", got)
	}
	c.query(t, app, password, "INSERT INTO phases VALUES ('second')")
	second := take("second", databasev1alpha1.BackupTargetPrimary)
	if second.Instance != primary.name {
		t.Errorf("the second backup was taken on %s, want the primary %s", second.Instance, primary.name)
	}
	c.query(t, app, password, "INSERT INTO phases VALUES ('third')")
	third := take("third", databasev1alpha1.BackupTargetPrimary)

	// Retention keeps the two newest; the primary applies it when it lists
	// the backups again (at once after a backup in its container).
	archive := openArchive(t, store, specs.BackupPath(db))
	eventually(t, time.Minute, "the first backup deleted", func() (bool, string) {
		list, err := archive.Backups(context.Background())
		if err != nil {
			return false, err.Error()
		}
		var ids []string
		for _, m := range list {
			ids = append(ids, m.ID)
		}
		return slices.Equal(ids, []string{second.BackupID, third.BackupID}), strings.Join(ids, " ")
	})
	eventually(t, time.Minute, "status.backup showing the two kept", func() (bool, string) {
		st := c.database(t).Status.Backup
		return st != nil && st.Backups == 2 && st.LastBackupID == third.BackupID, fmt.Sprintf("%+v", st)
	})
	// No WAL before the oldest kept backup's first file; all of it after.
	ctx := context.Background()
	if _, err := archive.ArchivedSize(ctx, first.BeginWAL); err == nil && first.BeginWAL < second.BeginWAL {
		t.Errorf("WAL file %s, which only the deleted backup needed, is still archived", first.BeginWAL)
	}
	for _, name := range []string{second.BeginWAL, second.EndWAL, third.BeginWAL, third.EndWAL} {
		if _, err := archive.ArchivedSize(ctx, name); err != nil {
			t.Errorf("WAL file %s, which a kept backup needs: %v", name, err)
		}
	}

	// From the oldest backup kept, to its consistent point.
	if got := restoredPhases(t, srv, store, db, second.BackupID, immediate); got != "first,second" {
		t.Errorf("restored from the oldest kept backup: phases %q, want first,second", got)
	}

	// A switchover: the new primary archives on its timeline, with no gap;
	// a restore from a backup of the old timeline reaches the end.
	c.requestSwitchover(t, replica)
	// Succeeded says the replica holds the Lease; it promotes itself a
	// moment later.
	eventually(t, 30*time.Second, replica.name+" promoted", func() (bool, string) {
		out, err := c.psql(replica.socket("postgres", "postgres"), "", "SELECT pg_is_in_recovery()")
		return err == nil && out == "f", out
	})
	app = tcp(replica.port, db.Spec.User, db.Spec.DatabaseName)
	c.query(t, app, password, "INSERT INTO phases VALUES ('fourth')")
	last := c.query(t, replica.socket("postgres", "postgres"), "", "SELECT pg_walfile_name(pg_switch_wal())")
	eventually(t, 30*time.Second, last+" archived by the new primary", func() (bool, string) {
		_, err := archive.ArchivedSize(ctx, last)
		return err == nil, fmt.Sprint(err)
	})
	if !strings.HasPrefix(last, "00000002") {
		t.Errorf("the new primary's last WAL file %s is not on timeline 2", last)
	}

	// The store down for a minute: the condition says so, the primary
	// keeps the WAL it could not archive, and archives it all once the
	// store is back; nothing is lost.
	if err := store.Stop(); err != nil {
		t.Fatal(err)
	}
	newPrimary := replica.socket("postgres", "postgres")
	for range 3 {
		c.query(t, app, password, "INSERT INTO phases VALUES ('fifth')")
		last = c.query(t, newPrimary, "", "SELECT pg_walfile_name(pg_switch_wal())")
	}
	down := time.Now()
	eventually(t, time.Minute, "ContinuousArchiving False, saying why", func() (bool, string) {
		cond := meta.FindStatusCondition(c.database(t).Status.Conditions, databasev1alpha1.ConditionContinuousArchiving)
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == databasev1alpha1.ReasonArchivingFailing &&
			strings.Contains(cond.Message, "cannot reach the store"), fmt.Sprintf("%+v", cond)
	})
	time.Sleep(time.Minute - time.Since(down))
	if got := c.query(t, newPrimary, "", "SELECT count(*) FROM pg_ls_archive_statusdir() WHERE name LIKE '%.ready'"); atoi(t, got) < 3 {
		t.Errorf("%s WAL files wait to be archived after a minute without the store, want the 3 completed meanwhile", got)
	}
	if err := store.Restart(); err != nil {
		t.Fatal(err)
	}
	c.query(t, newPrimary, "", "SELECT pg_switch_wal()") // wakes the archiver at once
	eventually(t, time.Minute, "archiving caught up, and ContinuousArchiving True", func() (bool, string) {
		cond := meta.FindStatusCondition(c.database(t).Status.Conditions, databasev1alpha1.ConditionContinuousArchiving)
		_, err := archive.ArchivedSize(ctx, last)
		return err == nil && cond != nil && cond.Status == metav1.ConditionTrue, fmt.Sprintf("%s: %v; %+v", last, err, cond)
	})
	if got := restoredPhases(t, srv, store, db, third.BackupID, nil); got != "fifth,fifth,fifth,first,fourth,second,third" {
		t.Errorf("restored to the end of the archive across the switchover and the outage: phases %q", got)
	}
}

var immediate = &databasev1alpha1.RecoveryTarget{Immediate: true}

// restoredPhases restores backup id of db into a new MyDatabase, to
// target (nil: the end of the archive), and returns its phases.
func restoredPhases(t *testing.T, srv server, s3 *testenv.ObjectStore, db *databasev1alpha1.MyDatabase, id string,
	target *databasev1alpha1.RecoveryTarget) string {
	t.Helper()
	store := objectStoreOf(s3)
	restored := newDatabase(srv.major, nil)
	restored.Name = "restored"
	store.Path = specs.BackupPath(db)
	restored.Spec.Bootstrap = &databasev1alpha1.BootstrapSpec{Recovery: &databasev1alpha1.RecoverySpec{ObjectStore: store,
		BackupID: id, Target: target}}
	// Backed up too, to a path of its own: its new timeline is archived
	// from the promotion on.
	own := store
	own.Path = "restored/" + id
	restored.Spec.Backup = &databasev1alpha1.BackupSpec{ObjectStore: own}
	password := "password-of-the-restored"
	rc := newCluster(t, srv, restored, specs.CredentialsSecret(restored, password), storeSecret(s3, restored.Namespace))
	rc.logsOnFailure(t)
	p := rc.newPod(0, freePorts(t, 1)[0])
	off := p.start(t)
	p.waitReady(t)
	defer p.stop(t)
	logContains(t, p.log(off), "restoring base backup "+id)
	archive := openArchive(t, s3, own.Path)
	history := fmt.Sprintf("%08X.history", atoi(t, rc.query(t, p.socket("postgres", "postgres"), "", "SELECT timeline_id FROM pg_control_checkpoint()")))
	eventually(t, 30*time.Second, "the restored database's "+history+" archived", func() (bool, string) {
		_, err := archive.ArchivedSize(context.Background(), history)
		return err == nil, fmt.Sprint(err)
	})
	return rc.query(t, tcp(p.port, restored.Spec.User, restored.Spec.DatabaseName), password, "SELECT string_agg(phase, ',' ORDER BY phase) FROM phases")
}

// TestObjectStoreErrors: what the archive and a backup say when the store
// refuses the credentials, lacks the bucket, or cannot be reached: the
// store's own words and what to do, which the ContinuousArchiving
// condition and a failed MyDatabaseBackup carry.
func TestObjectStoreErrors(t *testing.T) {
	t.Parallel() // doc.go: which tests run side by side
	store := startStore(t, t.TempDir())
	segment := filepath.Join(t.TempDir(), "000000010000000000000001")
	if err := os.WriteFile(segment, []byte("a segment"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := backup.Config{Endpoint: store.Endpoint, Bucket: store.Bucket, Path: "errors", AccessKeyID: store.AccessKeyID, SecretAccessKey: store.SecretAccessKey}
	for _, tc := range []struct {
		name   string
		change func(*backup.Config)
		want   []string
	}{
		{"wrong secret key", func(c *backup.Config) { c.SecretAccessKey = "not-the-key" },
			[]string{"signature", "the store refused the credentials: check ACCESS_KEY_ID and SECRET_ACCESS_KEY"}},
		{"unknown access key", func(c *backup.Config) { c.AccessKeyID = "nobody" },
			[]string{"access key", "the store refused the credentials"}},
		{"missing bucket", func(c *backup.Config) { c.Bucket = "no-such-bucket" },
			[]string{`bucket "no-such-bucket" does not exist at ` + store.Endpoint + ": create it"}},
		{"unreachable endpoint", func(c *backup.Config) { c.Endpoint = "http://127.0.0.1:" + strconv.Itoa(freePorts(t, 1)[0]) },
			[]string{"connection refused", "cannot reach the store at http://127.0.0.1:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.change(&c)
			s, err := backup.Open(c)
			if err != nil {
				t.Fatal(err)
			}
			pushErr := s.PushWAL(context.Background(), segment)
			_, listErr := s.Backups(context.Background())
			for what, err := range map[string]error{"wal-push": pushErr, "listing the backups": listErr} {
				for _, want := range tc.want {
					if err == nil || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(want)) {
						t.Errorf("%s: %v, want it to say %q", what, err, want)
					}
				}
			}
			t.Logf("wal-push: %v", pushErr)
		})
	}
	s, err := backup.Open(good)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PushWAL(context.Background(), segment); err != nil {
		t.Errorf("the right configuration: %v", err)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// startStore starts the real S3 server with its data in dir, stopped
// with the test.
func startStore(t *testing.T, dir string) *testenv.ObjectStore {
	t.Helper()
	store, err := testenv.StartObjectStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Stop() })
	return store
}

// The real S3 server's credentials Secret in namespace ns, the ObjectStore
// that names it, and a client of its objects under path.
func storeSecret(store *testenv.ObjectStore, ns string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "object-store", Namespace: ns},
		Data: map[string][]byte{specs.ObjectStoreAccessKeyIDKey: []byte(store.AccessKeyID),
			specs.ObjectStoreSecretAccessKeyKey: []byte(store.SecretAccessKey)}}
}

func objectStoreOf(store *testenv.ObjectStore) databasev1alpha1.ObjectStore {
	return databasev1alpha1.ObjectStore{Endpoint: store.Endpoint, Bucket: store.Bucket, CredentialsSecret: "object-store"}
}

func openArchive(t *testing.T, store *testenv.ObjectStore, path string) *backup.Store {
	t.Helper()
	archive, err := backup.Open(backup.Config{Endpoint: store.Endpoint, Bucket: store.Bucket, Path: path,
		AccessKeyID: store.AccessKeyID, SecretAccessKey: store.SecretAccessKey})
	if err != nil {
		t.Fatal(err)
	}
	return archive
}

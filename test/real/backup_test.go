//go:build real

package real

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
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

// nodeIP is the node's bridge address (hack/real-node.sh), which the pods
// reach: the object store listens there.
const nodeIP = "10.244.0.1"

// TestDefaultBackupAndRestoreOnRealPods takes the backup a user gets by
// default and restores it the default way, on real pods: a MyDatabase of
// two servers archiving to a real S3 server, a MyDatabaseBackup with the
// default target (taken on the replica, so it holds the replica's
// standby.signal), more writes under a write loop, the WAL archived; then
// a new MyDatabase restored with no target (the end of the archive) is
// Ready and holds every acknowledged row.
func TestDefaultBackupAndRestoreOnRealPods(t *testing.T) {
	store, objectStore := startStore(t, "s3")
	newDB := func(ns string, replicas int32) *databasev1alpha1.MyDatabase {
		return &databasev1alpha1.MyDatabase{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: dbName},
			Spec: databasev1alpha1.MyDatabaseSpec{Version: "17", Replicas: ptr.To(replicas),
				Storage: databasev1alpha1.StorageSpec{Size: resource.MustParse("1Gi")}, DatabaseName: "app", User: "app"},
		}
	}
	restricted := map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}

	src := newNamespace(t, "real-backup", restricted)
	db := newDB(src, 2)
	db.Spec.Backup = &databasev1alpha1.BackupSpec{ObjectStore: objectStore(src)}
	if err := env.c.Create(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	waitReady(t, src, 2, 4*time.Minute)
	uri, _ := credentials(t, src)
	conn := connect(t, uri)
	if _, err := conn.Exec(t.Context(), "CREATE TABLE items (id bigserial PRIMARY KEY, note text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	w := startWriter(t.Context(), uri)

	b := &databasev1alpha1.MyDatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: src, Name: "default-target"},
		Spec: databasev1alpha1.MyDatabaseBackupSpec{Database: dbName}}
	if err := env.c.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	primary := getDB(t, src).Status.CurrentPrimary
	testenv.Eventually(t, 5*time.Minute, "the MyDatabaseBackup Completed", func() error {
		if err := env.c.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		switch b.Status.Phase {
		case databasev1alpha1.BackupFailed:
			t.Fatalf("the backup failed: %s", b.Status.Message)
		case databasev1alpha1.BackupRunning:
			// A backup on a replica ends once the primary has archived the
			// WAL file it ends in: complete that file rather than wait for
			// archive_timeout.
			if strings.Contains(b.Status.Message, "to be archived") {
				if _, err := superuserSQL(src, primary, "SELECT pg_switch_wal()"); err != nil {
					return err
				}
			}
		case databasev1alpha1.BackupCompleted:
			return nil
		}
		return fmt.Errorf("phase %s: %s", b.Status.Phase, b.Status.Message)
	})
	if b.Status.Instance == primary || b.Status.Instance == "" {
		t.Fatalf("the default target took the backup on %q, the primary is %s: want a replica", b.Status.Instance, primary)
	}
	time.Sleep(2 * time.Second) // writes after the backup
	acked := w.stop()
	if acked == 0 {
		t.Fatal("no write was acknowledged")
	}
	// The last segment is archived once it is complete.
	last, err := superuserSQL(src, primary, "SELECT pg_walfile_name(pg_switch_wal())")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, last+" archived", func() error {
		st := getDB(t, src).Status.Backup
		if st == nil || st.LastArchivedWAL < last {
			return fmt.Errorf("status.backup %+v", st)
		}
		return nil
	})
	t.Logf("backup %s on %s; %d writes acknowledged (%d failed); archive ends at %s", b.Status.BackupID, b.Status.Instance,
		acked, w.unacknowledged(), last)

	dst := newNamespace(t, "real-restore", restricted)
	restored := newDB(dst, 1)
	recovery := objectStore(dst)
	recovery.Path = specs.BackupPath(db)
	restored.Spec.Bootstrap = &databasev1alpha1.BootstrapSpec{Recovery: &databasev1alpha1.RecoverySpec{ObjectStore: recovery}}
	if err := env.c.Create(t.Context(), restored); err != nil {
		t.Fatal(err)
	}
	waitReady(t, dst, 1, 4*time.Minute)
	restoredURI, _ := credentials(t, dst)
	// Ready is the pod's; kube-proxy may route the new Service a moment later.
	testenv.Eventually(t, 30*time.Second, "the restored database through its rw Service", func() error {
		conn, err := dial(t.Context(), restoredURI)
		if err == nil {
			_ = conn.Close(context.Background())
		}
		return err
	})
	// A write may have been committed with its reply lost: never fewer
	// rows than acknowledged, at most as many more as failed.
	if got := count(t, restoredURI); got < acked || got > acked+w.unacknowledged() {
		t.Fatalf("the restore holds %d rows, %d were acknowledged (%d failed)", got, acked, w.unacknowledged())
	}
	if logs := podLogs(t, dst, dbName+"-0"); !strings.Contains(logs, "restoring base backup "+b.Status.BackupID) {
		t.Errorf("the restore did not start from the backup %s:\n%s", b.Status.BackupID, logs)
	}
	replicaFollowsAndIsPromoted(t, db, primary, objectStore, newDB, conn)
	backupVerified(t, b, store, specs.BackupPath(db)+"/wal/"+last+".zst")
	for _, ns := range []string{dst, src} {
		deleteAndWait(t, ns)
	}
}

// replicaFollowsAndIsPromoted: a replica MyDatabase of source, in a
// namespace of its own (standing for another cluster: the only link is the
// object store), restores the source's base backup and replays its
// archive: every row the source holds, and the ones it writes and archives
// next; it refuses writes; promoted, it takes them, the rows all there.
// conn is a connection to the source's application database, primary the
// source's primary pod.
func replicaFollowsAndIsPromoted(t *testing.T, source *databasev1alpha1.MyDatabase, primary string, objectStore func(string) databasev1alpha1.ObjectStore,
	newDB func(string, int32) *databasev1alpha1.MyDatabase, conn *pgx.Conn) {
	t.Helper()
	ns := newNamespace(t, "real-replica", map[string]string{"pod-security.kubernetes.io/enforce": "restricted"})
	replica := newDB(ns, 1)
	archive := objectStore(ns)
	archive.Path = specs.BackupPath(source)
	replica.Spec.Replica = &databasev1alpha1.ReplicaSpec{Enabled: true, Source: databasev1alpha1.ReplicaSource{ObjectStore: &archive}}
	if err := env.c.Create(t.Context(), replica); err != nil {
		t.Fatal(err)
	}
	waitReady(t, ns, 1, 4*time.Minute)
	pod := dbName + "-0"
	sql := func(query string) (string, error) {
		return podExec(ns, pod, "psql", "--no-psqlrc", "--tuples-only", "--no-align", "--username", "postgres", "--dbname", "app", "--command", query)
	}
	var want int
	if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM items").Scan(&want); err != nil {
		t.Fatal(err)
	}
	hasRows := func(want int) {
		t.Helper()
		testenv.Eventually(t, 2*time.Minute, fmt.Sprintf("%d rows on the replica MyDatabase", want), func() error {
			got, err := sql("SELECT count(*) FROM items")
			if err == nil && strings.TrimSpace(got) != fmt.Sprint(want) {
				err = fmt.Errorf("%s rows", strings.TrimSpace(got))
			}
			return err
		})
	}
	hasRows(want)
	if _, err := conn.Exec(t.Context(), "INSERT INTO items (note) SELECT 'after the replica' FROM generate_series(1, 10)"); err != nil {
		t.Fatal(err)
	}
	if _, err := superuserSQL(source.Namespace, primary, "SELECT pg_switch_wal()"); err != nil {
		t.Fatal(err)
	}
	hasRows(want + 10)
	if out, err := sql("INSERT INTO items (note) VALUES ('refused')"); err == nil || !strings.Contains(out+err.Error(), "read-only transaction") {
		t.Fatalf("a write on the replica MyDatabase: %v: %s", err, out)
	}
	// The instance manager reports replay progress at most every
	// contract.MinInterval: status.replica catches up within it.
	testenv.Eventually(t, time.Minute, "status.replica with the designated primary and a replayed commit's time", func() error {
		if st := getDB(t, ns).Status.Replica; st == nil || st.DesignatedPrimary != pod || st.LastReplayedTime == nil {
			return fmt.Errorf("status.replica %+v", st)
		}
		return nil
	})

	patch(t, ns, func(d *databasev1alpha1.MyDatabase) { d.Spec.Replica.Enabled = false })
	testenv.Eventually(t, 2*time.Minute, "the promoted replica MyDatabase takes a write", func() error {
		_, err := sql("INSERT INTO items (note) VALUES ('promoted')")
		return err
	})
	hasRows(want + 11)
	testenv.Eventually(t, time.Minute, "status.replica gone", func() error {
		if st := getDB(t, ns).Status.Replica; st != nil {
			return fmt.Errorf("status.replica %+v", st)
		}
		return nil
	})
	t.Logf("the replica MyDatabase followed the source's archive (%d rows, then 10 more) and was promoted", want)
	deleteAndWait(t, ns)
}

// backupVerified: a verification of backup b, asked for as a person asks
// (the annotation), restores it with the archive after it in a pod of its
// own, passes, and its pod goes; with one byte flipped in walKey, a WAL
// file after the backup, the next verification fails and names the file.
func backupVerified(t *testing.T, b *databasev1alpha1.MyDatabaseBackup, store *testenv.ObjectStore, walKey string) {
	verify := func(request string, want metav1.ConditionStatus) *databasev1alpha1.BackupVerification {
		t.Helper()
		return verifyBackup(t, b, request, want)
	}
	v := verify("healthy", metav1.ConditionTrue)
	reached, err := contract.LSN(v.ReachedLSN)
	end, err2 := contract.LSN(b.Status.EndLSN)
	if err != nil || err2 != nil || reached < end || v.Databases < 2 {
		t.Errorf("a verification that passed reached %s (backup ends at %s) and checked %d databases", v.ReachedLSN, b.Status.EndLSN, v.Databases)
	}
	if err := store.FlipByte(t.Context(), walKey); err != nil {
		t.Fatal(err)
	}
	segment := strings.TrimSuffix(filepath.Base(walKey), ".zst")
	if v := verify("flipped", metav1.ConditionFalse); v.Result != databasev1alpha1.VerificationFailed || !strings.Contains(v.Message, segment) {
		t.Errorf("with %s damaged the verification ended %s: %s; want Failed, naming it", segment, v.Result, v.Message)
	}
}

// verifyBackup asks for a verification of backup b, as a person does
// (the annotation request), waits until its Verified condition is want
// and its pod is gone, and returns it.
func verifyBackup(t *testing.T, b *databasev1alpha1.MyDatabaseBackup, request string, want metav1.ConditionStatus) *databasev1alpha1.BackupVerification {
	t.Helper()
	patch := client.MergeFrom(b.DeepCopy())
	metav1.SetMetaDataAnnotation(&b.ObjectMeta, databasev1alpha1.AnnotationVerify, request)
	if err := env.c.Patch(t.Context(), b, patch); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Minute, "verification "+request, func() error {
		if err := env.c.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		v := b.Status.Verification
		if c := meta.FindStatusCondition(b.Status.Conditions, databasev1alpha1.ConditionVerified); v == nil || v.Request != request ||
			c == nil || c.Status != want {
			return fmt.Errorf("verification %+v", v)
		}
		return nil
	})
	testenv.Eventually(t, time.Minute, "the verification pod deleted", func() error {
		err := env.c.Get(t.Context(), client.ObjectKey{Namespace: b.Namespace, Name: specs.VerifyPodName(b)}, &corev1.Pod{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
	v := b.Status.Verification
	t.Logf("verification %s: %s in %s, reached %s, %d databases: %s", request, v.Result, v.Took(), v.ReachedLSN, v.Databases, v.Message)
	return v
}

// startStore starts an S3 server on the node's bridge, with its data in
// the suite's directory name, stopped at the end of the test; objectStore
// gives a namespace the credentials Secret and returns the store.
func startStore(t *testing.T, name string) (store *testenv.ObjectStore, objectStore func(ns string) databasev1alpha1.ObjectStore) {
	dir := filepath.Join(env.work, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	store, err := testenv.StartObjectStoreOn(dir, nodeIP)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := store.Stop(); err != nil {
			t.Error(err)
		}
	})
	return store, func(ns string) databasev1alpha1.ObjectStore {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "object-store"},
			Data: map[string][]byte{specs.ObjectStoreAccessKeyIDKey: []byte(store.AccessKeyID),
				specs.ObjectStoreSecretAccessKeyKey: []byte(store.SecretAccessKey)}}
		if err := env.c.Create(t.Context(), secret); err != nil {
			t.Fatal(err)
		}
		return databasev1alpha1.ObjectStore{Endpoint: store.Endpoint, Bucket: store.Bucket, CredentialsSecret: secret.Name}
	}
}

// takeBackup creates a MyDatabaseBackup name of the MyDatabase of ns on
// its primary and waits until it is Completed.
func takeBackup(t *testing.T, ns, name string) *databasev1alpha1.MyDatabaseBackup {
	t.Helper()
	return takeBackupOn(t, ns, name, databasev1alpha1.BackupTargetPrimary)
}

// takeBackupOn is takeBackup on target.
func takeBackupOn(t *testing.T, ns, name string, target databasev1alpha1.BackupTarget) *databasev1alpha1.MyDatabaseBackup {
	t.Helper()
	b := &databasev1alpha1.MyDatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: databasev1alpha1.MyDatabaseBackupSpec{Database: dbName, Target: target}}
	if err := env.c.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Minute, "MyDatabaseBackup "+name+" Completed", func() error {
		if err := env.c.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		if b.Status.Phase == databasev1alpha1.BackupFailed {
			t.Fatalf("the backup failed: %s", b.Status.Message)
		}
		if b.Status.Phase != databasev1alpha1.BackupCompleted {
			return fmt.Errorf("phase %s: %s", b.Status.Phase, b.Status.Message)
		}
		return nil
	})
	return b
}

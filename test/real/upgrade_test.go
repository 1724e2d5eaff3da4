//go:build real

package real

import (
	"context"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
)

// TestMajorUpgradeOnRealPods upgrades a MyDatabase of three servers (one
// replica synchronous, required) from PostgreSQL 15 (the Debian 12 image)
// to 17 (the Debian 13 image) with pg_upgrade --link. First with a table
// pg_upgrade cannot carry over (a reg* column): the check fails, the
// servers come back on 15 with their data, Stalled with pg_upgrade's
// reason. Then, the table dropped and the upgrade retried: the rows, a
// role of the user's and the app's password survive, the server says 17,
// and the replicas, cloned again, stream on 17. The database archives to a
// real S3 server throughout: archiving goes on after the upgrade, on a
// timeline above every one the archive held, through a switchover; a
// backup of 15 taken before and one of 17 taken after each restore into
// a MyDatabase of their major, from the same path. Its backups are
// incremental where they can be (spec.backup.incremental): full on 15,
// saying why; on 17, three incremental backups on the full one, kept by
// retention as a chain, restored to a time exactly, and verified.
func TestMajorUpgradeOnRealPods(t *testing.T) {
	ctx := t.Context()
	store, objectStore := startStore(t, "s3-upgrade")
	ns := newNamespace(t, "real-upgrade", map[string]string{
		"pod-security.kubernetes.io/enforce":         "restricted",
		"pod-security.kubernetes.io/enforce-version": "latest",
	})
	db := &databasev1alpha1.MyDatabase{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: dbName},
		Spec: databasev1alpha1.MyDatabaseSpec{
			Version:  "15",
			Replicas: ptr.To[int32](3),
			// A required synchronous quorum: after the upgrade, only the
			// primary's data is left, and its election must not wait for
			// replicas that have none to stand.
			Replication: databasev1alpha1.ReplicationSpec{Synchronous: &databasev1alpha1.SynchronousReplication{
				Number: 1, Durability: databasev1alpha1.DurabilityRequired}},
			Storage: databasev1alpha1.StorageSpec{Size: resource.MustParse("1Gi")},
			// WAL on its own volumes: the upgrade Job mounts the primary's,
			// and the upgraded data moves its WAL there.
			WALStorage:     &databasev1alpha1.StorageSpec{Size: resource.MustParse("1Gi")},
			DeletionPolicy: databasev1alpha1.DeletionPolicyDelete,
			// Incremental from the start: full on 15, which says why, and
			// incremental on 17. Retention keeps the two newest backups
			// and every backup they build on.
			Backup: &databasev1alpha1.BackupSpec{ObjectStore: objectStore(ns),
				Incremental: &databasev1alpha1.IncrementalBackups{FullEvery: 4},
				Retention:   &databasev1alpha1.BackupRetention{Keep: ptr.To[int32](2)}},
		},
	}
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow() // newNamespace's cleanup dumps what the step left
		}
	}
	var uri string
	const rows = 100
	serverVersion := func(t *testing.T) int {
		t.Helper()
		var v int
		if err := connect(t, uri).QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}

	step("a MyDatabase on 15 with rows, a role of the user's and a reg* column", func(t *testing.T) {
		if err := env.c.Create(ctx, db.DeepCopy()); err != nil {
			t.Fatal(err)
		}
		waitReady(t, ns, 3, 4*time.Minute)
		uri, _ = credentials(t, ns)
		conn := connect(t, uri)
		for _, sql := range []string{
			"CREATE TABLE items (id bigserial PRIMARY KEY, note text NOT NULL)",
			fmt.Sprintf("INSERT INTO items (note) SELECT 'row ' || g FROM generate_series(1, %d) g", rows),
		} {
			if _, err := conn.Exec(ctx, sql); err != nil {
				t.Fatal(err)
			}
		}
		for _, sql := range []string{
			"CREATE ROLE reporter LOGIN PASSWORD 'reporter-password'",
			"CREATE TABLE blocks_upgrade (f regproc)",
		} {
			if out, err := superuserSQL(ns, dbName+"-0", sql); err != nil {
				t.Fatalf("%s: %v %s", sql, err, out)
			}
		}
		if v := serverVersion(t); v/10000 != 15 {
			t.Fatalf("server_version_num %d, want 15", v)
		}
		if b := takeBackup(t, ns, "on-15"); b.Status.Type != databasev1alpha1.BackupFull ||
			!strings.Contains(b.Status.Message, "PostgreSQL 15 takes full backups only") {
			t.Errorf("the backup on 15: %s, %q; want Full, saying 15 takes no incremental backups", b.Status.Type, b.Status.Message)
		}
	})

	step("the upgrade fails at pg_upgrade --check: Stalled with its reason, back on 15 with the data", func(t *testing.T) {
		start := time.Now()
		patch(t, ns, func(db *databasev1alpha1.MyDatabase) { db.Spec.Version = "17" })
		testenv.Eventually(t, 6*time.Minute, "Stalled MajorUpgradeFailed", func() error {
			db := getDB(t, ns)
			st := meta.FindStatusCondition(db.Status.Conditions, databasev1alpha1.ConditionStalled)
			if st == nil || st.Reason != databasev1alpha1.ReasonMajorUpgradeFailed {
				return fmt.Errorf("phase %s, Stalled %v, majorUpgrade %+v", db.Status.Phase, st, db.Status.MajorUpgrade)
			}
			if !strings.Contains(st.Message, "reg*") || !strings.Contains(st.Message, "blocks_upgrade") || !db.Status.MajorUpgrade.OldDataUntouched {
				t.Fatalf("Stalled for another reason: %s", st.Message)
			}
			t.Logf("Stalled: %s", st.Message)
			return nil
		})
		testenv.Eventually(t, 4*time.Minute, "both servers back on 15", func() error {
			db := getDB(t, ns)
			if db.Status.ReadyReplicas != 3 {
				return fmt.Errorf("%s ready", db.Status.Ready)
			}
			return nil
		})
		if n := count(t, uri); n != rows {
			t.Fatalf("%d rows, want %d", n, rows)
		}
		if v := serverVersion(t); v/10000 != 15 {
			t.Fatalf("server_version_num %d, want 15", v)
		}
		writeResult(t, "major upgrade refused by pg_upgrade --check, back on 15", time.Since(start))
	})

	step("the cause removed, the primary moved to ordinal 1, the upgrade retried: Ready on 17", func(t *testing.T) {
		if out, err := superuserSQL(ns, dbName+"-0", "DROP TABLE blocks_upgrade"); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		// The primary at ordinal 1: the upgrade first hands it back to
		// ordinal 0, which the StatefulSet stops last.
		switchoverTo(t, ns, dbName+"-1", 3)
		start := time.Now()
		// Back to 15 calls the failed upgrade off; 17 again starts anew.
		patch(t, ns, func(db *databasev1alpha1.MyDatabase) { db.Spec.Version = "15" })
		testenv.Eventually(t, time.Minute, "the failed upgrade called off, Ready on 15", func() error {
			db := getDB(t, ns)
			if up := db.Status.MajorUpgrade; up == nil || up.Phase != databasev1alpha1.MajorUpgradeCancelled ||
				!meta.IsStatusConditionTrue(db.Status.Conditions, databasev1alpha1.ConditionReady) {
				return fmt.Errorf("phase %s, majorUpgrade %+v", db.Status.Phase, up)
			}
			return nil
		})
		patch(t, ns, func(db *databasev1alpha1.MyDatabase) { db.Spec.Version = "17" })
		// Each step the status names, with its time: where an upgrade
		// that never ends waited (a run of 2026-12-07 did, once).
		var said string
		testenv.Eventually(t, 8*time.Minute, "Ready on 17", func() error {
			db := getDB(t, ns)
			up := db.Status.MajorUpgrade
			if up != nil {
				if step := fmt.Sprintf("%s: %s", up.Phase, up.Message); step != said {
					said = step
					t.Logf("%s %s", time.Now().UTC().Format("15:04:05"), step)
				}
			}
			if db.Status.CurrentVersion != "17" || up == nil || up.Phase != databasev1alpha1.MajorUpgradeSucceeded ||
				!meta.IsStatusConditionTrue(db.Status.Conditions, databasev1alpha1.ConditionReady) || db.Status.ReadyReplicas != 3 {
				return fmt.Errorf("phase %s, ready %s, currentVersion %q, majorUpgrade %+v", db.Status.Phase, db.Status.Ready, db.Status.CurrentVersion, up)
			}
			return nil
		})
		writeResult(t, "major upgrade 15 to 17, 3 servers (1 synchronous, required), to Ready", time.Since(start))
	})

	step("on 17: the rows, the role and the app's password survived", func(t *testing.T) {
		if db := getDB(t, ns); db.Status.CurrentPrimary != dbName+"-0" {
			t.Fatalf("primary %s, want %s-0, which was upgraded", db.Status.CurrentPrimary, dbName)
		}
		if v := serverVersion(t); v/10000 != 17 {
			t.Fatalf("server_version_num %d, want 17", v)
		}
		if got, err := podExec(ns, dbName+"-0", "readlink", specs.PGDATA+"/pg_wal"); err != nil || got != specs.WALDir {
			t.Errorf("pg_wal of the upgraded data links to %q (%v), want the WAL volume's %s", got, err, specs.WALDir)
		}
		if log := podLogs(t, ns, dbName+"-0"); !strings.Contains(log, "moved pg_wal to the WAL volume") {
			t.Errorf("the upgraded primary did not move its new data's WAL to the WAL volume:\n%s", log)
		}
		if n := count(t, uri); n != rows {
			t.Fatalf("%d rows, want %d", n, rows)
		}
		u, err := url.Parse(uri)
		if err != nil {
			t.Fatal(err)
		}
		u.User, u.Path = url.UserPassword("reporter", "reporter-password"), "/postgres"
		var who string
		if err := connect(t, u.String()).QueryRow(ctx, "SELECT current_user").Scan(&who); err != nil || who != "reporter" {
			t.Fatalf("logging in as reporter: %q, %v", who, err)
		}
	})

	step("the replica was cloned again and streams on 17", func(t *testing.T) {
		testenv.Eventually(t, time.Minute, "the replica streaming", func() error {
			out, err := superuserSQL(ns, dbName+"-0",
				"SELECT string_agg(application_name, ',' ORDER BY 1) FROM pg_stat_replication WHERE state = 'streaming'")
			if err != nil {
				return err
			}
			if !strings.Contains(out, dbName+"-1") {
				return fmt.Errorf("streaming: %q", out)
			}
			return nil
		})
		out, err := superuserSQL(ns, dbName+"-1", "SELECT pg_is_in_recovery() || ' ' || current_setting('server_version_num') || ' ' || (SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming')")
		if err != nil || !strings.HasPrefix(out, "true 17") || !strings.HasSuffix(out, " 1") {
			t.Fatalf("on the replica: %q (%v), want a standby of 17 streaming", out, err)
		}
		out, err = podExec(ns, dbName+"-0", "sh", "-c", `ls -d "$PGDATA".old 2>&1 || true`)
		if err != nil || !strings.Contains(out, "No such file") {
			t.Fatalf("the old cluster next to PGDATA: %q (%v), want it removed", out, err)
		}
		jobs := &batchv1.JobList{}
		if err := env.c.List(ctx, jobs, client.InNamespace(ns)); err != nil || len(jobs.Items) != 0 {
			t.Fatalf("%d Jobs left (%v), want the upgrade Job deleted", len(jobs.Items), err)
		}
	})

	step("with the required quorum, hibernated and resumed: elected among the servers that stand, the rows there", func(t *testing.T) {
		patch(t, ns, func(db *databasev1alpha1.MyDatabase) { db.Spec.Hibernate = true })
		testenv.Eventually(t, 3*time.Minute, "Hibernated with no pod", func() error {
			if db := getDB(t, ns); db.Status.Phase != databasev1alpha1.PhaseHibernated || len(podsOf(t, ns)) > 0 {
				return fmt.Errorf("phase %s, %d pods", db.Status.Phase, len(podsOf(t, ns)))
			}
			return nil
		})
		patch(t, ns, func(db *databasev1alpha1.MyDatabase) { db.Spec.Hibernate = false })
		waitReady(t, ns, 3, 5*time.Minute)
		if db := getDB(t, ns); db.Status.CurrentPrimary != dbName+"-0" {
			t.Errorf("resumed with %s the primary, want %s-0", db.Status.CurrentPrimary, dbName)
		}
		if n := count(t, uri); n != rows {
			t.Fatalf("%d rows after the resume, want %d", n, rows)
		}
	})

	step("backups across the upgrade: the archive goes on above the old timelines, and each major's backup restores", func(t *testing.T) {
		// The upgraded cluster started on a timeline above the old
		// cluster's history files (its switchovers), and never writes
		// that timeline's own: a restore of an old backup stops there.
		history := func() []int {
			s3, err := store.Client()
			if err != nil {
				t.Fatal(err)
			}
			var tlis []int
			for obj := range s3.ListObjects(ctx, store.Bucket, minio.ListObjectsOptions{Prefix: specs.BackupPath(db) + "/wal/"}) {
				var tli int
				if _, err := fmt.Sscanf(path.Base(obj.Key), "%08X.history", &tli); err == nil && strings.Contains(obj.Key, ".history") {
					tlis = append(tlis, tli)
				}
			}
			return tlis
		}
		started := getDB(t, ns).Status.MajorUpgrade.Timeline
		old := 0
		for _, tli := range history() {
			if int64(tli) == started {
				t.Fatalf("the archive holds the history file of timeline %d, which the upgraded cluster started on", tli)
			}
			if int64(tli) < started {
				old = max(old, tli)
			}
		}
		if old < 2 || started != int64(old)+1 {
			t.Fatalf("status.majorUpgrade.timeline %d; the old cluster's history files go up to %d: want the one after", started, old)
		}
		conn := connect(t, uri)
		if _, err := conn.Exec(ctx, "INSERT INTO items (note) SELECT 'on 17 ' || g FROM generate_series(1, 10) g"); err != nil {
			t.Fatal(err)
		}
		// A switchover writes the upgraded cluster's first history file:
		// the archive must take it, and go on.
		switchoverTo(t, ns, dbName+"-1", 3)
		// The Lease changes hands before the new primary has promoted:
		// until then it is still in recovery (CI saw it once).
		var last string
		testenv.Eventually(t, 30*time.Second, dbName+"-1 out of recovery, its WAL file switched", func() error {
			var err error
			last, err = superuserSQL(ns, dbName+"-1", "SELECT pg_walfile_name(pg_switch_wal())")
			return err
		})
		testenv.Eventually(t, 2*time.Minute, last+" archived after the switchover", func() error {
			db := getDB(t, ns)
			st := db.Status.Backup
			if c := meta.FindStatusCondition(db.Status.Conditions, databasev1alpha1.ConditionContinuousArchiving); c == nil ||
				c.Status != metav1.ConditionTrue {
				return fmt.Errorf("ContinuousArchiving %+v", c)
			}
			if st == nil || st.LastArchivedWAL < last {
				return fmt.Errorf("status.backup %+v", st)
			}
			return nil
		})
		if tlis := history(); slices.Max(tlis) <= int(started) {
			t.Errorf("after the switchover the archive holds the history files of %v: want one of the upgraded cluster's, above %d", tlis, started)
		}
		if b := takeBackup(t, ns, "on-17"); b.Status.Type != databasev1alpha1.BackupFull ||
			!strings.Contains(b.Status.Message, "the first backup of PostgreSQL 17 is full") {
			t.Errorf("the first backup on 17: %s, %q; want Full, saying it is the first of 17", b.Status.Type, b.Status.Message)
		}
		for _, tc := range []struct {
			version string
			rows    int
		}{{"15", rows}, {"17", rows + 10}} {
			rns := newNamespace(t, "real-upgrade-restore-"+tc.version, nil)
			recovery := objectStore(rns)
			recovery.Path = specs.BackupPath(db)
			createRestored(t, rns, tc.version, "1Gi", databasev1alpha1.RecoverySpec{ObjectStore: recovery}, 4*time.Minute)
			restoredURI, _ := credentials(t, rns)
			testenv.Eventually(t, 30*time.Second, "the restore of "+tc.version+" through its rw Service", func() error {
				c, err := dial(ctx, restoredURI)
				if err == nil {
					_ = c.Close(context.Background())
				}
				return err
			})
			if got := count(t, restoredURI); got != tc.rows {
				t.Errorf("the restore into %s holds %d rows, want %d", tc.version, got, tc.rows)
			}
			deleteAndWait(t, rns)
		}
	})

	step("incremental backups on 17: three on the full one, retention keeps the chain, a restore to a time combines it exactly", func(t *testing.T) {
		conn := connect(t, uri)
		exec := func(sql string) {
			t.Helper()
			if _, err := conn.Exec(ctx, sql); err != nil {
				t.Fatal(err)
			}
		}
		// 200,000 rows, then 5% of them changed before each of the last two.
		// No autovacuum: a vacuum between two backups changes every page
		// of the table, and the sizes below would depend on when it ran.
		exec("CREATE TABLE ledger (id int PRIMARY KEY, note text NOT NULL) WITH (autovacuum_enabled = off)")
		exec("INSERT INTO ledger SELECT g, md5(g::text) FROM generate_series(1, 200000) g")
		full := &databasev1alpha1.MyDatabaseBackup{}
		if err := env.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "on-17"}, full); err != nil {
			t.Fatal(err)
		}
		chain := []*databasev1alpha1.MyDatabaseBackup{full}
		for i, target := range []databasev1alpha1.BackupTarget{databasev1alpha1.BackupTargetPrimary,
			databasev1alpha1.BackupTargetPreferReplica, databasev1alpha1.BackupTargetPrimary} {
			if i > 0 {
				exec(fmt.Sprintf("UPDATE ledger SET note = 'changed %d' WHERE id > %d AND id <= %d", i, (i-1)*10000, i*10000))
			}
			if target == databasev1alpha1.BackupTargetPreferReplica {
				// A replica's backup starts at its last restartpoint, which
				// follows the primary's checkpoints: one past the parent's end
				// comes within checkpoint_timeout on a database with writes,
				// here at once. Without it the replica refuses, and the
				// backup is full, saying why (seen: "manifest requires WAL
				// from final timeline 8 ending at 0/1C000120, but this
				// backup starts at 0/1C000028").
				superuser(t, ns, getDB(t, ns).Status.CurrentPrimary, "CHECKPOINT")
			}
			stop := switchWALWhile(t, ns, getDB(t, ns).Status.CurrentPrimary)
			b := takeBackupOn(t, ns, fmt.Sprintf("inc-%d", i+1), target)
			stop()
			parent := chain[len(chain)-1].Status.BackupID
			if b.Status.Type != databasev1alpha1.BackupIncremental || b.Status.ParentBackupID != parent {
				t.Fatalf("%s (%s, on %s): %s on %q, %q; want Incremental on %s", b.Name, target, b.Status.Instance, b.Status.Type,
					b.Status.ParentBackupID, b.Status.Message, parent)
			}
			t.Logf("%s on %s: %d bytes, incremental on %s", b.Name, b.Status.Instance, b.Status.Size, parent)
			chain = append(chain, b)
		}
		// inc-1 holds the whole new table; inc-2 and inc-3 only what changed.
		for _, b := range chain[2:] {
			if b.Status.Size*2 > chain[1].Status.Size {
				t.Errorf("%s, after 5%% of the rows changed, is %d bytes; inc-1, with all of them, %d", b.Name, b.Status.Size, chain[1].Status.Size)
			}
		}
		var wantRows int
		var wantSum string
		sum := "SELECT count(*), md5(string_agg(id || ':' || note, ',' ORDER BY id)) FROM ledger"
		if err := conn.QueryRow(ctx, sum).Scan(&wantRows, &wantSum); err != nil {
			t.Fatal(err)
		}
		// A target a second after inc-3 finished, and a second before the
		// next write: a MyDatabase's target time is whole seconds.
		time.Sleep(1100 * time.Millisecond)
		var target time.Time
		if err := conn.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&target); err != nil {
			t.Fatal(err)
		}
		target = target.Truncate(time.Second)
		time.Sleep(1100 * time.Millisecond)
		// Past the target, and archived, so that recovery sees it reached.
		exec("UPDATE ledger SET note = 'after the target' WHERE id <= 100")
		last := superuser(t, ns, getDB(t, ns).Status.CurrentPrimary, "SELECT pg_walfile_name(pg_switch_wal())")
		testenv.Eventually(t, 2*time.Minute, "retention kept the chain and deleted the backup of 15; "+last+" archived", func() error {
			var ids []string
			s3, err := store.Client()
			if err != nil {
				return err
			}
			for obj := range s3.ListObjects(ctx, store.Bucket, minio.ListObjectsOptions{Prefix: specs.BackupPath(db) + "/base/", Recursive: true}) {
				if path.Base(obj.Key) == "backup.json" {
					ids = append(ids, path.Base(path.Dir(obj.Key)))
				}
			}
			var want []string
			for _, b := range chain {
				want = append(want, b.Status.BackupID)
			}
			if !slices.Equal(ids, want) {
				return fmt.Errorf("the store holds backups %v, want %v", ids, want)
			}
			if st := getDB(t, ns).Status.Backup; st == nil || st.LastArchivedWAL < last {
				return fmt.Errorf("status.backup %+v", st)
			}
			return nil
		})

		rns := newNamespace(t, "real-incremental-restore", nil)
		recovery := objectStore(rns)
		recovery.Path = specs.BackupPath(db)
		createRestored(t, rns, "17", "1Gi", databasev1alpha1.RecoverySpec{ObjectStore: recovery,
			Target: &databasev1alpha1.RecoveryTarget{Time: &metav1.Time{Time: target}}}, 4*time.Minute)
		if log := podLogs(t, rns, dbName+"-0"); !strings.Contains(log, "combined with the 3 backups it builds on") {
			t.Errorf("the restore did not combine the chain:\n%s", log)
		}
		restoredURI, _ := credentials(t, rns)
		var gotRows int
		var gotSum string
		testenv.Eventually(t, 30*time.Second, "the restore through its rw Service", func() error {
			c, err := dial(ctx, restoredURI)
			if err != nil {
				return err
			}
			defer func() { _ = c.Close(context.Background()) }()
			return c.QueryRow(ctx, sum).Scan(&gotRows, &gotSum)
		})
		if gotRows != wantRows || gotSum != wantSum {
			t.Errorf("restored to %s: %d rows, md5 %s; want %d rows, md5 %s", target.Format(time.RFC3339Nano), gotRows, gotSum, wantRows, wantSum)
		}
		deleteAndWait(t, rns)

		newest := chain[len(chain)-1]
		if v := verifyBackup(t, newest, "chain", metav1.ConditionTrue); v.Result != databasev1alpha1.VerificationPassed {
			t.Errorf("the verification of %s, the chain's newest: %s: %s", newest.Name, v.Result, v.Message)
		}
	})
}

// createRestored creates in namespace ns a MyDatabase of one server of
// version, with a data volume of size, made by recovery, and waits until
// it is Ready.
func createRestored(t *testing.T, ns, version, size string, recovery databasev1alpha1.RecoverySpec, timeout time.Duration) {
	t.Helper()
	restored := &databasev1alpha1.MyDatabase{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: dbName},
		Spec: databasev1alpha1.MyDatabaseSpec{Version: version, Replicas: ptr.To[int32](1),
			Storage:   databasev1alpha1.StorageSpec{Size: resource.MustParse(size)},
			Bootstrap: &databasev1alpha1.BootstrapSpec{Recovery: &recovery}}}
	if err := env.c.Create(t.Context(), restored); err != nil {
		t.Fatal(err)
	}
	waitReady(t, ns, 1, timeout)
}

// switchWALWhile switches the WAL file of the primary on pod every 2 s
// until stop is called: a backup taken on a replica ends in the WAL file
// the primary writes, and waits until it is archived, which a quiet
// database does only at archive_timeout (5 minutes).
func switchWALWhile(t *testing.T, ns, pod string) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-time.After(2 * time.Second):
				if out, err := superuserSQL(ns, pod, "SELECT pg_switch_wal()"); err != nil {
					t.Logf("pg_switch_wal on %s: %v %s", pod, err, out)
				}
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(done); <-stopped }) }
	t.Cleanup(stop) // a step that fails stops it too
	return stop
}

// switchoverTo asks the MyDatabase of ns for a switchover to pod and
// waits until pod is the primary, with replicas servers ready.
func switchoverTo(t *testing.T, ns, pod string, replicas int32) {
	t.Helper()
	patch(t, ns, func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Switchover = &databasev1alpha1.SwitchoverSpec{To: pod, RequestedAt: metav1.Now()}
	})
	testenv.Eventually(t, 2*time.Minute, pod+" the primary", func() error {
		if db := getDB(t, ns); db.Status.CurrentPrimary != pod || db.Status.ReadyReplicas != replicas {
			return fmt.Errorf("primary %s, %s ready", db.Status.CurrentPrimary, db.Status.Ready)
		}
		return nil
	})
}

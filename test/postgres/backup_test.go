package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/backup"
	"example.com/myoperator/internal/instance/report"
	"example.com/myoperator/internal/specs"
)

// TestBackupAndRestore archives the WAL of a real primary into a real S3
// server (SeaweedFS), takes a base backup under write load with `instance
// backup` (what `kubectl exec` runs in the database container), and
// restores it into new MyDatabases to every kind of target:
//
//	rows "base"     committed before the backup
//	rows "during"   committed while the backup runs (every acknowledged one)
//	rows "after"    committed after it, before time T
//	rows "late"     after T, before the restore point and the LSN
//	                then the primary is killed: its replica takes over,
//	                on a new timeline, and archives from then on
//	rows "last"     on the new primary; then the table "doomed" is dropped
//
// to T: base+during+after; to the restore point and to the LSN:
// base+during+after+late; to the end of the archive (across the timeline
// switch): everything, without "doomed". Each restored primary takes its
// own password, and a new replica clones it and streams.
func TestBackupAndRestore(t *testing.T) {
	servers := findServers(t)
	srv := servers[len(servers)-1]
	store := startStore(t, t.TempDir())

	objectStore := objectStoreOf(store)

	db := newDatabase(srv.major, nil)
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
	insert("base", 100)

	// The base backup, under write load: every insert acknowledged while
	// it runs must be in a restore to the end.
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := c.run(ctx, primary.env, c.instanceBin, "backup")
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("instance backup: %v\n%s", err, out)
	}
	var manifest backup.Manifest
	if err := json.Unmarshal([]byte(out), &manifest); err != nil {
		t.Fatalf("instance backup printed %q: %v", out, err)
	}
	t.Logf("base backup %s: WAL %s to %s on timeline %d, %d bytes compressed, %d rows written during it",
		manifest.ID, manifest.BeginLSN, manifest.EndLSN, manifest.Timeline, manifest.Size, during.Load())
	if during.Load() == 0 || manifest.Size == 0 {
		t.Fatalf("no write during the backup (%d) or an empty backup (%d bytes)", during.Load(), manifest.Size)
	}
	eventually(t, 30*time.Second, "the primary reporting the backup", func() (bool, string) {
		a := reportedArchive(t, c, primary)
		return a != nil && a.Backups != nil && a.Backups.Count == 1 && a.Backups.LastID == manifest.ID, fmt.Sprintf("%+v", a)
	})

	insert("after", 50)
	time.Sleep(time.Second)
	targetTime, err := time.Parse(time.RFC3339Nano, c.query(t, superuser(primary), "",
		`SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	insert("late", 30)
	// A restore point's record is not flushed by itself: the next commit
	// that writes makes it durable.
	c.query(t, superuser(primary), "", "SELECT pg_create_restore_point('before-last')")
	c.query(t, app, password, "INSERT INTO marks VALUES ('after the restore point')")
	targetLSN := c.query(t, superuser(primary), "", "SELECT pg_current_wal_flush_lsn()")
	waitStreaming(t, c, primary, replica)
	eventually(t, 30*time.Second, "the replica caught up", func() (bool, string) {
		got := c.query(t, superuser(replica), "", fmt.Sprintf("SELECT pg_last_wal_replay_lsn() >= '%s'", targetLSN))
		return got == "t", got
	})

	// The primary lost: the replica takes over and archives its timeline.
	primary.killContainer(t)
	eventually(t, 30*time.Second, replica.name+" promoted", func() (bool, string) {
		out, err := c.psql(superuser(replica), "", "SELECT pg_is_in_recovery()")
		return err == nil && out == "f", out
	})
	app = tcp(replica.port, db.Spec.User, db.Spec.DatabaseName)
	insert("last", 20)
	c.query(t, app, password, "DROP TABLE doomed")
	// The last segment is archived once it is complete.
	last := c.query(t, superuser(replica), "", "SELECT pg_walfile_name(pg_switch_wal())")
	eventually(t, 30*time.Second, "the last segment archived by the new primary", func() (bool, string) {
		got := c.query(t, superuser(replica), "", "SELECT coalesce(last_archived_wal, '') || ' ' || failed_count FROM pg_stat_archiver")
		return got >= last+" ", got
	})
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

	base, withDuring := 100, 100+int(during.Load())
	for _, tc := range []struct {
		name   string
		target *databasev1alpha1.RecoveryTarget
		rows   map[string]int
		doomed bool // the dropped table is still there
	}{
		{"to time T", &databasev1alpha1.RecoveryTarget{Time: &metav1.Time{Time: targetTime}},
			map[string]int{"base": base, "during": withDuring - base, "after": 50}, true},
		{"to the restore point", &databasev1alpha1.RecoveryTarget{Name: "before-last"},
			map[string]int{"base": base, "during": withDuring - base, "after": 50, "late": 30}, true},
		{"to the LSN", &databasev1alpha1.RecoveryTarget{LSN: targetLSN},
			map[string]int{"base": base, "during": withDuring - base, "after": 50, "late": 30}, true},
		{"to the end of the archive", nil,
			map[string]int{"base": base, "during": withDuring - base, "after": 50, "late": 30, "last": 20}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			restored := newDatabase(srv.major, nil)
			restored.Name = "restored"
			recovery := objectStore
			recovery.Path = specs.BackupPath(db)
			restored.Spec.Bootstrap = &databasev1alpha1.BootstrapSpec{Recovery: &databasev1alpha1.RecoverySpec{ObjectStore: recovery, Target: tc.target}}
			newPassword := "password-of-the-restored-" + strconv.Itoa(len(tc.name))
			rc := newCluster(t, srv, restored, specs.CredentialsSecret(restored, newPassword), storeSecret(store, restored.Namespace))
			ports := freePorts(t, 2)
			p := rc.newPod(0, ports[0])
			rc.logsOnFailure(t)
			off := p.start(t)
			p.waitReady(t)
			logContains(t, p.log(off), "restoring base backup "+manifest.ID, "recovery reached its target and promoted")
			restoredApp := tcp(p.port, restored.Spec.User, restored.Spec.DatabaseName)
			for phase, want := range map[string]int{"base": 0, "during": 0, "after": 0, "late": 0, "last": 0} {
				if n, ok := tc.rows[phase]; ok {
					want = n
				}
				got := rc.query(t, restoredApp, newPassword, fmt.Sprintf("SELECT count(*) FROM stamped WHERE phase = '%s'", phase))
				if got != strconv.Itoa(want) && (phase != "during" || !atLeast(got, want)) {
					t.Errorf("rows %q: %s, want %d", phase, got, want)
				}
			}
			if tc.target != nil && tc.target.Time != nil {
				if got := rc.query(t, restoredApp, newPassword, fmt.Sprintf("SELECT count(*) FROM stamped WHERE at > '%s'", targetTime.Format(time.RFC3339Nano))); got != "0" {
					t.Errorf("%s rows committed after T", got)
				}
			}
			if got := rc.query(t, restoredApp, newPassword, "SELECT to_regclass('doomed') IS NOT NULL"); got != map[bool]string{true: "t", false: "f"}[tc.doomed] {
				t.Errorf("the table dropped last: present %q, want %t", got, tc.doomed)
			}
			// Its own password, not the source's; a new replica clones it.
			rc.refused(t, restoredApp, password, "password authentication failed", "SELECT 1")
			replica := rc.newPod(1, ports[1])
			replica.start(t)
			replica.waitReady(t)
			waitStreaming(t, rc, p, replica)
			replica.stop(t)
			p.stop(t)
		})
	}
}

// reportedArchive is what p's instance manager last reported of archiving
// (nil before its first report).
func reportedArchive(t *testing.T, c *cluster, p *pod) *report.Archive {
	t.Helper()
	r, err := c.reportOf(p)
	if err != nil {
		return nil
	}
	return r.Archive
}

// atLeast: the writer may have had a commit acknowledged by the server
// and lost the reply; a restore to the end may hold one more "during"
// row than the writer counted, never fewer.
func atLeast(got string, want int) bool {
	n, err := strconv.Atoi(got)
	return err == nil && n >= want
}

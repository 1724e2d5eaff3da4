package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"k8s.io/utils/ptr"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/backup"
	"example.com/myoperator/internal/specs"
)

// TestBackupFigures measures backups on a pgbench database of
// BACKUP_BENCH_SCALE with a table of random text a quarter its size (54:
// about 1 GiB), with the real S3 server:
//
//   - a base backup's throughput (database bytes per second), against
//     raw `pg_basebackup -Ft` to local disk and against uploading the
//     same bytes to the same store;
//   - the time to restore it into a new MyDatabase, until it is ready;
//   - archive lag under a pgbench write load with default settings: for
//     each WAL file, the time from its completion (the primary moved on
//     to the next) to its being archived.
//
// With BACKUP_BENCH_DOC (file names, space-separated) it writes the
// figures into each between the backup-figures markers. `make
// bench-backup` runs it.
func TestBackupFigures(t *testing.T) {
	scale, err := strconv.Atoi(os.Getenv("BACKUP_BENCH_SCALE"))
	if err != nil || scale < 1 {
		t.Skip("BACKUP_BENCH_SCALE is not set: run make bench-backup")
	}
	servers := findServers(t)
	srv := servers[len(servers)-1]
	store := startStore(t, t.TempDir())
	objectStore := objectStoreOf(store)
	db := newDatabase(srv.major, nil)
	db.Spec.Replicas = ptr.To[int32](1)
	db.Spec.Backup = &databasev1alpha1.BackupSpec{ObjectStore: objectStore}
	c := newCluster(t, srv, db, specs.CredentialsSecret(db, "password-of-the-bench"), storeSecret(store, db.Namespace))
	c.logsOnFailure(t)
	primary := c.startPods(t, 1)[0]
	ctx := context.Background()
	superuser := primary.socket("postgres", "postgres")
	pg := []string{"-h", primary.socketDir(), "-p", strconv.Itoa(primary.port), "-U", "postgres"}
	run := func(argv ...string) {
		t.Helper()
		if out, err := c.run(ctx, c.baseEnv(), argv...); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
		}
	}
	start := time.Now()
	run(append(append([]string{"pgbench", "-i", "-q", "-s", strconv.Itoa(scale)}, pg...), "postgres")...)
	// pgbench's tables compress about 20:1; a quarter as much again of
	// random hexadecimal text (about 2:1) keeps the figures honest.
	c.query(t, superuser, "", fmt.Sprintf("CREATE TABLE noise AS SELECT md5(random()::text) || md5(random()::text) AS a FROM generate_series(1, %d)", scale*38000),
		"CHECKPOINT")
	dbBytes, _ := strconv.ParseInt(c.query(t, superuser, "", "SELECT sum(pg_database_size(oid)) FROM pg_database"), 10, 64)
	t.Logf("pgbench -i -s %d: %s of databases in %s", scale, mib(dbBytes), time.Since(start).Round(time.Second))
	if os.Getenv("BACKUP_BENCH_LAG_ONLY") != "" {
		// Only the archive lag, to compare two builds of wal-push.
		lags, segments := archiveLag(t, c, superuser, pg)
		t.Logf("archive lag of %d WAL files: p50 %s, p99 %s; all: %v", segments, lags[len(lags)/2], p99(lags), lags)
		return
	}

	// Raw pg_basebackup to local disk.
	raw := filepath.Join(c.base, "raw")
	if err := os.Mkdir(raw, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(raw, c.user.uid, c.user.gid); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	run(append([]string{"pg_basebackup", "-D", raw, "-Ft", "-X", "none", "--checkpoint=fast"}, pg...)...)
	rawTime := time.Since(start)
	tarFile := filepath.Join(raw, "base.tar")
	fi, err := os.Stat(tarFile)
	if err != nil {
		t.Fatal(err)
	}
	tarBytes := fi.Size()

	// The same bytes uploaded to the same store.
	client, err := minio.New(strings.TrimPrefix(store.Endpoint, "http://"), &minio.Options{
		Creds: credentials.NewStaticV4(store.AccessKeyID, store.SecretAccessKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if _, err := client.FPutObject(ctx, store.Bucket, "raw/base.tar", tarFile, minio.PutObjectOptions{PartSize: 16 << 20}); err != nil {
		t.Fatal(err)
	}
	uploadTime := time.Since(start)
	_ = os.RemoveAll(raw)

	// Ours: pg_basebackup through zstd into the store.
	start = time.Now()
	out, err := c.run(ctx, primary.env, c.instanceBin, "backup")
	if err != nil {
		t.Fatalf("instance backup: %v\n%s", err, out)
	}
	oursTime := time.Since(start)
	var m backup.Manifest
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}

	// Restore into a new MyDatabase, to the backup's consistent point.
	restored := newDatabase(srv.major, nil)
	restored.Name = "restored"
	recovery := objectStore
	recovery.Path = specs.BackupPath(db)
	restored.Spec.Bootstrap = &databasev1alpha1.BootstrapSpec{Recovery: &databasev1alpha1.RecoverySpec{ObjectStore: recovery,
		BackupID: m.ID, Target: &databasev1alpha1.RecoveryTarget{Immediate: true}}}
	rc := newCluster(t, srv, restored, specs.CredentialsSecret(restored, "password-of-the-restored"), storeSecret(store, restored.Namespace))
	rc.logsOnFailure(t)
	p := rc.newPod(0, freePorts(t, 1)[0])
	start = time.Now()
	p.start(t)
	p.waitReady(t)
	restoreTime := time.Since(start)
	rows := rc.query(t, p.socket("postgres", "postgres"), "", "SELECT count(*) FROM pgbench_accounts")
	if rows != strconv.Itoa(scale*100000) {
		t.Errorf("the restored database has %s accounts, want %d", rows, scale*100000)
	}
	p.stop(t)

	// Archive lag under write load.
	lags, segments := archiveLag(t, c, superuser, pg)

	throughput := func(d time.Duration) float64 { return float64(tarBytes) / d.Seconds() / (1 << 20) }
	slower := min(throughput(rawTime), throughput(uploadTime))
	table := fmt.Sprintf("Measured by `make bench-backup` on %s: PostgreSQL %d, pgbench scale %d and a table of random text (%s of databases, a %s base backup), "+
		"the Versity S3 Gateway (versitygw posix) on the same 2-core machine, data and store on local disk, default settings:\n\n"+
		"| what | time | throughput | |\n|---|---|---|---|\n"+
		"| raw `pg_basebackup -Ft` to local disk | %s | %.0f MiB/s | |\n"+
		"| uploading the same bytes to the store | %s | %.0f MiB/s | |\n"+
		"| **base backup** (`pg_basebackup` → zstd → multipart upload) | %s | %.0f MiB/s | **%.2f×** the slower (target ≥ 0.8×); %s stored |\n"+
		"| **restore** into a new MyDatabase, until ready | %s | %.0f MiB/s | |\n\n"+
		"Archive lag under `pgbench -c 4 -j 2 -T 60` (%d WAL files completed): p50 %s, p99 **%s**, max %s "+
		"(target p99 ≤ 5 s), sampled every 100 ms.\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), srv.major, scale, mib(dbBytes), mib(tarBytes),
		rawTime.Round(100*time.Millisecond), throughput(rawTime), uploadTime.Round(100*time.Millisecond), throughput(uploadTime),
		oursTime.Round(100*time.Millisecond), throughput(oursTime), throughput(oursTime)/slower, mib(m.Size),
		restoreTime.Round(100*time.Millisecond), throughput(restoreTime),
		segments, lags[len(lags)/2].Round(10*time.Millisecond), p99(lags).Round(10*time.Millisecond), lags[len(lags)-1].Round(10*time.Millisecond))
	t.Log("\n" + table)
	for doc := range strings.FieldsSeq(os.Getenv("BACKUP_BENCH_DOC")) {
		if err := splice(doc, "<!-- backup figures -->", "<!-- end of backup figures -->", table); err != nil {
			t.Fatal(err)
		}
	}
}

// archiveLag runs pgbench for a minute and returns, sorted, for each WAL
// file the primary completed meanwhile, the time from its completion to
// its archiving, as sampled every 100 ms, and how many there were.
func archiveLag(t *testing.T, c *cluster, superuser string, pg []string) ([]time.Duration, int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		out, err := c.run(ctx, c.baseEnv(), append(append([]string{"pgbench", "-c", "4", "-j", "2", "-T", "60"}, pg...), "postgres")...)
		if err != nil {
			err = fmt.Errorf("%w: %s", err, out)
		}
		done <- err
	}()
	completed := map[string]time.Time{}
	archived := map[string]time.Time{}
	current := ""
	sample := func() {
		out := c.query(t, superuser, "", "SELECT pg_walfile_name(pg_current_wal_lsn()) || ' ' || coalesce(last_archived_wal, '') FROM pg_stat_archiver")
		now := time.Now()
		cur, last, _ := strings.Cut(out, " ")
		if current != "" && cur != current {
			completed[current] = now
			// Files passed over between two samples completed within them.
			for seg := nextSegment(current); seg < cur; seg = nextSegment(seg) {
				completed[seg] = now
			}
		}
		current = cur
		for seg := range completed {
			if _, ok := archived[seg]; !ok && last >= seg {
				archived[seg] = now
			}
		}
	}
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("pgbench: %v", err)
			}
			running = false
		case <-time.After(100 * time.Millisecond):
			sample()
		}
	}
	deadline := time.Now().Add(time.Minute)
	for len(archived) < len(completed) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		sample()
	}
	lags := make([]time.Duration, 0, len(completed))
	for seg, at := range completed {
		done, ok := archived[seg]
		if !ok {
			t.Fatalf("WAL file %s was not archived within a minute of the load's end", seg)
		}
		lags = append(lags, done.Sub(at))
	}
	if len(lags) == 0 {
		t.Fatal("the load completed no WAL file")
	}
	slices.Sort(lags)
	return lags, len(lags)
}

// p99 is the 99th percentile of sorted (the nearest rank).
func p99(sorted []time.Duration) time.Duration {
	return sorted[min(len(sorted)-1, len(sorted)*99/100)]
}

// nextSegment is the name of the WAL segment after seg (16 MiB segments).
func nextSegment(seg string) string {
	tl, log, n := seg[:8], seg[8:16], seg[16:24]
	l, _ := strconv.ParseUint(log, 16, 32)
	s, _ := strconv.ParseUint(n, 16, 32)
	if s++; s == 0x100 {
		l, s = l+1, 0
	}
	return fmt.Sprintf("%s%08X%08X", tl, l, s)
}

func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

//go:build real

package real

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// TestIncrementalBackupFigures measures incremental base backups on
// PostgreSQL 17 against full ones, on real pods and a real S3 server: a
// pgbench database of scale REAL_INCREMENTAL_SCALE (68: about 1 GiB; 0
// skips), a full backup, then three incremental ones, each after 5% of
// the accounts changed (a contiguous range: 5% of the table's pages);
// then the time from creating a restored MyDatabase to Ready, from the
// full backup alone and from the chain of four. Sizes are compressed, in
// the store; a backup's time runs from the MyDatabaseBackup's creation
// until it is Completed (its last WAL file archived). `make bench-incremental` runs
// it and prints the table that docs/benchmarks.md quotes.
func TestIncrementalBackupFigures(t *testing.T) {
	scale, _ := strconv.Atoi(os.Getenv("REAL_INCREMENTAL_SCALE"))
	if scale < 1 {
		t.Skip("REAL_INCREMENTAL_SCALE is not set: make bench-incremental runs it")
	}
	ctx := t.Context()
	_, objectStore := startStore(t, "s3-incremental-figures")
	ns := newNamespace(t, "real-incremental-figures", nil)
	db := &databasev1alpha1.MyDatabase{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: dbName},
		Spec: databasev1alpha1.MyDatabaseSpec{
			Version: "17", Replicas: ptr.To[int32](1),
			Storage:        databasev1alpha1.StorageSpec{Size: resource.MustParse("4Gi")},
			DeletionPolicy: databasev1alpha1.DeletionPolicyDelete,
			Backup: &databasev1alpha1.BackupSpec{ObjectStore: objectStore(ns),
				Incremental: &databasev1alpha1.IncrementalBackups{FullEvery: 4}},
		},
	}
	if err := env.c.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	waitReady(t, ns, 1, 4*time.Minute)
	pod := dbName + "-0"
	if out, err := podExec(ns, pod, "pgbench", "-i", "-q", "-s", strconv.Itoa(scale), "-U", "postgres", "postgres"); err != nil {
		t.Fatalf("pgbench -i: %v\n%s", err, out)
	}
	size := superuser(t, ns, pod, "SELECT pg_database_size('postgres')")
	accounts := scale * 100000
	var rows []string
	var chain []*databasev1alpha1.MyDatabaseBackup
	for i := range 4 {
		name := "full"
		if i > 0 {
			name = fmt.Sprintf("incremental-%d", i)
			superuser(t, ns, pod, fmt.Sprintf("UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid > %d AND aid <= %d",
				(i-1)*accounts/20, i*accounts/20))
			superuser(t, ns, pod, "CHECKPOINT")
		}
		start := time.Now()
		b := takeBackup(t, ns, name)
		took := time.Since(start)
		rows = append(rows, fmt.Sprintf("| %s | %s | %.1f MiB | %s |", name, b.Status.Type, float64(b.Status.Size)/(1<<20), took.Round(100*time.Millisecond)))
		chain = append(chain, b)
	}
	restore := func(name, backupID string) time.Duration {
		rns := newNamespace(t, "real-incremental-figures-"+name, nil)
		recovery := objectStore(rns)
		recovery.Path = specs.BackupPath(db)
		start := time.Now()
		createRestored(t, rns, "17", "4Gi", databasev1alpha1.RecoverySpec{ObjectStore: recovery,
			BackupID: backupID, Target: &databasev1alpha1.RecoveryTarget{Immediate: true}}, 15*time.Minute)
		took := time.Since(start)
		deleteAndWait(t, rns)
		return took
	}
	fromFull := restore("full", chain[0].Status.BackupID)
	fromChain := restore("chain", chain[3].Status.BackupID)
	t.Logf("pgbench scale %d, database %s bytes:\n| backup | type | size in the store | time |\n|---|---|---|---|\n%s\n"+
		"restore to Ready: from the full backup %s, from the chain of four %s",
		scale, size, strings.Join(rows, "\n"), fromFull.Round(100*time.Millisecond), fromChain.Round(100*time.Millisecond))
}

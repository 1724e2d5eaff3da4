package postgres

import (
	"context"
	"fmt"
	"testing"

	"filippo.io/age"
	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
)

// TestRestoreNeverEndsEarly: a restore to the end of the archive must not
// end before it, at a WAL file the store cannot give back, and say
// nothing. PostgreSQL takes any failure of restore_command below exit
// status 126, and a missing file, as the end of the archive: the restored
// database would promote without every write after that file. So each of
// these makes the restore fail, Stalled with the file's name:
//   - the file held but damaged (one byte flipped in the store): on the
//     code before wal-fetch --strict, the restore promoted at the file
//     before it and became Ready without the rows "middle" and "after";
//   - the file deleted while a later one is there: a hole (backup.Gap).
//
// The rows:
//
//	rows "before"   committed before the base backup
//	rows "middle"   after it, in the WAL file then flipped
//	rows "after"    in the next WAL file, intact
func TestRestoreNeverEndsEarly(t *testing.T) {
	t.Parallel() // doc.go: which tests run side by side
	servers := findServers(t)
	srv := servers[len(servers)-1]
	store := startStore(t, t.TempDir())
	c, primary, insert := archivingSource(t, srv, store, nil)
	db := c.db
	insert("before", 100)
	base := takeBackup(t, c, primary)
	insert("middle", 50)
	middle := archiveNow(t, c, primary)
	insert("after", 30)
	archiveNow(t, c, primary)

	recovery := objectStoreOf(store)
	recovery.Path = specs.BackupPath(db)
	key := recovery.Path + "/wal/" + middle + ".zst"
	flipByte(t, store, key)
	restoreReported(t, srv, c, store, "restore-flipped-wal",
		&databasev1alpha1.RecoverySpec{ObjectStore: recovery, BackupID: base.ID}, "WAL file "+middle+" and got an error")
	s3 := storeClient(t, store)
	if err := s3.RemoveObject(context.Background(), store.Bucket, key, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	restoreReported(t, srv, c, store, "restore-wal-hole",
		&databasev1alpha1.RecoverySpec{ObjectStore: recovery, BackupID: base.ID}, "lacks "+middle+" but holds")
}

func storeClient(t *testing.T, store *testenv.ObjectStore) *minio.Client {
	t.Helper()
	s3, err := store.Client()
	if err != nil {
		t.Fatal(err)
	}
	return s3
}

// flipByte flips one byte in the middle of the object key
// (testenv.ObjectStore.FlipByte).
func flipByte(t *testing.T, store *testenv.ObjectStore, key string) {
	t.Helper()
	if err := store.FlipByte(context.Background(), key); err != nil {
		t.Fatal(err)
	}
}

// archivingSource is a MyDatabase of one server archiving into store,
// encrypted to key unless it is nil, with a table stamped (id, phase),
// and what inserts n rows of a phase into it as the superuser.
func archivingSource(t *testing.T, srv server, store *testenv.ObjectStore, key *age.X25519Identity) (*cluster, *pod, func(phase string, n int)) {
	t.Helper()
	db := newDatabase(srv.major, nil)
	db.Spec.Backup = &databasev1alpha1.BackupSpec{ObjectStore: objectStoreOf(store)}
	secrets := []*corev1.Secret{specs.CredentialsSecret(db, "password"), storeSecret(store, db.Namespace)}
	if key != nil {
		db.Spec.Backup.Encryption = &databasev1alpha1.BackupEncryption{Secret: "backup-key"}
		secrets = append(secrets, keySecret(db.Namespace, "backup-key", key))
	}
	c := newCluster(t, srv, db, secrets...)
	primary := c.startPods(t, 1)[0]
	su := primary.socket("postgres", "postgres")
	c.query(t, su, "", "CREATE TABLE stamped (id bigserial PRIMARY KEY, phase text NOT NULL)")
	return c, primary, func(phase string, n int) {
		c.query(t, su, "", fmt.Sprintf("INSERT INTO stamped (phase) SELECT '%s' FROM generate_series(1, %d)", phase, n))
	}
}

package postgres

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// TestWALSpace runs a primary on a data volume of its own size (a 1 GiB
// tmpfs, the default spec.storage.size) with archiving to a store that
// then goes away, and writes WAL: the operator's WALSpace condition turns
// False, naming the archiving failure, while the server still takes
// writes and the volume has room; with the store back, the backlog is
// archived and removed and the condition turns True again.
func TestWALSpace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a data volume of a given size needs root; CI runs as root")
	}
	servers := findServers(t)
	srv := servers[len(servers)-1]
	store := startStore(t, t.TempDir())
	db := newDatabase(srv.major, nil)
	db.Spec.Replicas = new(int32(1))
	db.Spec.Backup = &databasev1alpha1.BackupSpec{ObjectStore: objectStoreOf(store)}
	password := "password-of-the-wal-test"
	c := newCluster(t, srv, db, specs.CredentialsSecret(db, password), storeSecret(store, db.Namespace))
	p := c.newPod(0, freePorts(t, 1)[0])
	volume := p.hostPath(t, specs.DataMountPath)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o",
		fmt.Sprintf("size=1g,mode=0700,uid=%d,gid=%d", c.user.uid, c.user.gid), "tmpfs", volume).CombinedOutput(); err != nil {
		t.Fatalf("mounting a 1 GiB tmpfs as the data volume: %v\n%s", err, out)
	}
	// Lazily: the server may still hold it when this runs.
	t.Cleanup(func() { _ = exec.Command("umount", "-l", volume).Run() })
	p.start(t)
	p.waitReady(t)
	c.startOperator(t)
	superuser := p.socket("postgres", "postgres")

	if got := c.query(t, superuser, "", "SHOW max_wal_size"); got != "256MB" {
		t.Errorf("max_wal_size = %s on a 1 GiB volume, want 256MB (a quarter)", got)
	}
	walSpace := func() *metav1.Condition {
		return meta.FindStatusCondition(c.database(t).Status.Conditions, databasev1alpha1.ConditionWALSpace)
	}
	// writeWAL writes a row and moves to a new 16 MiB segment, n times.
	writeWAL := func(n int) {
		for range n {
			c.query(t, superuser, "", "CREATE TABLE IF NOT EXISTS filler (at timestamptz)",
				"INSERT INTO filler VALUES (clock_timestamp())", "SELECT pg_switch_wal()")
		}
	}
	writeWAL(2)
	eventually(t, time.Minute, "WALSpace True", func() (bool, string) {
		w := walSpace()
		return w != nil && w.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", w)
	})

	if err := store.Stop(); err != nil {
		t.Fatal(err)
	}
	// Past half the volume (32 segments), well short of filling it (64).
	for n := 0; ; n++ {
		wal, err := strconv.ParseInt(c.query(t, superuser, "", "SELECT sum(size) FROM pg_ls_waldir()"), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if wal > 9<<30/16 {
			break
		}
		if n == 48 {
			t.Fatalf("pg_wal holds %d bytes after %d segments with archiving down: archiving still removes WAL?", wal, n)
		}
		writeWAL(1)
	}
	var accumulating *metav1.Condition
	eventually(t, time.Minute, "WALSpace False", func() (bool, string) {
		// A row moves the WAL position, which sends the next report.
		c.query(t, superuser, "", "INSERT INTO filler VALUES (clock_timestamp())")
		accumulating = walSpace()
		return accumulating != nil && accumulating.Status == metav1.ConditionFalse, fmt.Sprintf("%+v", accumulating)
	})
	t.Logf("WALSpace: %s", accumulating.Message)
	for _, says := range []string{p.name, "Archiving fails", "Mend the object store"} {
		if accumulating.Reason != databasev1alpha1.ReasonWALAccumulating || !strings.Contains(accumulating.Message, says) {
			t.Errorf("WALSpace %s %q, want %s saying %q", accumulating.Reason, accumulating.Message, databasev1alpha1.ReasonWALAccumulating, says)
		}
	}
	var st *databasev1alpha1.InstanceStorage
	for _, in := range c.database(t).Status.Instances {
		if in.Name == p.name {
			st = in.Storage
		}
	}
	switch {
	case st == nil:
		t.Errorf("status.instances has no storage for %s", p.name)
	case st.CapacityBytes != 1<<30 || 2*st.WALBytes <= st.CapacityBytes || st.AvailableBytes < 64<<20:
		t.Errorf("storage %+v: want the 1 GiB volume, WAL past half of it, and room left", *st)
	}
	c.query(t, superuser, "", "INSERT INTO filler VALUES (clock_timestamp())") // still takes writes

	if err := store.Restart(); err != nil {
		t.Fatal(err)
	}
	// A new segment wakes the archiver, which waits a minute after failures.
	writeWAL(1)
	eventually(t, 2*time.Minute, "WALSpace True again once the backlog is archived", func() (bool, string) {
		// A checkpoint removes what was archived; the row sends a report.
		c.query(t, superuser, "", "CHECKPOINT", "INSERT INTO filler VALUES (clock_timestamp())")
		w := walSpace()
		time.Sleep(time.Second)
		return w != nil && w.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", w)
	})
}

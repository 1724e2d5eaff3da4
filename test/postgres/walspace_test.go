package postgres

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// TestWALSpace runs a primary whose WAL is on a volume of its own size (a
// 1 GiB tmpfs, the default size): the data volume, or with
// spec.walStorage the WAL volume, with the data beside it on the host's
// disk. Archiving goes to a store that then goes away, and the test writes
// WAL: the operator's WALSpace condition turns False, naming the archiving
// failure, while the server still takes writes and the volume has room;
// past autoGrow's usedPercent the operator asks for a larger claim, which
// the test grows under the running server as a storage driver would,
// once; with the store back, the backlog is archived and removed and the
// condition turns True again.
func TestWALSpace(t *testing.T) {
	t.Parallel() // doc.go: which tests run side by side
	if os.Geteuid() != 0 {
		t.Skip("mounting a data volume of a given size needs root; CI runs as root")
	}
	t.Run("on the data volume", func(t *testing.T) { testWALSpace(t, false) })
	t.Run("on a WAL volume", func(t *testing.T) { testWALSpace(t, true) })
}

func testWALSpace(t *testing.T, walVolume bool) {
	servers := findServers(t)
	srv := servers[len(servers)-1]
	store := startStore(t, t.TempDir())
	db := newDatabase(srv.major, nil)
	db.Spec.Replicas = new(int32(1))
	db.Spec.Backup = &databasev1alpha1.BackupSpec{ObjectStore: objectStoreOf(store)}
	if walVolume {
		db.Spec.WALStorage = &databasev1alpha1.StorageSpec{Size: resource.MustParse("1Gi")}
	}
	vol := specs.Volumes(db)[len(specs.Volumes(db))-1] // the volume the WAL is on
	password := "password-of-the-wal-test"
	c := newCluster(t, srv, db, specs.CredentialsSecret(db, password), storeSecret(store, db.Namespace))
	p := c.newPod(0, freePorts(t, 1)[0])
	volume := p.hostPath(t, vol.MountPath)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o",
		fmt.Sprintf("size=1g,mode=0700,uid=%d,gid=%d", c.user.uid, c.user.gid), "tmpfs", volume).CombinedOutput(); err != nil {
		t.Fatalf("mounting a 1 GiB tmpfs as the %s volume: %v\n%s", vol.What, err, out)
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
	if walVolume {
		pgWAL := filepath.Join(p.hostPath(t, specs.PGDATA), "pg_wal")
		if target, err := os.Readlink(pgWAL); err != nil || target != p.hostPath(t, specs.WALDir) {
			t.Fatalf("pg_wal links to %q (%v), want the WAL volume's %s", target, err, p.hostPath(t, specs.WALDir))
		}
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
	st := instanceStorage(c.database(t), p.name)
	if st == nil {
		t.Fatalf("status.instances has no storage for %s", p.name)
	}
	capacity, available := st.CapacityBytes, st.AvailableBytes
	if walVolume {
		capacity, available = st.WALCapacityBytes, st.WALAvailableBytes
	}
	switch {
	case capacity != 1<<30 || 2*st.WALBytes <= capacity || available < 64<<20:
		t.Errorf("storage %+v: want the 1 GiB %s volume, WAL past half of it, and room left", *st, vol.What)
	case walVolume && (st.CapacityBytes == 1<<30 || st.AvailableBytes < 2*st.WALBytes):
		t.Errorf("storage %+v: want the data volume on the host's disk, with room for the WAL it does not hold", *st)
	}
	c.query(t, superuser, "", "INSERT INTO filler VALUES (clock_timestamp())") // still takes writes

	// The WAL keeps growing: spec.storage.autoGrow asks for a larger claim
	// past usedPercent, and the test, as the storage driver, grows the
	// tmpfs under the running server.
	claim := autoGrowing(t, c, vol)
	for n := 0; used(t, volume) < 0.82; n++ {
		if n == 30 {
			t.Fatalf("the volume is %.0f%% used after %d more segments", 100*used(t, volume), n)
		}
		writeWAL(1)
	}
	grown := resource.MustParse("1229Mi") // 1 GiB and 20%, rounded up to a MiB
	eventually(t, time.Minute, "the claim asking for "+grown.String(), func() (bool, string) {
		c.query(t, superuser, "", "INSERT INTO filler VALUES (clock_timestamp())")
		pvc := &corev1.PersistentVolumeClaim{}
		if err := c.api.Client.Get(context.Background(), client.ObjectKeyFromObject(claim), pvc); err != nil {
			return false, err.Error()
		}
		request := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
		return request.Cmp(grown) == 0, request.String()
	})
	if out, err := exec.Command("mount", "-o", fmt.Sprintf("remount,size=%d", grown.Value()), volume).CombinedOutput(); err != nil {
		t.Fatalf("growing the tmpfs: %v\n%s", err, out)
	}
	eventually(t, 30*time.Second, "the claim's new capacity", func() (bool, string) {
		if err := c.api.Client.Get(context.Background(), client.ObjectKeyFromObject(claim), claim); err != nil {
			return false, err.Error()
		}
		claim.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: grown}
		err := c.api.Client.Status().Update(context.Background(), claim)
		return err == nil, fmt.Sprint(err)
	})
	eventually(t, time.Minute, "the grown volume reported", func() (bool, string) {
		c.query(t, superuser, "", "INSERT INTO filler VALUES (clock_timestamp())")
		db := c.database(t)
		st := instanceStorage(db, p.name)
		g := storageStatus(db, walVolume)
		return st != nil && (st.CapacityBytes == grown.Value()) != walVolume && (st.WALCapacityBytes == grown.Value()) == walVolume &&
			g != nil && g.LastAutoGrowth != nil, fmt.Sprintf("instance %+v, status %+v", st, g)
	})
	if g := storageStatus(c.database(t), walVolume).LastAutoGrowth; g.To.Cmp(grown) != 0 || !strings.Contains(g.Reason, p.name) ||
		!strings.Contains(g.Reason, "the "+vol.What+" volume") {
		t.Errorf("lastAutoGrowth %+v, want to %s for the %s volume of %s", g, grown.String(), vol.What, p.name)
	}

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
	// Grown once: the report of the grown file system is below usedPercent.
	pvc := &corev1.PersistentVolumeClaim{}
	if err := c.api.Client.Get(context.Background(), client.ObjectKeyFromObject(claim), pvc); err != nil {
		t.Fatal(err)
	}
	if request := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; request.Cmp(grown) != 0 {
		t.Errorf("the claim asks for %s, want %s: grown once", request.String(), grown.String())
	}
}

// storageStatus is status.storage, or status.walStorage.
func storageStatus(db *databasev1alpha1.MyDatabase, wal bool) *databasev1alpha1.StorageStatus {
	if wal {
		return db.Status.WALStorage
	}
	return db.Status.Storage
}

func instanceStorage(db *databasev1alpha1.MyDatabase, pod string) *databasev1alpha1.InstanceStorage {
	for _, in := range db.Status.Instances {
		if in.Name == pod {
			return in.Storage
		}
	}
	return nil
}

// used is the share of the file system at path in use, as statfs says.
func used(t *testing.T, path string) float64 {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(path, &fs); err != nil {
		t.Fatal(err)
	}
	return 1 - float64(fs.Bavail)/float64(fs.Blocks)
}

// autoGrowing gives ordinal 0 its claim of volume v, bound at 1 GiB in a
// class that allows expansion (the harness runs no provisioner), and turns
// on v's autoGrow.
func autoGrowing(t *testing.T, c *cluster, v specs.Volume) *corev1.PersistentVolumeClaim {
	ctx := context.Background()
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "tmpfs-" + c.db.Namespace},
		Provisioner: "example.com/tmpfs", AllowVolumeExpansion: new(true)}
	if err := c.api.Client.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	labels := specs.InstanceLabels(c.db)
	labels[databasev1alpha1.LabelOwnerUID] = string(c.db.UID)
	size := resource.MustParse("1Gi")
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: v.ClaimName(c.db, 0), Namespace: c.db.Namespace, Labels: labels},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &class.Name,
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}}},
	}
	if err := c.api.Client.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	claim.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound,
		Capacity: corev1.ResourceList{corev1.ResourceStorage: size}}
	if err := c.api.Client.Status().Update(ctx, claim); err != nil {
		t.Fatal(err)
	}
	c.updateDatabase(t, func(db *databasev1alpha1.MyDatabase) {
		grow := &databasev1alpha1.AutoGrowSpec{UsedPercent: 80, StepPercent: 20, MaxSize: resource.MustParse("2Gi")}
		if v.Name == specs.WALVolumeName {
			db.Spec.WALStorage.AutoGrow = grow
		} else {
			db.Spec.Storage.AutoGrow = grow
		}
	})
	return claim
}

package mydatabase

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
)

// reportedVolume is the report of a server whose file system has capacity
// bytes, used the given share of it.
func reportedVolume(capacity int64, used float64) contract.Report {
	return contract.Report{Role: databasev1alpha1.RoleReplica, Ready: true, Time: time.Now().UTC(),
		Storage: &contract.Storage{CapacityBytes: capacity, AvailableBytes: int64(float64(capacity) * (1 - used))}}
}

func TestVolumeSize(t *testing.T) {
	const gib = int64(1) << 30
	fs := func(size int64) int64 { return size * 97 / 100 } // a file system's share of its volume
	pod := func(name string, r contract.Report) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{contract.AnnotationInstance: r.String()}}}
	}
	grow := &databasev1alpha1.AutoGrowSpec{UsedPercent: 80, StepPercent: 50, MaxSize: resource.MustParse("2Gi")}
	bound := []corev1.PersistentVolumeClaim{claim("data-db-0", "1Gi", corev1.ClaimBound, "1Gi"), claim("data-db-1", "1Gi", corev1.ClaimBound, "1Gi")}
	grown := []corev1.PersistentVolumeClaim{claim("data-db-0", "1536Mi", corev1.ClaimBound, "1536Mi"), claim("data-db-1", "1536Mi", corev1.ClaimBound, "1536Mi")}
	for _, tc := range []struct {
		name   string
		grow   *databasev1alpha1.AutoGrowSpec
		claims []corev1.PersistentVolumeClaim
		pods   []corev1.Pod
		want   string // the size
		growth bool
		atMax  string
	}{
		{"no autoGrow: the spec", nil, grown, []corev1.Pod{pod("db-0", reportedVolume(fs(gib), 0.95))}, "1Gi", false, ""},
		{"below usedPercent", grow, bound, []corev1.Pod{pod("db-0", reportedVolume(fs(gib), 0.7)), pod("db-1", reportedVolume(fs(gib), 0.79))}, "1Gi", false, ""},
		{"past usedPercent: a step of 50%", grow, bound, []corev1.Pod{pod("db-0", reportedVolume(fs(gib), 0.5)), pod("db-1", reportedVolume(fs(gib), 0.85))}, "1536Mi", true, ""},
		{"no report of storage", grow, bound, []corev1.Pod{pod("db-0", contract.Report{Role: "primary"}), {ObjectMeta: metav1.ObjectMeta{Name: "db-1"}}}, "1Gi", false, ""},
		{"a claim still resizing", grow, []corev1.PersistentVolumeClaim{bound[0], claim("data-db-1", "1536Mi", corev1.ClaimBound, "1Gi")},
			[]corev1.Pod{pod("db-0", reportedVolume(fs(gib), 0.9))}, "1536Mi", false, ""},
		{"a report from before the growth reached the file system", grow, grown, []corev1.Pod{pod("db-0", reportedVolume(fs(gib), 0.9))}, "1536Mi", false, ""},
		{"the next step, capped at maxSize", grow, grown, []corev1.Pod{pod("db-0", reportedVolume(fs(1536<<20), 0.9))}, "2Gi", true, ""},
		{"at maxSize", grow, []corev1.PersistentVolumeClaim{claim("data-db-0", "2Gi", corev1.ClaimBound, "2Gi")},
			[]corev1.Pod{pod("db-0", reportedVolume(fs(2*gib), 0.9))}, "2Gi", false, "at spec.storage.autoGrow.maxSize (2Gi)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := newDB("shop", "db", func(db *databasev1alpha1.MyDatabase) {
				db.Spec.Storage.Size = resource.MustParse("1Gi")
				db.Spec.Storage.AutoGrow = tc.grow
			})
			size, growth, atMax := volumeSize(specs.Volumes(db)[0], tc.claims, tc.pods, time.Now())
			if size.String() != tc.want || (growth != nil) != tc.growth || !strings.Contains(atMax, tc.atMax) || (atMax == "") != (tc.atMax == "") {
				t.Fatalf("volumeSize = %s, growth %+v, atMax %q; want %s, growth %v, atMax %q", size.String(), growth, atMax, tc.want, tc.growth, tc.atMax)
			}
			if growth != nil && (growth.To.String() != tc.want || !strings.Contains(growth.Reason, "db-")) {
				t.Errorf("growth %+v", growth)
			}
		})
	}
}

// The WAL volumes grow on the servers' reports of their WAL volume, not of
// their data volume.
func TestWALVolumeSize(t *testing.T) {
	const gib = int64(1) << 30
	report := func(data, wal float64) corev1.Pod {
		r := reportedVolume(gib, data)
		r.Storage.WALCapacityBytes, r.Storage.WALAvailableBytes = gib, int64(float64(gib)*(1-wal))
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-0", Annotations: map[string]string{contract.AnnotationInstance: r.String()}}}
	}
	db := newDB("shop", "db", func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Storage.Size = resource.MustParse("1Gi")
		db.Spec.WALStorage = &databasev1alpha1.StorageSpec{Size: resource.MustParse("1Gi"),
			AutoGrow: &databasev1alpha1.AutoGrowSpec{UsedPercent: 80, StepPercent: 50, MaxSize: resource.MustParse("4Gi")}}
	})
	data, wal := specs.Volumes(db)[0], specs.Volumes(db)[1]
	claims := func(v specs.Volume) []corev1.PersistentVolumeClaim {
		return []corev1.PersistentVolumeClaim{claim(v.ClaimName(db, 0), "1Gi", corev1.ClaimBound, "1Gi")}
	}
	full := []corev1.Pod{report(0.3, 0.85)}
	if size, growth, _ := volumeSize(wal, claims(wal), full, time.Now()); size.String() != "1536Mi" || growth == nil ||
		!strings.Contains(growth.Reason, "the WAL volume of db-0 is 85% full") {
		t.Errorf("the WAL volume 85%% full: size %s, growth %+v; want 1536Mi, a growth for the WAL volume", size.String(), growth)
	}
	if size, growth, _ := volumeSize(wal, claims(wal), []corev1.Pod{report(0.95, 0.3)}, time.Now()); size.String() != "1Gi" || growth != nil {
		t.Errorf("the data volume 95%% full: the WAL volumes are %s, growth %+v; want 1Gi, none", size.String(), growth)
	}
	if size, growth, _ := volumeSize(data, claims(data), full, time.Now()); size.String() != "1Gi" || growth != nil {
		t.Errorf("the data volumes without autoGrow: %s, growth %+v; want 1Gi, none", size.String(), growth)
	}
}

// A server's report of a volume past usedPercent grows every claim by a
// step, through the expansion of a larger size: the StatefulSet is
// replaced, the pods keep running; the next step waits for the file
// system to grow, and none goes past maxSize.
func TestAutoGrowExpandsVolumesBeforeTheyFill(t *testing.T) {
	ns := namespace(t)
	db, old := autoGrowingDatabase(t, ns, "auto", true, 50)
	waitFor(t, db, "Ready with autoGrow", phaseIs(databasev1alpha1.PhaseReady))
	testenv.PublishReport(t, k8s, ns, "auto-1", reportedVolume(1<<30*97/100, 0.9))
	claimAsks(t, ns, "data-auto-0", "1536Mi")
	claimAsks(t, ns, "data-auto-1", "1536Mi")
	sts := replaced(t, old, "1536Mi")
	markReady(t, db)
	waitFor(t, db, "the growth in status", func(db *databasev1alpha1.MyDatabase) error {
		g := db.Status.Storage
		if g == nil || g.Size == nil || g.Size.String() != "1536Mi" || g.LastAutoGrowth == nil ||
			g.LastAutoGrowth.From.String() != "1Gi" || !strings.Contains(g.LastAutoGrowth.Reason, "auto-1 is 90% full") {
			return fmt.Errorf("status.storage %+v", g)
		}
		return nil
	})
	assertNormalEvents(t, db, "AutoGrowing", "ExpandingVolumes")

	// The claims have grown; the file system has not yet (the same report):
	// no second step.
	for _, name := range []string{"data-auto-0", "data-auto-1"} {
		setClaimStatus(t, ns, name, func(s *corev1.PersistentVolumeClaimStatus) {
			s.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1536Mi")}
		})
	}
	waitFor(t, db, "Ready at 1536Mi", phaseIs(databasev1alpha1.PhaseReady))
	reconcileOnce(t, db)
	if got, err := claimRequest(ns, "data-auto-0"); err != nil || got != "1536Mi" {
		t.Fatalf("data-auto-0 asks for %s (err %v) on a report from before the growth, want 1536Mi", got, err)
	}

	// The grown file system fills too: the next step stops at maxSize.
	testenv.PublishReport(t, k8s, ns, "auto-0", reportedVolume(1536<<20*97/100, 0.85))
	claimAsks(t, ns, "data-auto-0", "2Gi")
	claimAsks(t, ns, "data-auto-1", "2Gi")
	replaced(t, sts, "2Gi")
	markReady(t, db)
	for _, name := range []string{"data-auto-0", "data-auto-1"} {
		setClaimStatus(t, ns, name, func(s *corev1.PersistentVolumeClaimStatus) {
			s.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}
		})
	}
	testenv.PublishReport(t, k8s, ns, "auto-0", reportedVolume(2<<30*97/100, 0.95))
	eventually(t, "a warning that autoGrow is at maxSize", func() error {
		list := &eventsv1.EventList{}
		if err := k8s.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == databasev1alpha1.ReasonAutoGrowAtMax && strings.Contains(e.Note, "auto-0 is 95% full") {
				return nil
			}
		}
		return fmt.Errorf("no %s event", databasev1alpha1.ReasonAutoGrowAtMax)
	})
	if got, err := claimRequest(ns, "data-auto-1"); err != nil || got != "2Gi" {
		t.Errorf("data-auto-1 asks for %s (err %v), want maxSize 2Gi", got, err)
	}
}

// A class that cannot expand stalls the growth with the way back, records
// no growth, and leaves the claims as they are.
func TestAutoGrowStallsWhenVolumesCannotGrow(t *testing.T) {
	ns := namespace(t)
	db, _ := autoGrowingDatabase(t, ns, "fixed", false, 20)
	testenv.PublishReport(t, k8s, ns, "fixed-0", reportedVolume(1<<30*97/100, 0.9))
	waitFor(t, db, "Stalled on the class", stalledWith(databasev1alpha1.ReasonStorageClassNotExpandable,
		"set spec.storage.autoGrow.maxSize to 1Gi, or remove autoGrow"))
	if g := db.Status.Storage; g == nil || g.LastAutoGrowth != nil {
		t.Errorf("status.storage %+v, want no growth recorded", g)
	}
	if got, err := claimRequest(ns, "data-fixed-0"); err != nil || got != "1Gi" {
		t.Errorf("data-fixed-0 asks for %s (err %v), want 1Gi", got, err)
	}
}

// autoGrowingDatabase is readyDatabase on a class of its own that can
// expand or not, with autoGrow at 80% used by step percent, up to 2Gi.
func autoGrowingDatabase(t *testing.T, ns, name string, expandable bool, step int32) (*databasev1alpha1.MyDatabase, *appsv1.StatefulSet) {
	t.Helper()
	class := newStorageClass(t, name+"-"+ns, expandable)
	db, sts, _ := readyDatabase(t, ns, name, &class)
	update(t, db, func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Storage.AutoGrow = &databasev1alpha1.AutoGrowSpec{UsedPercent: 80, StepPercent: step, MaxSize: resource.MustParse("2Gi")}
	})
	return db, sts
}

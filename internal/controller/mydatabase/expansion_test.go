package mydatabase

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
)

// envtest has no storage driver, kubelet, garbage collector or StatefulSet
// controller: the tests below play each of them, by writing what it would
// write, where the expansion needs it.

func newStorageClass(t *testing.T, name string, expandable bool) string {
	t.Helper()
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: "example.com/test",
		AllowVolumeExpansion: new(expandable)}
	if err := k8s.Create(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
	return name
}

// boundClaim creates the data claim of ordinal i as the StatefulSet
// controller would, then plays the volume binder: bound, with capacity.
func boundClaim(t *testing.T, db *databasev1alpha1.MyDatabase, ordinal int, capacity string) {
	t.Helper()
	pvc := dataVolume(t, db, ordinal, false)
	setClaimStatus(t, db.Namespace, pvc.Name, func(s *corev1.PersistentVolumeClaimStatus) {
		s.Phase = corev1.ClaimBound
		s.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(capacity)}
	})
}

// setClaimStatus plays the volume binder, the resizer or the kubelet.
func setClaimStatus(t *testing.T, ns, name string, mutate func(*corev1.PersistentVolumeClaimStatus)) {
	t.Helper()
	eventually(t, "the status of PVC "+name, func() error {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := get(ns, name, pvc); err != nil {
			return err
		}
		mutate(&pvc.Status)
		return k8s.Status().Update(context.Background(), pvc)
	})
}

// serverPod creates the pod of ordinal i as the StatefulSet controller
// would: from its template, controlled by it.
func serverPod(t *testing.T, sts *appsv1.StatefulSet, ordinal int) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: sts.Namespace, Name: fmt.Sprintf("%s-%d", sts.Name, ordinal),
			Labels:          sts.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}},
		Spec: *sts.Spec.Template.Spec.DeepCopy(),
	}
	for _, tmpl := range sts.Spec.VolumeClaimTemplates {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: tmpl.Name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: tmpl.Name + "-" + pod.Name}}})
	}
	if err := k8s.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	return pod
}

// collectStatefulSet plays the garbage collector on a StatefulSet the
// operator deleted: with orphan propagation (the orphan finalizer) it
// releases the pods and lets the StatefulSet go; with any other it deletes
// the pods, as the real one would, so that the test sees them replaced.
func collectStatefulSet(t *testing.T, old *appsv1.StatefulSet) {
	t.Helper()
	ctx := context.Background()
	sts := &appsv1.StatefulSet{}
	eventually(t, "StatefulSet "+old.Name+" deleted", func() error {
		err := get(old.Namespace, old.Name, sts)
		if apierrors.IsNotFound(err) || (err == nil && (sts.UID != old.UID || !sts.DeletionTimestamp.IsZero())) {
			return nil
		}
		return fmt.Errorf("not deleted (err %v)", err)
	})
	orphaned := sts.UID == old.UID && slices.Contains(sts.Finalizers, metav1.FinalizerOrphanDependents)
	pods := &corev1.PodList{}
	if err := k8s.List(ctx, pods, client.InNamespace(old.Namespace)); err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if ref := metav1.GetControllerOf(pod); ref == nil || ref.UID != old.UID {
			continue
		}
		if !orphaned {
			t.Errorf("StatefulSet %s was deleted without orphan propagation: the garbage collector deletes pod %s", old.Name, pod.Name)
			if err := k8s.Delete(ctx, pod); err != nil {
				t.Fatal(err)
			}
			continue
		}
		patch := client.MergeFrom(pod.DeepCopy())
		pod.OwnerReferences = nil
		if err := k8s.Patch(ctx, pod, patch); err != nil {
			t.Fatal(err)
		}
	}
	if orphaned {
		patch := client.MergeFrom(sts.DeepCopy())
		sts.Finalizers = slices.DeleteFunc(sts.Finalizers, func(f string) bool { return f == metav1.FinalizerOrphanDependents })
		if err := k8s.Patch(ctx, sts, patch); err != nil {
			t.Fatal(err)
		}
	}
}

// resizingWith waits for Reconciling StorageResizing with a message holding
// every part, at the current generation, with Ready False.
func resizingWith(parts ...string) func(*databasev1alpha1.MyDatabase) error {
	reason := databasev1alpha1.ReasonStorageResizing
	return func(db *databasev1alpha1.MyDatabase) error {
		c, ready := condition(db, databasev1alpha1.ConditionReconciling), condition(db, databasev1alpha1.ConditionReady)
		switch {
		case c == nil || c.Reason != reason || c.ObservedGeneration != db.Generation:
			return fmt.Errorf("Reconciling %+v, want reason %s at generation %d", c, reason, db.Generation)
		case ready == nil || ready.Status != metav1.ConditionFalse:
			return fmt.Errorf("Ready %+v, want False", ready)
		}
		for _, p := range parts {
			if !strings.Contains(c.Message, p) {
				return fmt.Errorf("Reconciling message %q lacks %q", c.Message, p)
			}
		}
		return nil
	}
}

func claimRequest(ns, name string) (string, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := get(ns, name, pvc); err != nil {
		return "", err
	}
	return pvc.Spec.Resources.Requests.Storage().String(), nil
}

// claimAsks waits until the claim asks for size.
func claimAsks(t *testing.T, ns, name, size string) {
	t.Helper()
	eventually(t, name+" asks for "+size, func() error {
		if got, err := claimRequest(ns, name); err != nil || got != size {
			return fmt.Errorf("requests %s (err %v)", got, err)
		}
		return nil
	})
}

// replaced plays the garbage collector on the old StatefulSet and waits
// for the operator to create the new one, asking for size.
func replaced(t *testing.T, old *appsv1.StatefulSet, size string) *appsv1.StatefulSet {
	t.Helper()
	collectStatefulSet(t, old)
	sts := &appsv1.StatefulSet{}
	eventually(t, "a new StatefulSet asking for "+size, func() error {
		if err := get(old.Namespace, old.Name, sts); err != nil {
			return err
		}
		if sts.UID == old.UID || templateSize(sts) != size {
			return fmt.Errorf("uid %s (old %s), template %s", sts.UID, old.UID, templateSize(sts))
		}
		return nil
	})
	return sts
}

func templateSize(sts *appsv1.StatefulSet) string {
	return sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().String()
}

// readyDatabase creates a MyDatabase of two servers with their pods and
// claims of 1Gi, Ready.
func readyDatabase(t *testing.T, ns, name string, class *string) (*databasev1alpha1.MyDatabase, *appsv1.StatefulSet, []*corev1.Pod) {
	t.Helper()
	db := create(t, newDB(ns, name, func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Replicas = ptr.To[int32](2)
		db.Spec.Storage.StorageClassName = class
	}))
	sts := &appsv1.StatefulSet{}
	eventually(t, "the StatefulSet", exists(ns, name, sts))
	pods := []*corev1.Pod{serverPod(t, sts, 0), serverPod(t, sts, 1)}
	boundClaim(t, db, 0, "1Gi")
	boundClaim(t, db, 1, "1Gi")
	markReady(t, db)
	waitFor(t, db, "Ready", phaseIs(databasev1alpha1.PhaseReady))
	return db, sts, pods
}

// A larger spec.storage.size: each claim asks for it, the StatefulSet is
// deleted with orphan propagation and created again with the new template,
// the pods are the same, and the MyDatabase reports each claim until its
// capacity shows the size (Stalled while the driver says it cannot), then
// Ready; converged, it writes nothing.
func TestStorageGrowthExpandsVolumesInPlace(t *testing.T) {
	ns := namespace(t)
	class := newStorageClass(t, "expandable-"+ns, true)
	db, old, pods := readyDatabase(t, ns, "grow", &class)

	update(t, db, func(db *databasev1alpha1.MyDatabase) { db.Spec.Storage.Size = resource.MustParse("2Gi") })
	claimAsks(t, ns, "data-grow-0", "2Gi")
	claimAsks(t, ns, "data-grow-1", "2Gi")
	waitFor(t, db, "Reconciling while the StatefulSet is replaced", resizingWith(
		"re-creating StatefulSet grow", "pods keep running", "data-grow-0 (1Gi of 2Gi), data-grow-1 (1Gi of 2Gi)"))
	assertOwnedChild(t, db, replaced(t, old, "2Gi"))
	markReady(t, db)
	waitFor(t, db, "both claims reported", resizingWith(
		"expanding the data volumes; not at 2Gi yet: data-grow-0 (1Gi of 2Gi), data-grow-1 (1Gi of 2Gi)"))

	// The driver is done with data-grow-0; its file system is next.
	setClaimStatus(t, ns, "data-grow-0", func(s *corev1.PersistentVolumeClaimStatus) {
		s.Conditions = []corev1.PersistentVolumeClaimCondition{{
			Type: corev1.PersistentVolumeClaimFileSystemResizePending, Status: corev1.ConditionTrue}}
	})
	waitFor(t, db, "the pending file system reported", resizingWith("data-grow-0 (FileSystemResizePending", "data-grow-1 (1Gi of 2Gi)"))
	setClaimStatus(t, ns, "data-grow-0", func(s *corev1.PersistentVolumeClaimStatus) {
		s.Conditions, s.Capacity = nil, corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}
	})
	waitFor(t, db, "only data-grow-1 left", func(db *databasev1alpha1.MyDatabase) error {
		if c := condition(db, databasev1alpha1.ConditionReconciling); c != nil && strings.Contains(c.Message, "data-grow-0") {
			return fmt.Errorf("still names data-grow-0: %s", c.Message)
		}
		return resizingWith("data-grow-1 (1Gi of 2Gi)")(db)
	})

	// The driver gives up on data-grow-1 for a while: a person must look.
	setClaimStatus(t, ns, "data-grow-1", func(s *corev1.PersistentVolumeClaimStatus) {
		s.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{
			corev1.ResourceStorage: corev1.PersistentVolumeClaimControllerResizeInfeasible}
	})
	waitFor(t, db, "Stalled on the driver", stalledWith(databasev1alpha1.ReasonStorageResizeFailed,
		"data-grow-1 (ControllerResizeInfeasible)"))
	setClaimStatus(t, ns, "data-grow-1", func(s *corev1.PersistentVolumeClaimStatus) {
		s.AllocatedResourceStatuses = nil
		s.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}
	})
	waitFor(t, db, "Ready at 2Gi", phaseIs(databasev1alpha1.PhaseReady))

	for _, pod := range pods {
		got := &corev1.Pod{}
		if err := get(ns, pod.Name, got); err != nil || got.UID != pod.UID || !got.DeletionTimestamp.IsZero() {
			t.Errorf("pod %s: uid %s (was %s), deleting %v, err %v: the pods must keep running",
				pod.Name, got.UID, pod.UID, !got.DeletionTimestamp.IsZero(), err)
		}
	}
	assertNormalEvents(t, db, "ExpandingVolumes", "ReplacingStatefulSet")
	before := writes.WritesIn(ns)
	if before["apply StatefulSet"] == 0 {
		t.Fatalf("no StatefulSet apply counted in namespace %s: %v", ns, before)
	}
	reconcileOnce(t, db)
	reconcileOnce(t, db)
	if after := writes.WritesIn(ns); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("a converged MyDatabase was written to:\nbefore %v\nafter  %v", before, after)
	}
}

func assertNormalEvents(t *testing.T, db *databasev1alpha1.MyDatabase, reasons ...string) {
	t.Helper()
	eventually(t, fmt.Sprintf("events %v", reasons), func() error {
		list := &eventsv1.EventList{}
		if err := k8s.List(context.Background(), list, client.InNamespace(db.Namespace)); err != nil {
			return err
		}
		for _, reason := range reasons {
			if !slices.ContainsFunc(list.Items, func(e eventsv1.Event) bool {
				return e.Regarding.Name == db.Name && e.Type == corev1.EventTypeNormal && e.Reason == reason
			}) {
				return fmt.Errorf("no %s event", reason)
			}
		}
		return nil
	})
}

// When the volumes cannot grow, the MyDatabase is Stalled, with the class
// or the claim named and what to do; no claim is patched, the StatefulSet
// is kept, and every other change is applied. A class that starts allowing
// expansion resumes it with no further action.
func TestStorageGrowthStallsWhenVolumesCannotGrow(t *testing.T) {
	for name, tc := range map[string]struct {
		class  func(t *testing.T, ns string) *string
		before func(t *testing.T, class *string)
		reason string
		words  []string
		lift   func(t *testing.T, class *string)
	}{
		"the class does not allow expansion": {
			class:  func(t *testing.T, ns string) *string { return new(newStorageClass(t, "fixed-"+ns, false)) },
			reason: databasev1alpha1.ReasonStorageClassNotExpandable,
			words:  []string{`StorageClass "fixed-`, "does not allow volume expansion", "from 1Gi to 5Gi", "allowVolumeExpansion", "set spec.storage.size back to 1Gi"},
			lift: func(t *testing.T, class *string) {
				sc := &storagev1.StorageClass{}
				if err := get("", *class, sc); err != nil {
					t.Fatal(err)
				}
				sc.AllowVolumeExpansion = new(true)
				if err := k8s.Update(context.Background(), sc); err != nil {
					t.Fatal(err)
				}
			},
		},
		"the claims have no class": {
			class:  func(*testing.T, string) *string { return nil },
			reason: databasev1alpha1.ReasonStorageResize,
			words:  []string{"PVC data-still-0 has no StorageClass", "expand the volume by hand"},
		},
		"the class is gone": {
			class: func(t *testing.T, ns string) *string { return new(newStorageClass(t, "gone-"+ns, true)) },
			before: func(t *testing.T, class *string) {
				if err := k8s.Delete(context.Background(), &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: *class}}); err != nil {
					t.Fatal(err)
				}
			},
			reason: databasev1alpha1.ReasonStorageResize,
			words:  []string{`StorageClass "gone-`, "no longer exists", "create it again with allowVolumeExpansion: true"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			ns := namespace(t)
			class := tc.class(t, ns)
			db, old, _ := readyDatabase(t, ns, "still", class)
			if tc.before != nil {
				tc.before(t, class)
			}
			update(t, db, func(db *databasev1alpha1.MyDatabase) {
				db.Spec.Storage.Size = resource.MustParse("5Gi")
				db.Spec.Replicas = ptr.To[int32](3)
			})
			waitFor(t, db, "Stalled", stalledWith(tc.reason, tc.words[0]))
			for _, w := range tc.words {
				if c := condition(db, databasev1alpha1.ConditionStalled); !strings.Contains(c.Message, w) {
					t.Errorf("Stalled message %q lacks %q", c.Message, w)
				}
			}
			sts := &appsv1.StatefulSet{}
			eventually(t, "the other change applied", func() error {
				if err := get(ns, "still", sts); err != nil {
					return err
				}
				if *sts.Spec.Replicas != 3 {
					return fmt.Errorf("replicas %d", *sts.Spec.Replicas)
				}
				return nil
			})
			if sts.UID != old.UID || !sts.DeletionTimestamp.IsZero() || templateSize(sts) != "1Gi" {
				t.Errorf("StatefulSet uid %s (was %s), deleting %v, template %s: want it kept with 1Gi",
					sts.UID, old.UID, !sts.DeletionTimestamp.IsZero(), templateSize(sts))
			}
			for _, pvc := range []string{"data-still-0", "data-still-1"} {
				if got, err := claimRequest(ns, pvc); err != nil || got != "1Gi" {
					t.Errorf("PVC %s requests %s (err %v), want it untouched", pvc, got, err)
				}
			}
			if tc.lift == nil {
				return
			}
			tc.lift(t, class)
			claimAsks(t, ns, "data-still-0", "5Gi")
			replaced(t, old, "5Gi")
		})
	}
}

// spec.walStorage added to a running MyDatabase: the StatefulSet is
// replaced (its volumeClaimTemplates are immutable) with a WAL volume's
// template, and a pod template that mounts it and tells the instance
// manager where the WAL goes, which rolls the servers; the data claims
// are untouched. A larger spec.walStorage.size then grows the WAL claims
// alone, as a larger spec.storage.size grows the data claims.
func TestWALStorageAddedAndGrown(t *testing.T) {
	ns := namespace(t)
	class := newStorageClass(t, "expandable-"+ns, true)
	db, old, pods := readyDatabase(t, ns, "wal", &class)

	update(t, db, func(db *databasev1alpha1.MyDatabase) {
		db.Spec.WALStorage = &databasev1alpha1.StorageSpec{Size: resource.MustParse("1Gi"), StorageClassName: &class}
	})
	waitFor(t, db, "Reconciling while the StatefulSet is replaced", resizingWith(
		"re-creating StatefulSet wal so that its volumeClaimTemplates ask for a WAL volume of 1Gi for every server", "pods keep running"))
	sts := replaced(t, old, "1Gi")
	if got := claimSize(sts, specs.WALVolumeName); got == nil || got.String() != "1Gi" {
		t.Fatalf("the new StatefulSet's WAL template asks for %v, want 1Gi", got)
	}
	ctr := sts.Spec.Template.Spec.Containers[0]
	if !slices.ContainsFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == specs.WALVolumeName && m.MountPath == specs.WALMountPath
	}) || !slices.ContainsFunc(ctr.Env, func(e corev1.EnvVar) bool { return e.Name == contract.EnvWALDir && e.Value == specs.WALDir }) {
		t.Errorf("the database container mounts %+v with env %+v: want the WAL volume at %s and %s=%s",
			ctr.VolumeMounts, ctr.Env, specs.WALMountPath, contract.EnvWALDir, specs.WALDir)
	}
	if sts.Spec.Template.Annotations[databasev1alpha1.AnnotationPodTemplate] == pods[0].Annotations[databasev1alpha1.AnnotationPodTemplate] {
		t.Error("the pod template digest did not change with the WAL volume: the servers would not roll onto it")
	}
	waitFor(t, db, "status.walStorage", func(db *databasev1alpha1.MyDatabase) error {
		if w := db.Status.WALStorage; w == nil || w.Size == nil || w.Size.String() != "1Gi" {
			return fmt.Errorf("status.walStorage %+v", w)
		}
		return nil
	})

	// The StatefulSet controller makes the WAL claims with the new pods.
	for i := range 2 {
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("wal-wal-%d", i),
			Labels: sts.Spec.VolumeClaimTemplates[1].Labels}, Spec: sts.Spec.VolumeClaimTemplates[1].Spec}
		if err := k8s.Create(context.Background(), pvc); err != nil {
			t.Fatal(err)
		}
		setClaimStatus(t, ns, pvc.Name, func(s *corev1.PersistentVolumeClaimStatus) {
			s.Phase, s.Capacity = corev1.ClaimBound, corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
		})
	}
	update(t, db, func(db *databasev1alpha1.MyDatabase) { db.Spec.WALStorage.Size = resource.MustParse("2Gi") })
	claimAsks(t, ns, "wal-wal-0", "2Gi")
	claimAsks(t, ns, "wal-wal-1", "2Gi")
	waitFor(t, db, "Reconciling while the StatefulSet is replaced again", resizingWith(
		"so that its volumeClaimTemplates ask for WAL volumes of 2Gi", "wal-wal-0 (1Gi of 2Gi)"))
	grown := replaced(t, sts, "1Gi")
	if got := claimSize(grown, specs.WALVolumeName); got == nil || got.String() != "2Gi" {
		t.Errorf("the WAL template asks for %v, want 2Gi", got)
	}
	for i := range 2 {
		if got, err := claimRequest(ns, fmt.Sprintf("data-wal-%d", i)); err != nil || got != "1Gi" {
			t.Errorf("data-wal-%d asks for %s (%v), want 1Gi: untouched", i, got, err)
		}
	}
}

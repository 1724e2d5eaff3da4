package mydatabase

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// claim is a data PVC as the API server shows it: requests, phase,
// status.capacity (none when empty), and whatever else mutate sets.
func claim(name, request string, phase corev1.PersistentVolumeClaimPhase, capacity string,
	mutate ...func(*corev1.PersistentVolumeClaim)) corev1.PersistentVolumeClaim {
	pvc := corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{Resources: corev1.VolumeResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(request)}}},
		Status: corev1.PersistentVolumeClaimStatus{Phase: phase},
	}
	if capacity != "" {
		pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(capacity)}
	}
	for _, m := range mutate {
		m(&pvc)
	}
	return pvc
}

func fsResizePending(pvc *corev1.PersistentVolumeClaim) {
	pvc.Status.Conditions = append(pvc.Status.Conditions, corev1.PersistentVolumeClaimCondition{
		Type: corev1.PersistentVolumeClaimFileSystemResizePending, Status: corev1.ConditionTrue})
}

func allocation(status corev1.ClaimResourceStatus) func(*corev1.PersistentVolumeClaim) {
	return func(pvc *corev1.PersistentVolumeClaim) {
		pvc.Status.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{corev1.ResourceStorage: status}
	}
}

func TestPlanVolumes(t *testing.T) {
	const bound, pending = corev1.ClaimBound, corev1.ClaimPending
	type plan struct {
		Grow           []string
		NotYet, Failed []string
	}
	for name, tc := range map[string]struct {
		claims []corev1.PersistentVolumeClaim
		want   plan
	}{
		"converged": {
			claims: []corev1.PersistentVolumeClaim{claim("data-x-0", "2Gi", bound, "2Gi"), claim("data-x-1", "2Gi", bound, "2Gi")},
		},
		"no claims yet": {},
		"a larger size: every bound claim grows": {
			claims: []corev1.PersistentVolumeClaim{claim("data-x-0", "1Gi", bound, "1Gi"), claim("data-x-1", "1Gi", bound, "1Gi")},
			want: plan{Grow: []string{"data-x-0", "data-x-1"},
				NotYet: []string{"data-x-0 (1Gi of 2Gi)", "data-x-1 (1Gi of 2Gi)"}},
		},
		"2048Mi is 2Gi, not a change": {
			claims: []corev1.PersistentVolumeClaim{claim("data-x-0", "2048Mi", bound, "2048Mi")},
		},
		"patched, the driver at work": {
			claims: []corev1.PersistentVolumeClaim{claim("data-x-0", "2Gi", bound, "1Gi")},
			want:   plan{NotYet: []string{"data-x-0 (1Gi of 2Gi)"}},
		},
		"patched, the file system next": {
			claims: []corev1.PersistentVolumeClaim{claim("data-x-0", "2Gi", bound, "1Gi", fsResizePending)},
			want:   plan{NotYet: []string{"data-x-0 (FileSystemResizePending: the kubelet grows the file system)"}},
		},
		"a driver that gave more than asked": {
			claims: []corev1.PersistentVolumeClaim{claim("data-x-0", "1Gi", bound, "5Gi")},
		},
		"an unbound claim cannot be patched yet": {
			claims: []corev1.PersistentVolumeClaim{claim("data-x-1", "1Gi", pending, "")},
			want:   plan{NotYet: []string{"data-x-1 (not bound yet; expanded once bound)"}},
		},
		"an unbound claim already asking for the size": {
			claims: []corev1.PersistentVolumeClaim{claim("data-x-1", "2Gi", pending, "")},
		},
		"the driver cannot": {
			claims: []corev1.PersistentVolumeClaim{
				claim("data-x-0", "2Gi", bound, "1Gi", allocation(corev1.PersistentVolumeClaimControllerResizeInfeasible)),
				claim("data-x-1", "2Gi", bound, "1Gi", allocation(corev1.PersistentVolumeClaimNodeResizeInfeasible)),
				claim("data-x-2", "2Gi", bound, "1Gi", allocation(corev1.PersistentVolumeClaimControllerResizeInProgress)),
			},
			want: plan{Failed: []string{"data-x-0 (ControllerResizeInfeasible)", "data-x-1 (NodeResizeInfeasible)"},
				NotYet: []string{"data-x-2 (1Gi of 2Gi)"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			p := planVolumes(tc.claims, resource.MustParse("2Gi"))
			got := plan{NotYet: p.notYet, Failed: p.failed}
			for _, pvc := range p.grow {
				got.Grow = append(got.Grow, pvc.Name)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

func TestClaimSizeAndTheSizeApplied(t *testing.T) {
	sts := &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{VolumeClaimTemplates: []corev1.PersistentVolumeClaim{
		{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: corev1.PersistentVolumeClaimSpec{Resources: corev1.VolumeResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("9Gi")}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "data"}, Spec: corev1.PersistentVolumeClaimSpec{Resources: corev1.VolumeResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}},
	}}}
	live := claimSize(sts, specs.DataVolumeName)
	if live == nil || live.String() != "1Gi" {
		t.Fatalf("claimSize = %v, want the data template's 1Gi", live)
	}
	if claimSize(nil, specs.DataVolumeName) != nil || claimSize(sts, specs.WALVolumeName) != nil {
		t.Error("claimSize without a StatefulSet or a WAL template is not nil")
	}

	db := newDB("shop", "orders", func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Storage.Size = resource.MustParse("2Gi")
		db.Spec.WALStorage = &databasev1alpha1.StorageSpec{Size: resource.MustParse("3Gi")}
	})
	data, wal := specs.Volumes(db)[0], specs.Volumes(db)[1]
	kept := withClaimSize(db, data, live)
	if kept == db || kept.Spec.Storage.Size.String() != "1Gi" || db.Spec.Storage.Size.String() != "2Gi" || kept.Spec.WALStorage.Size.String() != "3Gi" {
		t.Errorf("withClaimSize: %s (spec now %s), want a copy with 1Gi and the spec untouched",
			kept.Spec.Storage.Size.String(), db.Spec.Storage.Size.String())
	}
	if kept := withClaimSize(db, wal, live); kept.Spec.WALStorage.Size.String() != "1Gi" || kept.Spec.Storage.Size.String() != "2Gi" ||
		db.Spec.WALStorage.Size.String() != "3Gi" {
		t.Errorf("withClaimSize of the WAL volumes: WAL %s, data %s; want 1Gi, 2Gi", kept.Spec.WALStorage.Size.String(), kept.Spec.Storage.Size.String())
	}
	if got := withClaimSize(db, data, nil); got != db {
		t.Error("withClaimSize without a StatefulSet changed the MyDatabase")
	}
	same := resource.MustParse("2048Mi")
	if got := withClaimSize(db, data, &same); got != db {
		t.Error("withClaimSize of an equal quantity made a copy")
	}
}

// Claim events wake a pass only while an expansion moves on.
func TestClaimResizedPredicate(t *testing.T) {
	bound := func(capacity string, mutate ...func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
		pvc := claim("data-x-0", "2Gi", corev1.ClaimBound, capacity, mutate...)
		return &pvc
	}
	unbound := claim("data-x-0", "2Gi", corev1.ClaimPending, "")
	for name, tc := range map[string]struct {
		was, is *corev1.PersistentVolumeClaim
		want    bool
	}{
		"binding":               {&unbound, bound("2Gi"), false},
		"a label":               {bound("1Gi"), bound("1Gi", func(p *corev1.PersistentVolumeClaim) { p.Labels = map[string]string{"a": "b"} }), false},
		"the request patched":   {bound("1Gi"), bound("1Gi", func(p *corev1.PersistentVolumeClaim) { p.Spec.Resources.Requests = nil }), false},
		"capacity grew":         {bound("1Gi"), bound("2Gi"), true},
		"file system next":      {bound("1Gi"), bound("1Gi", fsResizePending), true},
		"the driver gave up":    {bound("1Gi"), bound("1Gi", allocation(corev1.PersistentVolumeClaimControllerResizeInfeasible)), true},
		"1024Mi is 1Gi as well": {bound("1Gi"), bound("1024Mi"), false},
		"its pod went away": {bound("1Gi"), bound("1Gi", func(p *corev1.PersistentVolumeClaim) {
			p.Status.Conditions = []corev1.PersistentVolumeClaimCondition{{Type: corev1.PersistentVolumeClaimUnused, Status: corev1.ConditionTrue}}
		}), false},
		"resized by the kubelet": {bound("1Gi", fsResizePending), bound("2Gi"), true},
	} {
		t.Run(name, func(t *testing.T) {
			if got := claimResized.Update(event.UpdateEvent{ObjectOld: tc.was, ObjectNew: tc.is}); got != tc.want {
				t.Errorf("claimResized = %v, want %v", got, tc.want)
			}
		})
	}
	if claimResized.Create(event.CreateEvent{Object: bound("1Gi")}) || claimResized.Delete(event.DeleteEvent{Object: bound("1Gi")}) {
		t.Error("a claim's creation or deletion passes")
	}
}

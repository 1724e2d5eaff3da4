package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func storage(q string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(q)}
}

// boundPair is a claim bound to its volume, asking for request, the
// volume of volumeCap and the claim showing claimCap.
func boundPair(request, volumeCap, claimCap string) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "data-orders-0", UID: "claim-uid"},
		Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: "pvc-1", Resources: corev1.VolumeResourceRequirements{Requests: storage(request)}},
		Status:     corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, Capacity: storage(claimCap)},
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-1"},
		Spec: corev1.PersistentVolumeSpec{Capacity: storage(volumeCap),
			ClaimRef: &corev1.ObjectReference{Namespace: "shop", Name: "data-orders-0", UID: "claim-uid"}},
	}
	return pvc, pv
}

// stage summarises what an expansion has reached.
type stage struct {
	Volume, Claim, Allocated string
	Pending                  bool
	ResizeStatus             corev1.ClaimResourceStatus
}

func stageOf(pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume) stage {
	return stage{
		Volume: pv.Spec.Capacity.Storage().String(), Claim: pvc.Status.Capacity.Storage().String(),
		Allocated: pvc.Status.AllocatedResources.Storage().String(), Pending: fileSystemResizePending(pvc),
		ResizeStatus: pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage],
	}
}

// An expansion from the claim's patch to the end, one write at a time, as
// a resizer and a kubelet make them; the objects given are never changed.
func TestResizeStepsToTheEnd(t *testing.T) {
	pvc, pv := boundPair("2Gi", "1Gi", "1Gi")
	pvc.Status.Conditions = []corev1.PersistentVolumeClaimCondition{{Type: "Other", Status: corev1.ConditionTrue}}
	want := []stage{
		{Volume: "2Gi", Claim: "1Gi", Allocated: "0"},
		{Volume: "2Gi", Claim: "1Gi", Allocated: "2Gi", Pending: true, ResizeStatus: corev1.PersistentVolumeClaimNodeResizePending},
		{Volume: "2Gi", Claim: "2Gi", Allocated: "2Gi"},
	}
	var got []stage
	for range 5 {
		before, beforePV := pvc.DeepCopy(), pv.DeepCopy()
		grown, claim := resizeStep(pvc, pv)
		if diff := cmp.Diff(before, pvc); diff != "" || !cmp.Equal(beforePV, pv) {
			t.Fatalf("resizeStep changed its arguments:\n%s", diff)
		}
		switch {
		case grown != nil && claim != nil:
			t.Fatal("two writes in one step")
		case grown != nil:
			pv = grown
		case claim != nil:
			pvc = claim
		default:
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("stages (-want +got):\n%s", diff)
			}
			if len(pvc.Status.Conditions) != 1 || pvc.Status.Conditions[0].Type != "Other" {
				t.Errorf("conditions at the end %+v, want only the unrelated one kept", pvc.Status.Conditions)
			}
			return
		}
		got = append(got, stageOf(pvc, pv))
	}
	t.Fatalf("no end after 5 steps: %+v", got)
}

// Where to go on from, after a restart anywhere, and what is not ours.
func TestResizeStepFrom(t *testing.T) {
	for name, tc := range map[string]struct {
		pair func() (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume)
		want string // "volume", "claim" or ""
	}{
		"nothing asked": {func() (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
			return boundPair("1Gi", "1Gi", "1Gi")
		}, ""},
		"a larger size asked": {func() (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
			return boundPair("2Gi", "1Gi", "1Gi")
		}, "volume"},
		"the volume grown, the claim not told": {func() (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
			return boundPair("2Gi", "2Gi", "1Gi")
		}, "claim"},
		"a volume larger than asked": {func() (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
			return boundPair("2Gi", "5Gi", "1Gi")
		}, "claim"},
		"not bound": {func() (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
			pvc, pv := boundPair("2Gi", "1Gi", "1Gi")
			pvc.Status.Phase = corev1.ClaimPending
			return pvc, pv
		}, ""},
		"the volume is bound to another claim": {func() (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
			pvc, pv := boundPair("2Gi", "1Gi", "1Gi")
			pv.Spec.ClaimRef.UID = "an-older-claim"
			return pvc, pv
		}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			grown, claim := resizeStep(tc.pair())
			got := ""
			if grown != nil {
				got = "volume"
			}
			if claim != nil {
				got += "claim"
			}
			if got != tc.want {
				t.Errorf("next write %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNeedsResize(t *testing.T) {
	pvc, _ := boundPair("2Gi", "1Gi", "1Gi")
	if !needsResize(pvc) {
		t.Error("a bound claim asking for more than it shows is not looked at")
	}
	done, _ := boundPair("2Gi", "2Gi", "2Gi")
	unbound, _ := boundPair("2Gi", "1Gi", "1Gi")
	unbound.Status, unbound.Spec.VolumeName = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}, ""
	if needsResize(done) || needsResize(unbound) {
		t.Error("a claim at its size, or unbound, is looked at")
	}
}

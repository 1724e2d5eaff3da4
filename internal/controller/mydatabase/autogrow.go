package mydatabase

import (
	"fmt"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
)

// Auto-growth (spec.storage.autoGrow for the data volumes,
// spec.walStorage.autoGrow for the WAL volumes). The size the volumes
// should have is the spec's size, or what auto-growth grew the claims to:
// the claims remember it in their requests, so nothing else has to. A new
// growth is asked for only
//
//   - when there are claims, and every one has the capacity it asks for
//     (none is resizing);
//   - on a report whose file system has that size: a report made before
//     the last growth reached the file system shows the old size and is
//     not counted (a file system reports at least volumeSlack of its
//     claim, and a volume grown by 10% or more reported less than that
//     before it grew);
//   - when that report shows the volume more than usedPercent full.
//
// Each growth adds stepPercent of the current size, rounded up to a MiB,
// and never asks for more than maxSize. The rest is the expansion of a
// larger size in the spec (alignVolumes).

// volumeSlack is the least share of its claim's size a file system
// reports (ext4 and xfs keep a few percent for their metadata).
const volumeSlack = 0.93

// storageState is the storage part of the status (servers).
type storageState struct {
	size   resource.Quantity
	growth *databasev1alpha1.AutoGrowth // the growth this pass asked for, nil for none
}

// volumeSize is the size the volumes v should have, and the growth that
// makes it larger than the claims' now, if any; atMax says why a full
// volume cannot grow, "" when none is full or it could.
func volumeSize(v specs.Volume, claims []corev1.PersistentVolumeClaim, pods []corev1.Pod, now time.Time) (
	size resource.Quantity, growth *databasev1alpha1.AutoGrowth, atMax string) {
	size = v.Size()
	grow := v.Spec.AutoGrow
	if grow == nil {
		return size, nil, ""
	}
	settled := true
	for i := range claims {
		request, capacity := claims[i].Spec.Resources.Requests[corev1.ResourceStorage], claims[i].Status.Capacity[corev1.ResourceStorage]
		if request.Cmp(size) > 0 {
			size = request
		}
		if claims[i].Status.Phase != corev1.ClaimBound || capacity.Cmp(request) < 0 {
			settled = false
		}
	}
	if !settled || len(claims) == 0 {
		return size, nil, ""
	}
	server, used := fullest(pods, v, size)
	if server == "" || used*100 <= float64(grow.UsedPercent) {
		return size, nil, ""
	}
	reason := fmt.Sprintf("the %s volume of %s is %.0f%% full (autoGrow at %d%%)", v.What, server, math.Floor(used*100), grow.UsedPercent)
	if size.Cmp(grow.MaxSize) >= 0 {
		return size, nil, fmt.Sprintf("%s, and the volumes are at %s.autoGrow.maxSize (%s): raise it, "+
			"or make room in the database", reason, v.Field, grow.MaxSize.String())
	}
	const mib = 1 << 20
	step := (size.Value()*int64(grow.StepPercent)/100 + mib - 1) / mib * mib
	to := resource.NewQuantity(min(size.Value()+step, grow.MaxSize.Value()), resource.BinarySI)
	if to.Value() == grow.MaxSize.Value() {
		to = &grow.MaxSize
	}
	return *to, &databasev1alpha1.AutoGrowth{Time: metav1.NewTime(now), From: size, To: *to, Reason: reason}, ""
}

// fullest is the server whose reported volume v is the fullest, and how
// full (0 to 1), counting only reports whose file system has the claims'
// size; "" when none does.
func fullest(pods []corev1.Pod, v specs.Volume, size resource.Quantity) (server string, used float64) {
	for i := range pods {
		rep, err := contract.Parse(pods[i].Annotations[contract.AnnotationInstance])
		if err != nil || rep.Storage == nil {
			continue
		}
		capacity, available := rep.Storage.CapacityBytes, rep.Storage.AvailableBytes
		if v.Name == specs.WALVolumeName {
			capacity, available = rep.Storage.WALCapacityBytes, rep.Storage.WALAvailableBytes
		}
		if capacity == 0 || float64(capacity) < volumeSlack*float64(size.Value()) {
			continue
		}
		if u := 1 - float64(available)/float64(capacity); u > used {
			server, used = pods[i].Name, u
		}
	}
	return server, used
}

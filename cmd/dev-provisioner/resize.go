package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// annProvisionedBy names the provisioner of a dynamically provisioned
// volume (set by sig-storage-lib-external-provisioner).
const annProvisionedBy = "pv.kubernetes.io/provisioned-by"

// A real cluster expands a volume in two parts: a CSI driver's
// external-resizer grows the volume and raises its PersistentVolume's
// capacity, then the kubelet of the node that mounts it grows the file
// system and raises the claim's status.capacity, the claim showing the
// condition FileSystemResizePending in between. A directory has no size to
// grow and a KWOK node has no kubelet, so the resizer below plays both
// parts, one write each, for the volumes this provisioner made:
//
//  1. the PersistentVolume's capacity is raised to what the claim asks for;
//  2. the claim gets FileSystemResizePending (status.allocatedResources the
//     new size, its resize status NodeResizePending), as after a CSI
//     resizer;
//  3. the claim's status.capacity is raised and the condition removed, as
//     the kubelet does once the file system is grown.
//
// Each step is decided from the objects as they are, so a restart in
// between goes on where it stopped. On the real-pod node the kubelet also
// finishes step 3 (expanding a directory-backed local volume is a no-op
// for it); whichever writes first, the other then finds nothing to do.

// resizeStep returns the next write an expansion of pvc, bound to pv, needs:
// the PersistentVolume or the claim (its status) to write, or neither when
// there is nothing to do. Its arguments are not modified.
func resizeStep(pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume) (
	*corev1.PersistentVolume, *corev1.PersistentVolumeClaim) {
	want, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok || pvc.Status.Phase != corev1.ClaimBound || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != pvc.UID {
		return nil, nil
	}
	capacity := pvc.Status.Capacity[corev1.ResourceStorage]
	if capacity.Cmp(want) >= 0 {
		return nil, nil
	}
	if volume := pv.Spec.Capacity[corev1.ResourceStorage]; volume.Cmp(want) < 0 {
		grown := pv.DeepCopy()
		grown.Spec.Capacity = corev1.ResourceList{corev1.ResourceStorage: want}
		return grown, nil
	}
	claim := pvc.DeepCopy()
	st := &claim.Status
	if !fileSystemResizePending(pvc) {
		st.Conditions = append(st.Conditions, corev1.PersistentVolumeClaimCondition{
			Type: corev1.PersistentVolumeClaimFileSystemResizePending, Status: corev1.ConditionTrue,
			LastTransitionTime: metav1.Now(), Reason: "VolumeExpanded",
			Message: "dev-provisioner expanded the volume; the file system is next, as a kubelet would do it",
		})
		st.AllocatedResources = corev1.ResourceList{corev1.ResourceStorage: want}
		st.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{
			corev1.ResourceStorage: corev1.PersistentVolumeClaimNodeResizePending}
		return nil, claim
	}
	st.Capacity = corev1.ResourceList{corev1.ResourceStorage: want}
	st.Conditions = nil
	for _, c := range pvc.Status.Conditions {
		if c.Type != corev1.PersistentVolumeClaimFileSystemResizePending && c.Type != corev1.PersistentVolumeClaimResizing {
			st.Conditions = append(st.Conditions, c)
		}
	}
	delete(st.AllocatedResourceStatuses, corev1.ResourceStorage)
	return nil, claim
}

func fileSystemResizePending(pvc *corev1.PersistentVolumeClaim) bool {
	for _, c := range pvc.Status.Conditions {
		if c.Type == corev1.PersistentVolumeClaimFileSystemResizePending && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// resizer runs resizeStep for every claim bound to a volume of this
// provisioner whose status.capacity is below what it asks for.
type resizer struct {
	client      kubernetes.Interface
	provisioner string
	claims      corelisters.PersistentVolumeClaimLister
	queue       workqueue.TypedRateLimitingInterface[cache.ObjectName]
}

// runResizer watches the claims and expands the volumes until ctx ends.
func runResizer(ctx context.Context, client kubernetes.Interface, provisioner string, resync time.Duration) error {
	factory := informers.NewSharedInformerFactory(client, resync)
	claims := factory.Core().V1().PersistentVolumeClaims()
	r := &resizer{client: client, provisioner: provisioner, claims: claims.Lister(),
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName]())}
	defer r.queue.ShutDown()
	enqueue := func(obj any) {
		if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok && needsResize(pvc) {
			r.queue.Add(cache.MetaObjectToName(pvc))
		}
	}
	if _, err := claims.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), claims.Informer().HasSynced) {
		return ctx.Err()
	}
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		for r.next(ctx) {
		}
	}, time.Second)
	<-ctx.Done()
	return nil
}

// needsResize filters the claim events worth a look.
func needsResize(pvc *corev1.PersistentVolumeClaim) bool {
	want, capacity := pvc.Spec.Resources.Requests[corev1.ResourceStorage], pvc.Status.Capacity[corev1.ResourceStorage]
	return pvc.Status.Phase == corev1.ClaimBound && pvc.Spec.VolumeName != "" && capacity.Cmp(want) < 0
}

func (r *resizer) next(ctx context.Context) bool {
	key, quit := r.queue.Get()
	if quit {
		return false
	}
	defer r.queue.Done(key)
	if err := r.expand(ctx, key); err != nil {
		klog.InfoS("Expanding a volume failed, retrying", "pvc", key.String(), "err", err)
		r.queue.AddRateLimited(key)
		return true
	}
	r.queue.Forget(key)
	return true
}

// expand takes the claim through every step it needs, reading the objects
// from the API server first: the informer may still show them before this
// process's own last write.
func (r *resizer) expand(ctx context.Context, key cache.ObjectName) error {
	if cached, err := r.claims.PersistentVolumeClaims(key.Namespace).Get(key.Name); err != nil || !needsResize(cached) {
		return nil // gone, or done
	}
	pvc, err := r.client.CoreV1().PersistentVolumeClaims(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	pv, err := r.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil || pv.Annotations[annProvisionedBy] != r.provisioner {
		return err // another provisioner's volume is not ours to expand
	}
	// Three steps at most; a fourth would mean a write that did not stick.
	for range 4 {
		grownPV, claim := resizeStep(pvc, pv)
		switch {
		case grownPV != nil:
			if pv, err = r.client.CoreV1().PersistentVolumes().Update(ctx, grownPV, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("raising the capacity of PV %s: %w", grownPV.Name, err)
			}
			klog.InfoS("Expanded volume", "pv", pv.Name, "pvc", klog.KObj(pvc), "capacity", pv.Spec.Capacity.Storage().String())
		case claim != nil:
			claims := r.client.CoreV1().PersistentVolumeClaims(claim.Namespace)
			if pvc, err = claims.UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("updating the status of PVC %s: %w", klog.KObj(claim), err)
			}
			klog.InfoS("Updated claim after expansion", "pvc", klog.KObj(pvc),
				"capacity", pvc.Status.Capacity.Storage().String(), "fileSystemResizePending", fileSystemResizePending(pvc))
		default:
			return nil
		}
	}
	return fmt.Errorf("PVC %s: no progress after three writes", klog.KObj(pvc))
}

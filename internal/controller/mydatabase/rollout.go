package mydatabase

import (
	"context"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// The StatefulSet's update strategy is OnDelete: its controller never
// restarts a pod for a new template, the operator does, in the order a
// database needs rather than from the highest ordinal down. One pod at a
// time, and only while every pod is ready:
//
//  1. each outdated replica is deleted, and comes back from the new
//     template;
//  2. when only the primary is outdated, a switchover makes the updated
//     replica with the most WAL the primary (switchover.go);
//  3. the old primary, now a replica, is deleted as in 1.
//
// So a minor version or a setting that needs a restart costs one
// switchover, never a primary restart. A primary is restarted in place
// only when there is no replica that reports itself ready to take over (a
// single server, or pods that run no instance manager) or when it is a
// replica MyDatabase's designated primary, which takes no writes to hand
// over (pickTarget says why in the event); a switchover that
// fails is tried again. Pods that lack a volume the StatefulSet's claim
// templates gained (spec.walStorage added) go in ordinal order instead
// (replaceLacking), which may cost two switchovers.

// +kubebuilder:rbac:groups=core,resources=pods,verbs=delete

// rollout is the component of the rolling update of the servers, primary last.
type rollout struct {
	*kit
	*scope
	servers input[serversResult] // the applied StatefulSet
	// switchover: a rollout waits for a switchover to end, and starts one
	// (startSwitchover) when only the primary is outdated.
	switchover input[switchoverResult]
	out        *result[rolloutResult]
}

// rolloutResult is what rollout hands over to managerUpdate.
type rolloutResult struct {
	// switchover: the rollout asked the primary to hand over.
	switchover bool
}

// reconcile takes the next step of a rolling update.
func (r *rollout) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	out := r.out.produce()
	sts := r.servers.get().applied
	if !settled(db, sts, r.switchover.get().idle) {
		return nil
	}
	revision := sts.Status.UpdateRevision
	var outdated []*corev1.Pod
	for i := range r.pods {
		pod := &r.pods[i]
		if !pod.DeletionTimestamp.IsZero() || !specs.PodReady(pod) {
			return nil // one at a time, and never while a server is down
		}
		if pod.Labels[appsv1.ControllerRevisionHashLabelKey] != revision {
			outdated = append(outdated, pod)
		}
	}
	if len(outdated) == 0 || int32(len(r.pods)) != specs.Replicas(db) {
		return nil
	}
	primary := r.primaryPod()
	if lacking := lackingVolumes(sts, outdated); lacking != nil {
		return r.replaceLacking(ctx, obs, out, lacking, primary)
	}
	// Replicas first, the highest ordinal first (the StatefulSet's order).
	slices.Reverse(outdated)
	for _, pod := range outdated {
		if pod.Name != primary {
			r.event(db, corev1.EventTypeNormal, "RollingUpdate", "Restarting replica %s with the new spec", pod.Name)
			return r.deleteExact(ctx, pod)
		}
	}
	target, why := pickTarget(r.scope, "")
	if why == "" {
		var err error
		out.switchover, err = startSwitchover(ctx, r.kit, r.scope, obs, target, databasev1alpha1.SwitchoverRollingUpdate)
		return err
	}
	r.event(db, corev1.EventTypeNormal, "RollingUpdate", "Restarting the primary %s with the new spec: %s", primary, why)
	return r.deleteExact(ctx, outdated[0])
}

// lackingVolumes is the first of the pods (in ordinal order) that does not
// mount a claim of every volumeClaimTemplate of the StatefulSet, nil when
// each does.
func lackingVolumes(sts *appsv1.StatefulSet, pods []*corev1.Pod) *corev1.Pod {
	for _, pod := range pods {
		for _, t := range sts.Spec.VolumeClaimTemplates {
			if !slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool {
				return v.Name == t.Name && v.PersistentVolumeClaim != nil
			}) {
				return pod
			}
		}
	}
	return nil
}

// replaceLacking replaces the pod of the lowest ordinal that lacks a volume
// of the StatefulSet's claim templates. The StatefulSet controller stops at
// such a pod: it tries to add the volume to it, which the API server
// refuses (a pod's volumes are immutable), and goes no further in ordinal
// order, so a pod of a higher ordinal deleted before it would not come
// back. The lowest goes first, then; a primary after a switchover to the
// highest ordinal, which goes last (one more switchover when its turn
// comes).
func (r *rollout) replaceLacking(ctx context.Context, obs *observation, out *rolloutResult, pod *corev1.Pod, primary string) error {
	db := r.db
	if pod.Name != primary {
		r.event(db, corev1.EventTypeNormal, "RollingUpdate", "Restarting replica %s with the new spec and its new volumes", pod.Name)
		return r.deleteExact(ctx, pod)
	}
	target, why := "", "the highest ordinal is the primary"
	if last := r.pods[len(r.pods)-1].Name; last != primary {
		target, why = pickTarget(r.scope, last)
	}
	if why != "" {
		target, why = pickTarget(r.scope, "")
	}
	if why == "" {
		var err error
		out.switchover, err = startSwitchover(ctx, r.kit, r.scope, obs, target, databasev1alpha1.SwitchoverRollingUpdate)
		return err
	}
	r.event(db, corev1.EventTypeNormal, "RollingUpdate", "Restarting the primary %s with the new spec: %s", primary, why)
	return r.deleteExact(ctx, pod)
}

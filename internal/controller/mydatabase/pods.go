package mydatabase

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// podRoles is the component of the role labels of the pods.
type podRoles struct {
	*kit
	*scope
}

// reconcile labels each pod primary or replica (the primary is the
// Lease's holder), which is how the Services find them, and stalls a
// restore that failed or makes no progress. The old primary loses its
// label before the new one gets it: the rw Service never leads to both
// (a pooler that resumes on the new primary would otherwise have some of
// its connections sent to the old one, a replica now).
func (r *podRoles) reconcile(ctx context.Context, obs *observation) error {
	if obs.stalled == nil {
		obs.stalled = restoreStalled(r.db, r.pods)
	}
	for _, role := range []string{databasev1alpha1.RoleReplica, databasev1alpha1.RolePrimary} {
		for i := range r.pods {
			pod := &r.pods[i]
			if (pod.Name == r.primaryPod()) != (role == databasev1alpha1.RolePrimary) ||
				!pod.DeletionTimestamp.IsZero() || pod.Labels[databasev1alpha1.LabelRole] == role {
				continue
			}
			patch := client.MergeFrom(pod.DeepCopy())
			pod.Labels[databasev1alpha1.LabelRole] = role
			if err := r.Patch(ctx, pod, patch); err != nil && !apierrors.IsNotFound(err) {
				return objectError("label", pod, pod.Name, err)
			}
		}
	}
	return nil
}

// podCreation is the component of the check of why the StatefulSet controller cannot
// create a pod.
type podCreation struct {
	*kit
	*scope
	servers input[serversResult] // the applied StatefulSet
}

// reconcile reports why the StatefulSet controller cannot create a
// server's pod or volume claim: it does not write that into the
// StatefulSet's status, only into its events (FailedCreate), so a quota
// on claims or a policy that denies the pods would otherwise leave the
// MyDatabase Provisioning forever without a word. It looks only while the
// StatefulSet controller has seen the current spec and has a pod to create
// (creating); the newest of FailedCreate and SuccessfulCreate tells whether
// the failure still holds. Listing events is a scan of the namespace's
// events on the API server, so a rollout that only waits for a pod to
// become Ready lists none: with many MyDatabases starting together in one
// namespace, looking on every pass made each pass slower the more there
// were (docs/benchmarks.md, B9).
func (r *podCreation) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	sts := r.servers.get().applied
	if sts == nil || sts.Spec.Replicas == nil || sts.Status.ObservedGeneration < sts.Generation ||
		sts.Status.Replicas >= *sts.Spec.Replicas || !creating(sts, r.pods) || obs.blocked() {
		return nil
	}
	events := &corev1.EventList{}
	err := r.APIReader.List(ctx, events, client.InNamespace(db.Namespace), client.MatchingFields{
		"involvedObject.kind": "StatefulSet", "involvedObject.name": sts.Name, "involvedObject.uid": string(sts.UID)})
	if apierrors.IsForbidden(err) {
		log(ctx).V(1).Info("Not allowed to list events, not checking pod creation", "statefulSet", sts.Name)
		return nil
	}
	if err != nil {
		return objectError("list", &corev1.Event{}, "", err)
	}
	var latest *corev1.Event
	for i := range events.Items {
		e := &events.Items[i]
		if (e.Reason == "FailedCreate" || e.Reason == "SuccessfulCreate") &&
			(latest == nil || latest.LastTimestamp.Before(&e.LastTimestamp) ||
				(latest.LastTimestamp.Equal(&e.LastTimestamp) && e.Reason == "SuccessfulCreate")) {
			latest = e
		}
	}
	if latest != nil && latest.Reason == "FailedCreate" {
		if obs.stalled = createFailure(db, sts.Name, latest.Message); obs.stalled == nil {
			log(ctx).V(1).Info("The StatefulSet controller cannot create a server yet", "event", latest.Message)
		}
	}
	obs.podsMissing = obs.stalled == nil
	return nil
}

// creating reports whether the StatefulSet controller has a pod to create
// now, rather than one to wait for. With OrderedReady pod management it
// creates the lowest missing ordinal once every pod below it is Ready (and
// not being deleted), and until then waits without a word; with Parallel,
// every missing pod is created at once. pods are the StatefulSet's, as the
// cache shows them: one it does not show yet only makes this look once
// more.
func creating(sts *appsv1.StatefulSet, pods []corev1.Pod) bool {
	if sts.Spec.PodManagementPolicy == appsv1.ParallelPodManagement {
		return true
	}
	for ordinal := range *sts.Spec.Replicas {
		name := fmt.Sprintf("%s-%d", sts.Name, ordinal)
		i := slices.IndexFunc(pods, func(p corev1.Pod) bool { return p.Name == name })
		switch {
		case i < 0:
			return true
		case !specs.PodReady(&pods[i]) || !pods[i].DeletionTimestamp.IsZero():
			return false
		}
	}
	return false
}

// passing tells the refusals of a pod or claim that resolve without anyone
// acting: a namespace whose default service account is not made yet, a
// quota whose usage is not computed yet, a namespace being deleted.
func passing(words string) bool {
	for _, w := range []string{"error looking up service account", "status unknown for quota", "being terminated"} {
		if strings.Contains(words, w) {
			return true
		}
	}
	return false
}

// createFailure stalls on the refusals of a pod or claim that a person must
// lift; anything else (see passing) resolves with the StatefulSet
// controller's own retries, and gives nil.
func createFailure(db *databasev1alpha1.MyDatabase, sts, words string) *blocker {
	var reason string
	switch {
	case strings.Contains(words, "exceeded quota"):
		reason = databasev1alpha1.ReasonQuotaExceeded
	case admissionDenial(words) || (strings.Contains(words, " is forbidden: ") && !passing(words)):
		reason = databasev1alpha1.ReasonAdmissionDenied
	case strings.Contains(words, " is invalid"):
		reason = databasev1alpha1.ReasonInvalidChild
	default:
		return nil
	}
	return &blocker{Reason: reason, Message: fmt.Sprintf("the StatefulSet controller cannot create the servers of StatefulSet %s: %s. %s; "+
		"it retries on its own", sts, quote(words), whatToDo(db, reason))}
}

// restoreStalled is the blocker of a restore that failed or makes no
// progress, nil otherwise: only a person can give the archive the WAL it
// lacks, or choose another target.
func restoreStalled(db *databasev1alpha1.MyDatabase, pods []corev1.Pod) *blocker {
	r := restoring(pods)
	if db.Status.CurrentVersion != "" || r == nil || (r.Phase != contract.RestoreFailed && !r.Stalled) {
		return nil
	}
	reason, what := databasev1alpha1.ReasonRestoreFailed, "failed"
	if r.Phase != contract.RestoreFailed {
		reason, what = databasev1alpha1.ReasonRestoreStalled, "makes no progress"
	}
	restore := "the restore of base backup " + r.BackupID
	if r.BackupID == "" {
		restore = "the restore of spec.bootstrap.recovery" // no backup chosen
	}
	return &blocker{Reason: reason, Message: fmt.Sprintf("%s on %s %s: %s. Make the object store of "+
		"spec.bootstrap.recovery hold the backup and the WAL the restore needs, or create the MyDatabase again with another "+
		"spec.bootstrap.recovery (kubectl logs %s shows the server's own words)", restore, r.pod, what, r.Message, r.pod)}
}

// stillRunning names the server pods a stop waits for, each with what
// holds it: one terminating stops now; one not ready holds the others too,
// since an OrderedReady StatefulSet stops no pod while another is not
// Running and Ready.
func stillRunning(pods []corev1.Pod) string {
	names := make([]string, 0, len(pods))
	for i := range pods {
		switch p := &pods[i]; {
		case !p.DeletionTimestamp.IsZero():
			names = append(names, p.Name+" (stopping)")
		case !specs.PodReady(p):
			names = append(names, p.Name+" (not ready: the StatefulSet stops no server while one is not ready)")
		default:
			names = append(names, p.Name)
		}
	}
	return strings.Join(names, ", ")
}

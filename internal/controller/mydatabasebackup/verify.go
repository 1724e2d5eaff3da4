package mydatabasebackup

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
)

// +kubebuilder:rbac:groups=core,resources=pods,verbs=create;delete

// verifyRequested is true when b asks for a verification it has not had:
// a value of AnnotationVerify that status.verification does not answer
// yet, or answers with one still running.
func verifyRequested(b *databasev1alpha1.MyDatabaseBackup) bool {
	want := b.Annotations[databasev1alpha1.AnnotationVerify]
	v := b.Status.Verification
	return want != "" && b.Status.Phase == databasev1alpha1.BackupCompleted && (v == nil || v.Request != want || !v.Finished())
}

// verify moves a completed backup's verification on by one step: a new
// request starts a pod (once the pod of an earlier one is gone), a
// running one is followed until its pod ends, and a finished one has its
// pod deleted, with its volume, once the status holds the result. The
// status is written before the pod is created or deleted, so a crash in
// between starts no second pod and loses no result.
func (r *Reconciler) verify(ctx context.Context, b *databasev1alpha1.MyDatabaseBackup) error {
	want := b.Annotations[databasev1alpha1.AnnotationVerify]
	v := b.Status.Verification
	if v.Finished() && (v.Request == want || want == "") {
		// Its pod, if the cache still holds it, goes: from the cache alone,
		// as every pass over a verified backup comes here.
		pod := &corev1.Pod{}
		err := r.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: specs.VerifyPodName(b)}, pod)
		if err != nil || !metav1.IsControlledBy(pod, b) {
			return client.IgnoreNotFound(err)
		}
		return r.deletePod(ctx, pod)
	}
	if want == "" || b.Status.Phase != databasev1alpha1.BackupCompleted {
		return nil
	}
	pod, err := r.verifyPod(ctx, b)
	now := metav1.NewTime(r.Clock.Now())
	switch {
	case err != nil:
		return err
	case pod != nil && !metav1.IsControlledBy(pod, b):
		b.Status.Verification = &databasev1alpha1.BackupVerification{Request: want, StartedAt: &now}
		r.finish(b, databasev1alpha1.VerificationError, fmt.Sprintf(
			"pod %s, where backup %s would be verified, is not this backup's: delete or rename it, then ask again", pod.Name, b.Name))
		return nil
	case v != nil && v.Request == want:
		r.follow(ctx, b, pod)
		return nil
	case pod != nil:
		// A pod of an earlier request, overtaken: it goes first, and its
		// deletion brings the next pass.
		return r.deletePod(ctx, pod)
	}
	b.Status.Verification = &databasev1alpha1.BackupVerification{Request: want, Result: databasev1alpha1.VerificationRunning,
		Pod: specs.VerifyPodName(b), StartedAt: &now,
		Message: fmt.Sprintf("restoring backup %s and the archive after it in pod %s", b.Status.BackupID, specs.VerifyPodName(b))}
	return nil
}

// verifyPod is the pod of b's verification, nil when there is none (it
// may be another's, which the caller checks). The
// cache may not hold a pod created a moment ago: its absence is read again
// from the API server.
func (r *Reconciler) verifyPod(ctx context.Context, b *databasev1alpha1.MyDatabaseBackup) (*corev1.Pod, error) {
	key := client.ObjectKey{Namespace: b.Namespace, Name: specs.VerifyPodName(b)}
	pod := &corev1.Pod{}
	err := r.Get(ctx, key, pod)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, pod)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return pod, nil
}

func (r *Reconciler) deletePod(ctx context.Context, pod *corev1.Pod) error {
	if pod == nil || !pod.DeletionTimestamp.IsZero() {
		return nil
	}
	return client.IgnoreNotFound(r.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}))
}

// follow moves a running verification on: it creates the pod the status
// names when there is none yet, and takes the result of one that ended.
func (r *Reconciler) follow(ctx context.Context, b *databasev1alpha1.MyDatabaseBackup, pod *corev1.Pod) {
	v := b.Status.Verification
	if pod == nil {
		if err := r.startPod(ctx, b); err != nil {
			r.finish(b, databasev1alpha1.VerificationError, err.Error())
		}
		return
	}
	switch pod.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed:
		result, message := verificationOutcome(pod)
		r.finish(b, databasev1alpha1.VerificationResult(result.Result), message)
		v.ReachedLSN, v.Databases = result.ReachedLSN, int32(result.Databases)
	default:
		v.Message = fmt.Sprintf("restoring backup %s and the archive after it in pod %s%s", b.Status.BackupID, pod.Name, podWaiting(pod))
	}
}

// startPod creates the verification pod from the MyDatabase as it is
// now: its image, resources and object store.
func (r *Reconciler) startPod(ctx context.Context, b *databasev1alpha1.MyDatabaseBackup) error {
	db, err := r.database(ctx, b)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("there is no MyDatabase %q to take the image and object store from", b.Spec.Database)
	case err != nil:
		return err
	case db.Spec.Backup == nil:
		return fmt.Errorf("MyDatabase %q has no spec.backup: nothing says where the backup is", db.Name)
	}
	if err := r.Create(ctx, specs.VerifyPod(db, b, r.Platform)); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the verification pod: %w", err)
	}
	return nil
}

// finish ends the verification with result and message.
func (r *Reconciler) finish(b *databasev1alpha1.MyDatabaseBackup, result databasev1alpha1.VerificationResult, message string) {
	v := b.Status.Verification
	now := metav1.NewTime(r.Clock.Now())
	v.Result, v.Message, v.FinishedAt = result, message, &now
	if v.StartedAt != nil {
		v.Duration = &metav1.Duration{Duration: now.Sub(v.StartedAt.Time).Round(1e9)}
	}
}

// verificationOutcome reads what an ended verification pod says: the
// instance manager's result in its termination message, or, when there
// is none (the pod was evicted, killed, or never ran), an error that
// says what Kubernetes knows.
func verificationOutcome(pod *corev1.Pod) (contract.Verification, string) {
	var ended *corev1.ContainerStateTerminated
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == specs.VerifyContainerName {
			ended = s.State.Terminated
		}
	}
	var out contract.Verification
	if ended != nil && json.Unmarshal([]byte(ended.Message), &out) == nil && out.Result != "" {
		if _, known := contract.VerificationExitCode[out.Result]; known {
			return out, out.Message
		}
	}
	out.Result = string(databasev1alpha1.VerificationError)
	why := fmt.Sprintf("pod %s ended %s without a result", pod.Name, pod.Status.Phase)
	switch {
	case pod.Status.Reason != "":
		why += fmt.Sprintf(" (%s: %s)", pod.Status.Reason, pod.Status.Message)
	case ended != nil:
		why += fmt.Sprintf(" (exit code %d, %s): %s", ended.ExitCode, ended.Reason, strings.TrimSpace(clip(ended.Message, 1024)))
	}
	return out, why
}

// podWaiting says why a verification pod that has not ended is not
// running, if Kubernetes says why: it cannot be scheduled, its image does
// not pull, its volume is not provisioned.
func podWaiting(pod *corev1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
			return ": it is not scheduled: " + c.Message
		}
	}
	for _, s := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
		if w := s.State.Waiting; w != nil && w.Reason != "" && w.Reason != "PodInitializing" && w.Reason != "ContainerCreating" {
			return fmt.Sprintf(": container %s waits: %s %s", s.Name, w.Reason, w.Message)
		}
	}
	return ""
}

// setVerified sets ConditionVerified from status.verification.
func setVerified(b *databasev1alpha1.MyDatabaseBackup, now time.Time) {
	v := b.Status.Verification
	if v == nil {
		meta.RemoveStatusCondition(&b.Status.Conditions, databasev1alpha1.ConditionVerified)
		return
	}
	c := metav1.Condition{Type: databasev1alpha1.ConditionVerified, ObservedGeneration: b.Generation,
		Message: clip(v.Message, maxConditionMessage), LastTransitionTime: metav1.NewTime(now)}
	switch v.Result {
	case databasev1alpha1.VerificationPassed:
		c.Status, c.Reason = metav1.ConditionTrue, databasev1alpha1.ReasonVerificationPassed
	case databasev1alpha1.VerificationFailed:
		c.Status, c.Reason = metav1.ConditionFalse, databasev1alpha1.ReasonVerificationFailed
	case databasev1alpha1.VerificationError:
		c.Status, c.Reason = metav1.ConditionFalse, databasev1alpha1.ReasonVerificationError
	default:
		c.Status, c.Reason = metav1.ConditionUnknown, databasev1alpha1.ReasonVerificationRunning
	}
	if c.Message == "" {
		c.Message = string(v.Result)
	}
	meta.SetStatusCondition(&b.Status.Conditions, c)
}

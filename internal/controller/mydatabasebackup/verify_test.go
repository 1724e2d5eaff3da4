package mydatabasebackup

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	clientretry "k8s.io/client-go/util/retry"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
)

// TestVerification plays the verification pod through three requests on
// one completed backup: each new value of the annotation brings one pod,
// which is never a server (no selector of the database matches it); what
// the pod says when it ends goes to status.verification and the Verified
// condition, and the pod is deleted once it is said.
func TestVerification(t *testing.T) {
	ns := namespace(t)
	db := newDB(ns, "orders")
	withBackup(db)
	db = create(t, db)
	b := backupObject(t, ns, "orders-1", db.Name, databasev1alpha1.BackupTargetPreferReplica)
	if err := clientretry.RetryOnConflict(clientretry.DefaultRetry, func() error {
		if err := get(ns, b.Name, b); err != nil {
			return err
		}
		b.Status.Phase, b.Status.BackupID, b.Status.EndLSN = databasev1alpha1.BackupCompleted, "20261207T050000Z", "0/5000100"
		return k8s.Status().Update(context.Background(), b)
	}); err != nil {
		t.Fatal(err)
	}

	ended := func(request string, phase corev1.PodPhase, reason string, result *contract.Verification) {
		t.Helper()
		annotate(t, b, request)
		pod := &corev1.Pod{}
		eventually(t, "the verification pod of "+request, func() error {
			if err := get(ns, specs.VerifyPodName(b), pod); err != nil {
				return err
			}
			if !pod.DeletionTimestamp.IsZero() {
				return fmt.Errorf("the pod of an earlier request is being deleted")
			}
			return verified(b, request, databasev1alpha1.VerificationRunning, metav1.ConditionUnknown)
		})
		if !metav1.IsControlledBy(pod, b) || labels.SelectorFromSet(specs.SelectorLabels(db)).Matches(labels.Set(pod.Labels)) {
			t.Fatalf("pod owned by %v with labels %v: want the backup's, and no server's selector", pod.OwnerReferences, pod.Labels)
		}
		if env := pod.Spec.Containers[0].Env; !hasEnv(env, contract.EnvRestoreBackupID, b.Status.BackupID) {
			t.Fatalf("the pod's environment %v lacks %s=%s", env, contract.EnvRestoreBackupID, b.Status.BackupID)
		}
		pod.Status.Phase, pod.Status.Reason = phase, reason
		if result != nil {
			pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: specs.VerifyContainerName, State: corev1.ContainerState{
				Terminated: &corev1.ContainerStateTerminated{ExitCode: int32(contract.VerificationExitCode[result.Result]), Message: string(result.Encode())}}}}
		}
		if err := k8s.Status().Update(context.Background(), pod); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the verification pod of "+request+" deleted once its result is in the status", func() error {
			if err := get(ns, pod.Name, &corev1.Pod{}); err == nil {
				return fmt.Errorf("still there")
			}
			return nil
		})
	}

	ended("first", corev1.PodFailed, "", &contract.Verification{Result: contract.VerificationFailed,
		Message: "WAL file 000000010000000000000005 does not restore: CRC check failed"})
	if err := verified(b, "first", databasev1alpha1.VerificationFailed, metav1.ConditionFalse); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.Status.Verification.Message, "000000010000000000000005") || b.Status.Verification.FinishedAt == nil {
		t.Errorf("verification %+v: want the failure's message and when it finished", b.Status.Verification)
	}

	ended("second", corev1.PodSucceeded, "", &contract.Verification{Result: contract.VerificationPassed, ReachedLSN: "0/9000000",
		Databases: 3, Message: "restored to the end of the archive; pg_amcheck found no corruption in 3 databases"})
	if err := verified(b, "second", databasev1alpha1.VerificationPassed, metav1.ConditionTrue); err != nil {
		t.Fatal(err)
	}
	if v := b.Status.Verification; v.ReachedLSN != "0/9000000" || v.Databases != 3 || v.Duration == nil {
		t.Errorf("verification %+v: want reachedLSN 0/9000000, 3 databases and a duration", v)
	}

	ended("third", corev1.PodFailed, "Evicted", nil)
	if err := verified(b, "third", databasev1alpha1.VerificationError, metav1.ConditionFalse); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.Status.Verification.Message, "Evicted") {
		t.Errorf("message %q: want why the pod ended", b.Status.Verification.Message)
	}
}

// annotate asks for a verification of b.
func annotate(t *testing.T, b *databasev1alpha1.MyDatabaseBackup, request string) {
	t.Helper()
	if err := clientretry.RetryOnConflict(clientretry.DefaultRetry, func() error {
		if err := get(b.Namespace, b.Name, b); err != nil {
			return err
		}
		metav1.SetMetaDataAnnotation(&b.ObjectMeta, databasev1alpha1.AnnotationVerify, request)
		return k8s.Update(context.Background(), b)
	}); err != nil {
		t.Fatal(err)
	}
}

// verified reads b and says whether its verification answers request with
// result, and its Verified condition is status.
func verified(b *databasev1alpha1.MyDatabaseBackup, request string, result databasev1alpha1.VerificationResult, status metav1.ConditionStatus) error {
	if err := get(b.Namespace, b.Name, b); err != nil {
		return err
	}
	v := b.Status.Verification
	c := meta.FindStatusCondition(b.Status.Conditions, databasev1alpha1.ConditionVerified)
	if v == nil || v.Request != request || v.Result != result || c == nil || c.Status != status {
		return fmt.Errorf("verification %+v, condition %+v: want %s answered %s, Verified %s", v, c, request, result, status)
	}
	return nil
}

func hasEnv(env []corev1.EnvVar, name, value string) bool {
	for _, e := range env {
		if e.Name == name && e.Value == value {
			return true
		}
	}
	return false
}

// TestVerificationOutcome: a pod's result is the instance manager's when
// its termination message holds one, and an error that says what
// Kubernetes knows when not.
func TestVerificationOutcome(t *testing.T) {
	terminated := func(code int32, reason, message string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "b-verify"}, Status: corev1.PodStatus{Phase: corev1.PodFailed,
			ContainerStatuses: []corev1.ContainerStatus{{Name: specs.VerifyContainerName, State: corev1.ContainerState{
				Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: message}}}}}}
	}
	for name, tc := range map[string]struct {
		pod          *corev1.Pod
		result, want string
	}{
		"the instance manager's result": {terminated(1, "Error", string(contract.Verification{Result: contract.VerificationFailed,
			Message: "pg_amcheck found corruption"}.Encode())), contract.VerificationFailed, "pg_amcheck found corruption"},
		"killed for memory": {terminated(137, "OOMKilled", ""), contract.VerificationError, "exit code 137, OOMKilled"},
		"a log, not a result (FallbackToLogsOnError)": {terminated(2, "Error", "panic: runtime error"),
			contract.VerificationError, "panic: runtime error"},
		"a result it does not know": {terminated(0, "Completed", `{"result":"Maybe"}`), contract.VerificationError, "without a result"},
		"past its deadline": {&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "b-verify"}, Status: corev1.PodStatus{Phase: corev1.PodFailed,
			Reason: "DeadlineExceeded", Message: "Pod was active on the node longer than the specified deadline"}},
			contract.VerificationError, "DeadlineExceeded"},
	} {
		got, message := verificationOutcome(tc.pod)
		if got.Result != tc.result || !strings.Contains(message, tc.want) {
			t.Errorf("%s: %s %q, want %s mentioning %q", name, got.Result, message, tc.result, tc.want)
		}
	}
}

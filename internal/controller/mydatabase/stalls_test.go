package mydatabase

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
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
)

func TestUnknownStorageClassStallsBeforeAnyWrite(t *testing.T) {
	ns := namespace(t)
	class := "missing-" + ns
	db := create(t, newDB(ns, "nowhere", func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Storage.StorageClassName = &class
	}))
	waitFor(t, db, "Stalled on the unknown class", phaseIs(databasev1alpha1.PhaseStalled))
	c := condition(db, databasev1alpha1.ConditionStalled)
	if c == nil || c.Reason != databasev1alpha1.ReasonStorageClassNotFound || !strings.Contains(c.Message, class) {
		t.Fatalf("Stalled = %+v, want %s naming %q", c, databasev1alpha1.ReasonStorageClassNotFound, class)
	}
	for name, obj := range map[string]client.Object{
		"nowhere": &appsv1.StatefulSet{}, "nowhere-config": &corev1.ConfigMap{}, "nowhere-credentials": &corev1.Secret{},
	} {
		if err := get(ns, name, obj); !apierrors.IsNotFound(err) {
			t.Errorf("%s written while the storage class is unknown (err %v)", name, err)
		}
	}

	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Provisioner: "example.com/none"}
	if err := k8s.Create(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), sc) })
	reconcileOnce(t, db)
	eventually(t, "the StatefulSet once the class exists", exists(ns, "nowhere", &appsv1.StatefulSet{}))
	waitFor(t, db, "no longer Stalled", func(db *databasev1alpha1.MyDatabase) error {
		if c := condition(db, databasev1alpha1.ConditionStalled); c != nil {
			return fmt.Errorf("Stalled = %+v", c)
		}
		return nil
	})
}

// stalledWith waits for Stalled with reason, naming child, at the current
// generation, with Ready False for the same reason.
func stalledWith(reason, child string) func(*databasev1alpha1.MyDatabase) error {
	return func(db *databasev1alpha1.MyDatabase) error {
		c, ready := condition(db, databasev1alpha1.ConditionStalled), condition(db, databasev1alpha1.ConditionReady)
		switch {
		case c == nil || c.Reason != reason:
			return fmt.Errorf("Stalled %+v, want reason %s", c, reason)
		case !strings.Contains(c.Message, child):
			return fmt.Errorf("Stalled message %q does not name %s", c.Message, child)
		case ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != reason:
			return fmt.Errorf("Ready %+v, want False %s", ready, reason)
		case db.Status.Phase != databasev1alpha1.PhaseStalled || db.Status.ObservedGeneration != db.Generation:
			return fmt.Errorf("phase %s at observedGeneration %d of %d", db.Status.Phase, db.Status.ObservedGeneration, db.Generation)
		}
		return nil
	}
}

// warnings lists the Warning events with reason on the MyDatabase.
func warnings(t *testing.T, db *databasev1alpha1.MyDatabase, reason string) []eventsv1.Event {
	t.Helper()
	list := &eventsv1.EventList{}
	if err := k8s.List(context.Background(), list, client.InNamespace(db.Namespace)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == db.Name && e.Type == corev1.EventTypeWarning && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// A step the API server refuses shows in status: here the StatefulSet,
// whose pod annotation key the CRD schema lets through but the API server
// does not. Correcting the spec is all it takes.
func TestRefusedChildShowsInStatus(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "badkey", func(db *databasev1alpha1.MyDatabase) {
		db.Spec.PodAnnotations = map[string]string{"not a valid key!": "x"}
	}))
	waitFor(t, db, "Stalled InvalidChild", stalledWith(databasev1alpha1.ReasonInvalidChild, "StatefulSet badkey"))
	if msg := condition(db, databasev1alpha1.ConditionStalled).Message; !strings.Contains(msg, "not a valid key!") {
		t.Errorf("the message does not quote the server: %q", msg)
	}
	update(t, db, func(db *databasev1alpha1.MyDatabase) { db.Spec.PodAnnotations = nil })
	eventually(t, "the StatefulSet", exists(ns, "badkey", &appsv1.StatefulSet{}))
	markReady(t, db)
	waitFor(t, db, "Ready", phaseIs(databasev1alpha1.PhaseReady))
}

// A ResourceQuota that forbids the second Service stalls the MyDatabase
// with QuotaExceeded, one Warning event however often it retries, and
// lifting the quota lets it become Ready with no further action.
func TestQuotaStallsUntilLifted(t *testing.T) {
	ns := namespace(t)
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tight"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceServices: resource.MustParse("1")}}}
	if err := k8s.Create(context.Background(), quota); err != nil {
		t.Fatal(err)
	}
	// envtest runs no quota controller: set the usage it would compute.
	quota.Status = corev1.ResourceQuotaStatus{Hard: quota.Spec.Hard,
		Used: corev1.ResourceList{corev1.ResourceServices: resource.MustParse("0")}}
	if err := k8s.Status().Update(context.Background(), quota); err != nil {
		t.Fatal(err)
	}
	db := create(t, newDB(ns, "quota"))
	waitFor(t, db, "Stalled QuotaExceeded", stalledWith(databasev1alpha1.ReasonQuotaExceeded, "Service quota-rw"))

	// Over several retries (every 2 s in these tests), still one event.
	time.Sleep(7 * time.Second)
	if w := warnings(t, db, databasev1alpha1.ReasonQuotaExceeded); len(w) != 1 || w[0].Series != nil {
		t.Errorf("Warning events for one failure: %d (series %+v), want exactly one", len(w), w)
	}

	if err := k8s.Delete(context.Background(), quota); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the StatefulSet once the quota is gone", exists(ns, "quota", &appsv1.StatefulSet{}))
	markReady(t, db)
	waitFor(t, db, "Ready", phaseIs(databasev1alpha1.PhaseReady))
}

// A ValidatingAdmissionPolicy (built into the API server) that denies
// StatefulSets in the namespace: AdmissionDenied, naming the StatefulSet
// and quoting the policy's message.
func TestAdmissionPolicyDenialStallsUntilLifted(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "no-statefulsets-" + ns},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"},
						Resources: []string{"statefulsets"}},
				}}},
			},
			Validations: []admissionregistrationv1.Validation{{Expression: "false",
				Message: "StatefulSets are not allowed in this namespace"}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}},
		},
	}
	for _, obj := range []client.Object{policy, binding} {
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(ctx, obj) })
	}
	probe := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"},
		Spec: appsv1.StatefulSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"a": "b"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}}}
	eventually(t, "the policy to take effect", func() error {
		if err := k8s.Create(ctx, probe.DeepCopy(), client.DryRunAll); err == nil {
			return fmt.Errorf("a StatefulSet is still admitted")
		}
		return nil
	})

	db := create(t, newDB(ns, "denied"))
	waitFor(t, db, "Stalled AdmissionDenied", stalledWith(databasev1alpha1.ReasonAdmissionDenied, "StatefulSet denied"))
	if msg := condition(db, databasev1alpha1.ConditionStalled).Message; !strings.Contains(msg, "StatefulSets are not allowed in this namespace") {
		t.Errorf("the message does not quote the policy: %q", msg)
	}
	if err := k8s.Delete(ctx, binding); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the StatefulSet once the policy is unbound", exists(ns, "denied", &appsv1.StatefulSet{}))
	markReady(t, db)
	waitFor(t, db, "Ready", phaseIs(databasev1alpha1.PhaseReady))
}

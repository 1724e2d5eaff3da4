package mydatabase

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// The StatefulSet controller's FailedCreate messages: what a person must
// lift stalls, what passes on its own does not.
func TestCreateFailure(t *testing.T) {
	db := newDB("shop", "orders")
	for words, want := range map[string]string{
		`create Claim data-orders-0 Pod orders-0 in StatefulSet orders failed error: persistentvolumeclaims "data-orders-0" is forbidden: exceeded quota: tight, requested: persistentvolumeclaims=1, used: persistentvolumeclaims=0, limited: persistentvolumeclaims=0`: databasev1alpha1.ReasonQuotaExceeded,
		`create Pod orders-0 in StatefulSet orders failed error: pods "orders-0" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true`:                                                                                                           databasev1alpha1.ReasonAdmissionDenied,
		`create Pod orders-0 in StatefulSet orders failed error: pods "orders-0" is forbidden: maximum cpu usage per Container is 100m, but limit is 200m`:                                                                                                               databasev1alpha1.ReasonAdmissionDenied,
		`create Pod orders-0 in StatefulSet orders failed error: admission webhook "deny.example.com" denied the request: no`:                                                                                                                                            databasev1alpha1.ReasonAdmissionDenied,
		`create Pod orders-0 in StatefulSet orders failed error: Pod "orders-0" is invalid: spec.containers[0].image: Required value`:                                                                                                                                    databasev1alpha1.ReasonInvalidChild,
		`create Pod orders-0 in StatefulSet orders failed error: pods "orders-0" is forbidden: error looking up service account shop/default: serviceaccount "default" not found`:                                                                                        "",
		`create Claim data-orders-0 Pod orders-0 in StatefulSet orders failed error: persistentvolumeclaims "data-orders-0" is forbidden: status unknown for quota: tight`:                                                                                               "",
		`create Pod orders-0 in StatefulSet orders failed error: Timeout: request did not complete within requested timeout`:                                                                                                                                             "",
	} {
		got := ""
		if b := createFailure(db, "orders", words); b != nil {
			got = b.Reason
			if !strings.Contains(b.Message, "StatefulSet orders") || !strings.Contains(b.Message, words) {
				t.Errorf("message %q does not name the StatefulSet and quote the event", b.Message)
			}
		}
		if got != want {
			t.Errorf("%s: %q, want %q", words, got, want)
		}
	}
}

// While the StatefulSet controller has a pod to create and has not, the
// pass comes back soon to read its events again (no watch brings an
// event): a refused claim is seen within podCreationRecheck, not whenever
// something else changes. A stall then retries at its own pace. A
// StatefulSet that is complete, or that waits for a pod to become Ready
// before it creates the next (OrderedReady), asks for nothing and lists no
// event.
func TestMissingPodsAreLookedAtAgain(t *testing.T) {
	db := newDB("shop", "orders")
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", UID: "sts-uid", Generation: 1},
		Spec:       appsv1.StatefulSetSpec{Replicas: ptr.To[int32](3), PodManagementPolicy: appsv1.OrderedReadyPodManagement},
		Status:     appsv1.StatefulSetStatus{ObservedGeneration: 1},
	}
	refused := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: "shop", Name: "orders.1"},
		InvolvedObject: corev1.ObjectReference{Kind: "StatefulSet", Name: "orders", UID: "sts-uid"},
		Reason:         "FailedCreate", LastTimestamp: metav1.Now(),
		Message: `create Claim data-orders-0 Pod orders-0 in StatefulSet orders failed error: persistentvolumeclaims "data-orders-0" is forbidden: exceeded quota: tight`,
	}
	// pod is a server of the given ordinal, Ready or not.
	pod := func(ordinal int, ready bool) corev1.Pod {
		condition := corev1.ConditionFalse
		if ready {
			condition = corev1.ConditionTrue
		}
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: fmt.Sprintf("orders-%d", ordinal)},
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: condition}}}}
	}
	pass := func(policy appsv1.PodManagementPolicyType, pods []corev1.Pod, seen ...client.Object) (*observation, ctrl.Result, int) {
		t.Helper()
		lists := 0
		b := fake.NewClientBuilder().WithObjects(seen...).WithInterceptorFuncs(interceptor.Funcs{
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				lists++
				return c.List(ctx, list, opts...)
			}})
		for _, f := range []string{"involvedObject.kind", "involvedObject.name", "involvedObject.uid"} {
			b = b.WithIndex(&corev1.Event{}, f, func(o client.Object) []string {
				ref := o.(*corev1.Event).InvolvedObject
				return []string{map[string]string{"involvedObject.kind": ref.Kind, "involvedObject.name": ref.Name,
					"involvedObject.uid": string(ref.UID)}[f]}
			})
		}
		live := sts.DeepCopy()
		live.Spec.PodManagementPolicy = policy
		live.Status.Replicas = int32(len(pods))
		c := &podCreation{kit: &kit{APIReader: b.Build()}, scope: &scope{db: db, pods: pods}, servers: produced(serversResult{applied: live})}
		obs := &observation{}
		if err := c.reconcile(context.Background(), obs); err != nil {
			t.Fatal(err)
		}
		return obs, obs.result(30 * time.Second), lists
	}
	ordered := appsv1.OrderedReadyPodManagement
	for _, c := range []struct {
		name   string
		policy appsv1.PodManagementPolicyType
		pods   []corev1.Pod
		look   bool
	}{
		{"no pod yet", ordered, nil, true},
		{"the first pod starting", ordered, []corev1.Pod{pod(0, false)}, false},
		{"the first pod Ready, the second not made", ordered, []corev1.Pod{pod(0, true)}, true},
		{"two Ready, the third starting", ordered, []corev1.Pod{pod(0, true), pod(1, true), pod(2, false)}, false},
		{"the first gone while the third is not Ready", ordered, []corev1.Pod{pod(1, true), pod(2, false)}, true},
		{"the first pod starting, in parallel", appsv1.ParallelPodManagement, []corev1.Pod{pod(0, false)}, true},
	} {
		obs, res, lists := pass(c.policy, c.pods)
		if looked := lists > 0; looked != c.look || obs.podsMissing != c.look || (res.RequeueAfter == podCreationRecheck) != c.look {
			t.Errorf("%s: %d event lists, podsMissing %v, result %+v; want a look (and again in %s): %v",
				c.name, lists, obs.podsMissing, res, podCreationRecheck, c.look)
		}
		if !c.look {
			continue
		}
		if obs, res, _ := pass(c.policy, c.pods, refused); obs.stalled == nil || obs.podsMissing || res.RequeueAfter != 30*time.Second {
			t.Errorf("%s, a claim refused by a quota: stalled %v, podsMissing %v, result %+v; want Stalled, retried every 30 s",
				c.name, obs.stalled, obs.podsMissing, res)
		}
	}
	all := []corev1.Pod{pod(0, true), pod(1, true), pod(2, true)}
	if obs, res, lists := pass(ordered, all, refused); obs.stalled != nil || obs.podsMissing || res.RequeueAfter != 0 || lists != 0 {
		t.Errorf("every pod there: stalled %v, podsMissing %v, result %+v, %d event lists; want nothing", obs.stalled, obs.podsMissing, res, lists)
	}
}

// TestPodRolesFollowTheLease: before any instance manager holds the
// Lease, ordinal 0 is the primary; then its holder is, in the role labels,
// status.currentPrimary and a PrimaryChanged event.
func TestPodRolesFollowTheLease(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "roles", func(db *databasev1alpha1.MyDatabase) { db.Spec.Replicas = ptr.To[int32](2) }))
	eventually(t, "the StatefulSet", exists(ns, "roles", &appsv1.StatefulSet{}))
	// envtest has no StatefulSet controller: make its pods as it would.
	for _, name := range []string{"roles-0", "roles-1"} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
				Labels: specs.Labels(db, specs.ComponentDatabase)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "postgres:17"}}},
		}
		if err := k8s.Create(context.Background(), pod); err != nil {
			t.Fatal(err)
		}
	}
	roleIs := func(name, want string) func() error {
		return func() error {
			pod := &corev1.Pod{}
			if err := get(ns, name, pod); err != nil {
				return err
			}
			if got := pod.Labels[databasev1alpha1.LabelRole]; got != want {
				return fmt.Errorf("%s role %q, want %q", name, got, want)
			}
			return nil
		}
	}
	eventually(t, "the primary's role", roleIs("roles-0", databasev1alpha1.RolePrimary))
	eventually(t, "the replica's role", roleIs("roles-1", databasev1alpha1.RoleReplica))

	// Someone removes a role label: the pod event alone brings it back.
	pod := &corev1.Pod{}
	if err := get(ns, "roles-1", pod); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(pod.DeepCopy())
	delete(pod.Labels, databasev1alpha1.LabelRole)
	if err := k8s.Patch(context.Background(), pod, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the replica's role restored", roleIs("roles-1", databasev1alpha1.RoleReplica))

	// An instance manager takes the Lease, as after a failover.
	lease := &coordinationv1.Lease{}
	if err := get(ns, "roles-primary", lease); err != nil {
		t.Fatal(err)
	}
	lease.Spec.HolderIdentity = new("roles-1")
	if err := k8s.Update(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new primary's role", roleIs("roles-1", databasev1alpha1.RolePrimary))
	eventually(t, "the old primary's role", roleIs("roles-0", databasev1alpha1.RoleReplica))
	eventually(t, "status.currentPrimary", func() error {
		got := &databasev1alpha1.MyDatabase{}
		if err := get(ns, "roles", got); err != nil {
			return err
		}
		if got.Status.CurrentPrimary != "roles-1" {
			return fmt.Errorf("currentPrimary %q, want roles-1", got.Status.CurrentPrimary)
		}
		return nil
	})
	eventually(t, "a PrimaryChanged event", func() error {
		events := &eventsv1.EventList{}
		if err := k8s.List(context.Background(), events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason == "PrimaryChanged" && strings.Contains(e.Note, "roles-1") && strings.Contains(e.Note, "was roles-0") {
				return nil
			}
		}
		return fmt.Errorf("no PrimaryChanged event among %d", len(events.Items))
	})
}

// TestStillRunning: a stop's waiting message names each server left, and
// says which is stopping and which is not ready (and so holds the others).
func TestStillRunning(t *testing.T) {
	ready := corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	now := metav1.Now()
	pods := []corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "db-0"}, Status: ready},
		{ObjectMeta: metav1.ObjectMeta{Name: "db-1"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "db-2", DeletionTimestamp: &now}, Status: ready},
	}
	want := "db-0, db-1 (not ready: the StatefulSet stops no server while one is not ready), db-2 (stopping)"
	if got := stillRunning(pods); got != want {
		t.Errorf("stillRunning = %q, want %q", got, want)
	}
}

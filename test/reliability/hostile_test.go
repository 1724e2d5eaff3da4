package reliability

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
)

// TestHostilePodReachesNoOtherMyDatabase: the boundaries B3 and B4 of
// docs/security.md. A database pod runs as its MyDatabase's instance
// ServiceAccount, and a pod that a user's extension compromised acts with
// exactly that identity. With the RBAC the operator makes, the identity of
// MyDatabase a does what a's instance managers need on a's objects (the
// first list: proof that the refusals below are RBAC's, not a broken
// client), and nothing on b's, nor anything that reaches past its own
// pods: every request of the second list is refused with 403.
func TestHostilePodReachesNoOtherMyDatabase(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	o := newOperator(env.Client, env.Client)
	named := func(name string) func(*databasev1alpha1.MyDatabase) {
		return func(db *databasev1alpha1.MyDatabase) {
			db.Name, db.Spec.Replicas = name, ptr.To[int32](2)
			db.Spec.Roles = []databasev1alpha1.RoleSpec{{Name: "analyst"}} // a generated password Secret
		}
	}
	a, b := newDB(ns, named("a")), newDB(ns, named("b"))
	for _, db := range []*databasev1alpha1.MyDatabase{a, b} {
		o.converge(t, client.ObjectKeyFromObject(db))
	}
	// envtest runs no StatefulSet controller: the pods the hostile one
	// aims at are made here, as the StatefulSets would.
	for _, name := range []string{specs.PodName(a, 0), specs.PodName(a, 1), specs.PodName(b, 0)} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "postgres"}}}}
		if err := env.Client.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}

	// The identity a ServiceAccount token carries: its user and groups.
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: fmt.Sprintf("system:serviceaccount:%s:%s", ns, specs.InstanceAccessName(a)),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	hostile, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	key := func(name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }
	annotate := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"hostile":"yes"}}}`))
	leaseOf := func(db *databasev1alpha1.MyDatabase) *coordinationv1.Lease {
		l := &coordinationv1.Lease{}
		if err := env.Client.Get(ctx, key(specs.LeaseName(db)), l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	watchPod := func(name string) error {
		w, err := clientset.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		if err == nil {
			w.Stop()
		}
		return err
	}

	for what, do := range map[string]func() error{
		"get its Lease":            func() error { return hostile.Get(ctx, key(specs.LeaseName(a)), &coordinationv1.Lease{}) },
		"update its Lease":         func() error { return hostile.Update(ctx, leaseOf(a)) },
		"list the pods":            func() error { return hostile.List(ctx, &corev1.PodList{}, client.InNamespace(ns)) },
		"patch its own pod":        func() error { return hostile.Patch(ctx, pod(specs.PodName(a, 1)), annotate) },
		"watch its own pod":        func() error { return watchPod(specs.PodName(a, 0)) },
		"read its role's password": func() error { return hostile.Get(ctx, key(specs.PasswordSecretNames(a)[1]), &corev1.Secret{}) },
	} {
		if err := do(); err != nil {
			t.Errorf("the instance identity of a could not %s: %v", what, err)
		}
	}

	forbidden := map[string]func() error{
		"get b's Lease":    func() error { return hostile.Get(ctx, key(specs.LeaseName(b)), &coordinationv1.Lease{}) },
		"update b's Lease": func() error { return hostile.Update(ctx, leaseOf(b)) },
		"delete its own Lease": func() error {
			return hostile.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: specs.LeaseName(a)}})
		},
		"create a Lease": func() error {
			return hostile.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hostile"}})
		},
		"read b's superuser password": func() error { return hostile.Get(ctx, key(specs.CredentialsSecretName(b)), &corev1.Secret{}) },
		"read its superuser password": func() error { return hostile.Get(ctx, key(specs.CredentialsSecretName(a)), &corev1.Secret{}) },
		"read b's declared role's password": func() error {
			return hostile.Get(ctx, key(specs.PasswordSecretNames(b)[1]), &corev1.Secret{})
		},
		"read b's CA key":    func() error { return hostile.Get(ctx, key(specs.CASecretName(b)), &corev1.Secret{}) },
		"read its CA key":    func() error { return hostile.Get(ctx, key(specs.CASecretName(a)), &corev1.Secret{}) },
		"list Secrets":       func() error { return hostile.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)) },
		"patch b's pod":      func() error { return hostile.Patch(ctx, pod(specs.PodName(b, 0)), annotate) },
		"watch b's pod":      func() error { return watchPod(specs.PodName(b, 0)) },
		"delete its own pod": func() error { return hostile.Delete(ctx, pod(specs.PodName(a, 1))) },
		"create a pod": func() error {
			return hostile.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hostile"},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "x"}}}})
		},
		"exec into its own pod": func() error {
			return clientset.CoreV1().RESTClient().Post().Namespace(ns).Resource("pods").Name(specs.PodName(a, 1)).
				SubResource("exec").Param("command", "true").Do(ctx).Error()
		},
		"read its MyDatabase": func() error { return hostile.Get(ctx, client.ObjectKeyFromObject(a), &databasev1alpha1.MyDatabase{}) },
		"patch b's status": func() error {
			return hostile.Status().Patch(ctx, b.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"status":{"currentPrimary":"b-1"}}`)))
		},
		"read a ConfigMap": func() error { return hostile.Get(ctx, key(specs.ConfigMapName(b)), &corev1.ConfigMap{}) },
		"read a Service":   func() error { return hostile.Get(ctx, key(specs.ReadWriteServiceName(b)), &corev1.Service{}) },
	}
	for what, do := range forbidden {
		if err := do(); !apierrors.IsForbidden(err) {
			t.Errorf("the instance identity of a could %s: %v, want 403 Forbidden", what, err)
		}
	}

	// What RBAC lets it do to its own pod, it does to pass for one of b's
	// servers: it takes b's labels (read from b's pod) and reports itself
	// b's ready primary, far ahead, with every password set. The
	// operator's passes over b must not count it.
	before := &databasev1alpha1.MyDatabase{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(b), before); err != nil {
		t.Fatal(err)
	}
	liar := &corev1.Pod{}
	if err := hostile.Get(ctx, key(specs.PodName(a, 1)), liar); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(liar.DeepCopy())
	liar.Labels = specs.InstanceSelector(before)
	liar.OwnerReferences = nil
	liar.Annotations = map[string]string{contract.AnnotationInstance: contract.Report{Role: databasev1alpha1.RolePrimary, Ready: true,
		Timeline: 99, LSN: "FFFFFFFF/FFFFFFFF", Passwords: map[string]string{specs.CredentialsSecretName(b): "1"}, Time: time.Now()}.String()}
	if err := hostile.Patch(ctx, liar, patch); err != nil {
		t.Fatalf("the hostile pod relabelling itself: %v", err)
	}
	o.converge(t, client.ObjectKeyFromObject(b))
	after := &databasev1alpha1.MyDatabase{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(b), after); err != nil {
		t.Fatal(err)
	}
	for _, in := range after.Status.Instances {
		if in.Name == liar.Name {
			t.Errorf("b's status counts the hostile pod %s: %+v (%+v)", liar.Name, in, after.Status)
		}
	}
	if after.Status.CurrentPrimary != before.Status.CurrentPrimary || after.Status.ReadyReplicas != before.Status.ReadyReplicas {
		t.Errorf("b's primary or ready count moved with the hostile pod's report: %s %d, before %s %d",
			after.Status.CurrentPrimary, after.Status.ReadyReplicas, before.Status.CurrentPrimary, before.Status.ReadyReplicas)
	}
}

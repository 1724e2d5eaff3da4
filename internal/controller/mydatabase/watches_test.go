package mydatabase

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
)

// A child maps to the MyDatabase its controller reference names, and only
// to a MyDatabase of our API group.
func TestRequestForController(t *testing.T) {
	child := func(refs ...metav1.OwnerReference) client.Object {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-rw", OwnerReferences: refs}}
	}
	ours := metav1.OwnerReference{APIVersion: databasev1alpha1.GroupVersion.String(), Kind: "MyDatabase", Name: "orders", Controller: new(true)}
	other := ours
	other.APIVersion = "databases.example.org/v1"
	notController := ours
	notController.Controller = nil
	sts := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "orders", Controller: new(true)}
	for name, tc := range map[string]struct {
		obj  client.Object
		want []reconcile.Request
	}{
		"ours":                  {child(ours), []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "shop", Name: "orders"}}}},
		"another API group":     {child(other), nil},
		"not the controller":    {child(notController), nil},
		"controlled by another": {child(sts), nil},
		"no owner":              {child(), nil},
	} {
		if got := requestForController(context.Background(), tc.obj); !equality.Semantic.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}

func TestRoleOrReportChangedPredicate(t *testing.T) {
	pod := func(role string) *corev1.Pod {
		labels := map[string]string{databasev1alpha1.LabelInstance: "orders"}
		if role != "" {
			labels[databasev1alpha1.LabelRole] = role
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "orders-1", Labels: labels}}
	}
	primary, replica := databasev1alpha1.RolePrimary, databasev1alpha1.RoleReplica
	for _, tc := range []struct {
		old, new string // old "-" is a create
		want     bool
	}{
		{"-", "", true},
		{"-", "bogus", true},
		{"-", replica, false},
		{replica, replica, false}, // a readiness change, say
		{"", replica, false},      // the operator's own labelling
		{replica, "", true},
		{replica, primary, true},
		{primary, primary, false},
	} {
		var got bool
		if tc.old == "-" {
			got = roleOrReportChanged.Create(event.CreateEvent{Object: pod(tc.new)})
		} else {
			got = roleOrReportChanged.Update(event.UpdateEvent{ObjectOld: pod(tc.old), ObjectNew: pod(tc.new)})
		}
		if got != tc.want {
			t.Errorf("role %q -> %q: passes %v, want %v", tc.old, tc.new, got, tc.want)
		}
	}
	// A new instance report passes, with the role unchanged.
	old, reported := pod(replica), pod(replica)
	reported.Annotations = map[string]string{contract.AnnotationInstance: `{"role":"replica","ready":true}`}
	if !roleOrReportChanged.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: reported}) {
		t.Error("a changed instance report does not pass: status.instances would go stale")
	}
}

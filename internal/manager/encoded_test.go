package manager

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// An encoded child keeps the metadata the informer and the handlers read,
// and every read decodes the whole object, of its own type, as it came from
// the API server: a copy of its own each time.
func TestEncodedChildren(t *testing.T) {
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{
			Name: name, Namespace: "shop", UID: types.UID(name + "-uid"), ResourceVersion: "42", Generation: 3,
			Labels:          map[string]string{databasev1alpha1.LabelInstance: "orders", databasev1alpha1.LabelManagedBy: databasev1alpha1.ManagedBy},
			Annotations:     map[string]string{databasev1alpha1.AnnotationSpecHash: "0123456789abcdef"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "database.example.com/v1alpha1", Kind: "MyDatabase", Name: "orders", UID: "db-uid", Controller: new(true)}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "myoperator"}},
			Finalizers:      []string{"example.com/keep"}, CreationTimestamp: metav1.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC),
		}
	}
	sts := &appsv1.StatefulSet{ObjectMeta: meta("orders"),
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](3), ServiceName: "orders-headless", Template: corev1.PodTemplateSpec{
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "postgres:17", Args: []string{"-c", "fsync=on"}}}}}},
		Status: appsv1.StatefulSetStatus{ReadyReplicas: 2}}
	secret := &corev1.Secret{ObjectMeta: meta("orders-credentials"), Data: map[string][]byte{"password": []byte("s3cret")}}

	for _, tc := range []struct {
		obj       client.Object
		transform func(any) (any, error)
	}{
		{sts, encodedAs[appsv1.StatefulSet](cache.TransformStripManagedFields())},
		{secret, encodedAs[corev1.Secret](cache.TransformStripManagedFields())},
	} {
		want := tc.obj.DeepCopyObject().(client.Object)
		want.SetManagedFields(nil)
		out, err := tc.transform(tc.obj.DeepCopyObject())
		if err != nil {
			t.Fatal(err)
		}
		e, ok := out.(*encoded)
		if !ok {
			t.Fatalf("%T: the transform returned a %T", tc.obj, out)
		}
		kept := metav1.ObjectMeta{Name: want.GetName(), Namespace: want.GetNamespace(), ResourceVersion: want.GetResourceVersion(),
			Generation: want.GetGeneration(), CreationTimestamp: want.GetCreationTimestamp(), OwnerReferences: want.GetOwnerReferences()}
		if !equality.Semantic.DeepEqual(e.ObjectMeta, kept) {
			t.Errorf("%T: the encoded child keeps other metadata: %s", tc.obj, cmp.Diff(kept, e.ObjectMeta))
		}
		// What it does not keep, it reads from the encoding.
		// As meta.Accessor and metav1.ObjectMetaAccessor see it.
		m := e.GetObjectMeta()
		if m.GetUID() != want.GetUID() || !equality.Semantic.DeepEqual(m.GetLabels(), want.GetLabels()) || !equality.Semantic.DeepEqual(m.GetAnnotations(), want.GetAnnotations()) ||
			!equality.Semantic.DeepEqual(m.GetFinalizers(), want.GetFinalizers()) {
			t.Errorf("%T: uid %s, labels %v, annotations %v, finalizers %v; want %s, %v, %v, %v", tc.obj, m.GetUID(),
				m.GetLabels(), m.GetAnnotations(), m.GetFinalizers(), want.GetUID(), want.GetLabels(), want.GetAnnotations(), want.GetFinalizers())
		}
		first := e.DeepCopyObject()
		if !equality.Semantic.DeepEqual(first, want) {
			t.Fatalf("%T: decoded differs from the object: %s", tc.obj, cmp.Diff(want, first))
		}
		// A reader may change what it got: neither the cache nor the
		// next reader sees it.
		first.(client.Object).GetLabels()[databasev1alpha1.LabelInstance] = "changed"
		first.(client.Object).GetAnnotations()[databasev1alpha1.AnnotationSpecHash] = "changed"
		if second := e.DeepCopyObject(); !equality.Semantic.DeepEqual(second, want) {
			t.Errorf("%T: a change to one read shows in the next: %s", tc.obj, cmp.Diff(want, second))
		}
		if e.GetLabels()[databasev1alpha1.LabelInstance] != "orders" {
			t.Errorf("%T: a change to a read shows in the cache's labels", tc.obj)
		}
		if again, err := tc.transform(e); err != nil || again != any(e) {
			t.Errorf("%T: an encoded child given again came back as %T (%v)", tc.obj, again, err)
		}
	}
	// Another kind than the transform's passes as it is.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "orders-config"}}
	if out, err := encodedAs[corev1.Secret](cache.TransformStripManagedFields())(cm); err != nil || out != any(cm) {
		t.Errorf("a ConfigMap given to the Secrets' transform came back as %T (%v)", out, err)
	}
}

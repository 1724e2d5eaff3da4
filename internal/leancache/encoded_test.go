package leancache

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/apply"
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
		wire      bool
	}{
		{sts, encodedAs[appsv1.StatefulSet](cache.TransformStripManagedFields()), false},
		{secret, encodedAs[corev1.Secret](cache.TransformStripManagedFields()), false},
		// The same, cut out of the protobuf the API server sends (wire.go).
		{sts, viaWire[appsv1.StatefulSet], true},
		{secret, viaWire[corev1.Secret], true},
	} {
		want := tc.obj.DeepCopyObject().(client.Object)
		want.SetManagedFields(nil)
		out, err := tc.transform(tc.obj.DeepCopyObject())
		if err != nil {
			t.Fatal(err)
		}
		e, ok := out.(interface {
			client.Object
			apply.Agreement
		})
		if !ok {
			t.Fatalf("%T: the transform returned a %T", tc.obj, out)
		}
		// As the informer, the handlers and meta.Accessor see it: what it
		// keeps, and what it reads from the encoding.
		m, err := apimeta.Accessor(out)
		if err != nil {
			t.Fatal(err)
		}
		got := &metav1.ObjectMeta{Name: m.GetName(), Namespace: m.GetNamespace(), ResourceVersion: m.GetResourceVersion(),
			OwnerReferences: m.GetOwnerReferences(), UID: m.GetUID(), Generation: m.GetGeneration(),
			CreationTimestamp: m.GetCreationTimestamp(), Labels: m.GetLabels(), Annotations: m.GetAnnotations(),
			Finalizers: m.GetFinalizers(), ManagedFields: m.GetManagedFields()}
		if wantMeta := want.(metav1.ObjectMetaAccessor).GetObjectMeta(); !equality.Semantic.DeepEqual(got, wantMeta) {
			t.Errorf("%T: metadata differs: %s", tc.obj, cmp.Diff(wantMeta, got))
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
		if !tc.wire {
			if again, err := tc.transform(e); err != nil || again != any(e) {
				t.Errorf("%T: an encoded child given again came back as %T (%v)", tc.obj, again, err)
			}
		}
		// The agreement mark: one hash, on this version only.
		if e.Agrees(7) || e.Agrees(0) {
			t.Errorf("%T: a new version agrees unchecked", tc.obj)
		}
		e.MarkAgreed(7)
		if !e.Agrees(7) || e.Agrees(8) {
			t.Errorf("%T: marked agreeing with 7: Agrees(7) %v, Agrees(8) %v", tc.obj, e.Agrees(7), e.Agrees(8))
		}
		next, _ := tc.transform(tc.obj.DeepCopyObject())
		if next.(apply.Agreement).Agrees(7) {
			t.Errorf("%T: the mark of one version shows on the next", tc.obj)
		}
	}
	// The children of one MyDatabase share its owner reference and
	// namespace.
	a, _ := encodedAs[corev1.Secret](cache.TransformStripManagedFields())(secret.DeepCopy())
	b, _ := encodedAs[appsv1.StatefulSet](cache.TransformStripManagedFields())(sts.DeepCopy())
	if ea, eb := a.(*encoded[corev1.Secret, *corev1.Secret]), b.(*encoded[appsv1.StatefulSet, *appsv1.StatefulSet]); ea.owner != eb.owner || ea.namespace != eb.namespace {
		t.Error("two children of one MyDatabase hold owner references or namespaces of their own")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("setting the labels of a cached child did not panic")
			}
		}()
		a.(client.Object).SetLabels(nil)
	}()
	// A child with no owner is encoded, and one with two, whose owners are
	// read from the encoding; the same from the wire.
	orphan := secret.DeepCopy()
	orphan.OwnerReferences = nil
	shared := secret.DeepCopy()
	shared.OwnerReferences = append(shared.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "theirs", UID: "their-uid"})
	for _, transform := range []func(any) (any, error){encodedAs[corev1.Secret](cache.TransformStripManagedFields()), viaWire[corev1.Secret]} {
		for _, in := range []*corev1.Secret{orphan, shared} {
			out, err := transform(in.DeepCopy())
			if _, ok := out.(*encoded[corev1.Secret, *corev1.Secret]); err != nil || !ok {
				t.Fatalf("a Secret with %d owners came back as %T (%v)", len(in.OwnerReferences), out, err)
			}
			if got := out.(client.Object).GetOwnerReferences(); !equality.Semantic.DeepEqual(got, in.OwnerReferences) {
				t.Errorf("a Secret with %d owners: %s", len(in.OwnerReferences), cmp.Diff(in.OwnerReferences, got))
			}
		}
	}
	// Another kind than the transform's passes as it is.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "orders-config"}}
	if out, err := encodedAs[corev1.Secret](cache.TransformStripManagedFields())(cm); err != nil || out != any(cm) {
		t.Errorf("a ConfigMap given to the Secrets' transform came back as %T (%v)", out, err)
	}
}

// viaWire encodes obj, of type P, as the API server sends it, and makes an
// encoded child of that as a wire informer does.
func viaWire[T any, P interface {
	*T
	protoObject
}](obj any) (any, error) {
	raw, err := obj.(P).Marshal()
	if err != nil {
		return nil, err
	}
	return fromWire[T, P](raw)
}

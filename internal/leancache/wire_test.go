package leancache

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
)

type wireSecret = encoded[corev1.Secret, *corev1.Secret]

// The wire decoder reads lists and single objects of its kind in the
// envelope the API server sends them in, and leaves anything else (the
// Status of a failed watch) to the usual decoder.
func TestWireDecoder(t *testing.T) {
	info, _ := runtime.SerializerInfoForMediaType(clientgoscheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	encode := func(obj runtime.Object) []byte {
		var b bytes.Buffer
		if err := info.Serializer.Encode(obj, &b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	secret := func(name string) corev1.Secret {
		return corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", ResourceVersion: "7",
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "myoperator", Operation: metav1.ManagedFieldsOperationApply}}},
			Data: map[string][]byte{"password": []byte(name)}}
	}
	d := wireDecoder[corev1.Secret, *corev1.Secret]{Serializer: info.Serializer, kind: "Secret"}

	list := &corev1.SecretList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "SecretList"},
		ListMeta: metav1.ListMeta{ResourceVersion: "9", Continue: "more"}, Items: []corev1.Secret{secret("a"), secret("b")}}
	into := &encodedList[corev1.Secret, *corev1.Secret]{}
	if out, _, err := d.Decode(encode(list), nil, into); err != nil || out != into {
		t.Fatalf("decoding a SecretList: %T, %v", out, err)
	}
	if into.ResourceVersion != "9" || into.Continue != "more" || len(into.Items) != 2 {
		t.Fatalf("the list read: rv %q, continue %q, %d items", into.ResourceVersion, into.Continue, len(into.Items))
	}
	for i, item := range into.Items {
		want := list.Items[i].DeepCopy()
		want.ManagedFields = nil
		if got := item.DeepCopyObject(); !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("item %d: %s", i, cmp.Diff(want, got))
		}
	}

	one := secret("c")
	one.APIVersion, one.Kind = "v1", "Secret"
	out, _, err := d.Decode(encode(&one), nil, nil)
	if e, ok := out.(*wireSecret); err != nil || !ok || e.GetName() != "c" || e.GetResourceVersion() != "7" {
		t.Fatalf("decoding a watch event's Secret: %T %v", out, err)
	}

	status := &metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusFailure,
		Reason: metav1.StatusReasonExpired, Code: 410}
	out, _, err = d.Decode(encode(status), nil, nil)
	if s, ok := out.(*metav1.Status); err != nil || !ok || s.Reason != metav1.StatusReasonExpired {
		t.Fatalf("decoding a Status: %T %v", out, err)
	}
}

// A wire informer on a real API server: it lists and watches the operator's
// Secrets (and only those) by itself, and holds them encoded, managedFields
// dropped, as they are on the server.
func TestWireInformer(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := t.Context()
	c := env.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}); err != nil {
		t.Fatal(err)
	}
	managed := map[string]string{databasev1alpha1.LabelManagedBy: databasev1alpha1.ManagedBy}
	mine := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: "shop", Labels: managed}, Data: map[string][]byte{"a": []byte("1")}}
	theirs := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Namespace: "shop"}}
	for _, s := range []*corev1.Secret{mine, theirs} {
		if err := c.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}

	unused := func(context.Context, metav1.ListOptions) error {
		t.Error("the informer used controller-runtime's lister and watcher")
		return errors.New("not this one")
	}
	informer := CacheOptions(env.Config, Settings{Managed: managed}).NewInformer(&toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return nil, unused(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return nil, unused(ctx, o)
		},
	}, &corev1.Secret{}, 0, toolscache.Indexers{})
	go informer.RunWithContext(ctx)
	syncCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !toolscache.WaitForCacheSync(syncCtx.Done(), informer.HasSynced) {
		t.Fatal("the informer did not sync")
	}

	// held is the one Secret the store holds, decoded, once it has
	// resource version rv (or is gone, for "").
	held := func(rv string) *corev1.Secret {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			items := informer.GetStore().List()
			if rv == "" && len(items) == 0 {
				return nil
			}
			if len(items) == 1 {
				e, ok := items[0].(*wireSecret)
				if !ok {
					t.Fatalf("the store holds a %T", items[0])
				}
				if e.GetResourceVersion() == rv {
					return e.DeepCopyObject().(*corev1.Secret)
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("the store holds %d objects, waiting for resource version %q", len(items), rv)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	check := func(got *corev1.Secret) {
		t.Helper()
		want := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(mine), want); err != nil {
			t.Fatal(err)
		}
		if len(want.ManagedFields) == 0 {
			t.Fatal("the server recorded no managedFields: nothing to drop")
		}
		want.ManagedFields, want.TypeMeta = nil, metav1.TypeMeta{}
		if !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("the cached Secret differs from the server's: %s", cmp.Diff(want, got))
		}
	}
	check(held(mine.ResourceVersion)) // listed

	mine.Data["b"] = []byte("2")
	if err := c.Update(ctx, mine); err != nil {
		t.Fatal(err)
	}
	check(held(mine.ResourceVersion)) // watched
	if err := c.Delete(ctx, mine); err != nil {
		t.Fatal(err)
	}
	held("")
}

// BenchmarkChildFromTheWire is the cost of one StatefulSet the operator
// builds, as a watch event brings it (protobuf, managedFields of about the
// object's size), until the cache holds it: decoded whole and encoded again
// (encodedAs, a namespace-scoped cache), or cut out of the wire (fromWire).
func BenchmarkChildFromTheWire(b *testing.B) {
	js, err := json.Marshal(specs.StatefulSet(specs.SampleDatabase("orders"), specs.Platform{}))
	if err != nil {
		b.Fatal(err)
	}
	sts := &appsv1.StatefulSet{}
	if err := json.Unmarshal(js, sts); err != nil {
		b.Fatal(err)
	}
	sts.ResourceVersion = "12345"
	sts.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "myoperator", Operation: metav1.ManagedFieldsOperationApply,
		APIVersion: "apps/v1", FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(string(js))}}
	wire, err := sts.Marshal()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("decoded", func(b *testing.B) {
		transform := encodedAs[appsv1.StatefulSet](cache.TransformStripManagedFields())
		b.ReportAllocs()
		for b.Loop() {
			obj := &appsv1.StatefulSet{}
			if err := obj.Unmarshal(wire); err != nil {
				b.Fatal(err)
			}
			if _, err := transform(obj); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("wire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := fromWire[appsv1.StatefulSet](wire); err != nil {
				b.Fatal(err)
			}
		}
	})
}

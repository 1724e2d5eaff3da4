package leancache

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// The cache transform makes the strings every child repeats share one copy:
// two decoded objects end up pointing at the same bytes.
func TestCanonicalStringsShareOneCopy(t *testing.T) {
	decoded := func() *corev1.Pod {
		// Fresh copies, as a decoder makes them.
		key := strings.Clone(databasev1alpha1.LabelManagedBy)
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Labels:          map[string]string{key: strings.Clone(databasev1alpha1.ManagedBy), "team": "a"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: strings.Clone("apps/v1"), Kind: strings.Clone("StatefulSet"), Name: "orders"}},
		}}
	}
	transform := operatorCanon.transform(func(obj any) (any, error) { return obj, nil })
	objs := make([]*corev1.Pod, 0, 2)
	for range 2 {
		out, err := transform(decoded())
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, out.(*corev1.Pod))
	}
	same := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	keyOf := func(pod *corev1.Pod) string {
		for k := range pod.Labels {
			if k == databasev1alpha1.LabelManagedBy {
				return k
			}
		}
		return ""
	}
	if !same(keyOf(objs[0]), keyOf(objs[1])) {
		t.Error("the label key is not shared")
	}
	if !same(objs[0].Labels[databasev1alpha1.LabelManagedBy], objs[1].Labels[databasev1alpha1.LabelManagedBy]) {
		t.Error("the shared label value is not shared")
	}
	if !same(objs[0].OwnerReferences[0].Kind, objs[1].OwnerReferences[0].Kind) {
		t.Error("the owner reference's kind is not shared")
	}
	if objs[0].Labels["team"] != "a" {
		t.Errorf("a label of someone else was changed: %v", objs[0].Labels)
	}
}

// The strings of a pod's spec that do not depend on the MyDatabase (its
// template's, and those the API server defaults) share one copy too, in
// place; nothing else changes.
func TestCanonicalStringsSharePodSpecs(t *testing.T) {
	db := specs.SampleDatabase("orders")
	db.Spec.Replicas = ptr.To[int32](3)
	// decoded is a pod of the StatefulSet as a decoder makes it: every
	// string its own, and a default the API server fills in.
	decoded := func() *corev1.Pod {
		t.Helper()
		pod := &corev1.Pod{}
		if err := json.Unmarshal(podJSON(t, db), pod); err != nil {
			t.Fatal(err)
		}
		pod.Spec.Containers[0].TerminationMessagePath = strings.Clone(corev1.TerminationMessagePathDefault)
		return pod
	}
	transform := operatorCanon.transform(func(obj any) (any, error) { return obj, nil })
	pod := decoded()
	if _, err := transform(pod); err != nil {
		t.Fatal(err)
	}
	if want := decoded(); !equality.Semantic.DeepEqual(pod, want) {
		t.Fatalf("the transform changed the pod: %s", cmp.Diff(want, pod))
	}
	shared, private := 0, []string{}
	rewriteStrings(reflect.ValueOf(&pod.Spec).Elem(), func(s string) (string, bool) {
		switch c, ok := operatorCanon[s]; {
		case ok && unsafe.StringData(c) == unsafe.StringData(s):
			shared++
		case ok:
			private = append(private, s)
		}
		return "", false
	})
	if len(private) > 0 {
		t.Errorf("%d strings with a canonical copy are still private: %q", len(private), private)
	}
	if shared < 20 {
		t.Errorf("only %d strings share the canonical copy", shared)
	}
	for _, s := range []string{corev1.TerminationMessagePathDefault, specs.Image(db), specs.DataVolumeName} {
		if _, ok := operatorCanon[s]; !ok {
			t.Errorf("%q has no canonical copy", s)
		}
	}
	for _, s := range []string{db.Name, specs.HeadlessServiceName(db)} {
		if _, ok := operatorCanon[s]; ok {
			t.Errorf("%q, which names one MyDatabase, has a canonical copy", s)
		}
	}
}

// podJSON is a pod of db's StatefulSet: its template, as JSON.
func podJSON(tb testing.TB, db *databasev1alpha1.MyDatabase) []byte {
	tb.Helper()
	raw, err := json.Marshal(specs.StatefulSet(db, specs.Platform{}).Spec.Template)
	if err != nil {
		tb.Fatal(err)
	}
	return raw
}

// BenchmarkCanonicalPod is the transform's cost on a pod as the cache
// decodes one.
func BenchmarkCanonicalPod(b *testing.B) {
	pod := &corev1.Pod{}
	if err := json.Unmarshal(podJSON(b, specs.SampleDatabase("orders")), pod); err != nil {
		b.Fatal(err)
	}
	transform := operatorCanon.transform(func(obj any) (any, error) { return obj, nil })
	b.ReportAllocs()
	for b.Loop() {
		if _, err := transform(pod); err != nil {
			b.Fatal(err)
		}
	}
}

// operatorCanon is the canon of the operator's own cache
// (internal/controller/mydatabase.CacheOptions).
var operatorCanon = newCanon(Settings{Shared: specs.SharedStrings(), PodSamples: specs.SamplePodSpecs()})

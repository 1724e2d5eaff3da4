package manager

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
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
	decoded := func() *corev1.ConfigMap {
		// Fresh copies, as a decoder makes them.
		key := strings.Clone(databasev1alpha1.LabelManagedBy)
		return &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{key: strings.Clone(databasev1alpha1.ManagedBy), "team": "a"}},
			Data:       map[string]string{specs.HBAConfKey: strings.Clone(specs.ConfigData(&databasev1alpha1.MyDatabase{})[specs.HBAConfKey])},
		}
	}
	transform := canonicalStrings(func(obj any) (any, error) { return obj, nil })
	objs := make([]*corev1.ConfigMap, 0, 2)
	for range 2 {
		out, err := transform(decoded())
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, out.(*corev1.ConfigMap))
	}
	same := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	keyOf := func(cm *corev1.ConfigMap) string {
		for k := range cm.Labels {
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
	if !same(objs[0].Data[specs.HBAConfKey], objs[1].Data[specs.HBAConfKey]) {
		t.Error("the ConfigMap file is not shared")
	}
	if objs[0].Labels["team"] != "a" {
		t.Errorf("a label of someone else was changed: %v", objs[0].Labels)
	}
}

// The strings of a StatefulSet's, a pod's and a Service's spec that do not depend on
// the MyDatabase (its pod template's, and those the API server defaults)
// share one copy too, in place; nothing else changes.
func TestCanonicalStringsSharePodSpecs(t *testing.T) {
	db := sampleDatabase("orders")
	db.Spec.Replicas = ptr.To[int32](3)
	raw, err := json.Marshal(specs.StatefulSet(db, specs.Platform{}))
	if err != nil {
		t.Fatal(err)
	}
	// decoded is the StatefulSet as a decoder makes it: every string its
	// own, and a default the API server fills in.
	decoded := func() *appsv1.StatefulSet {
		sts := &appsv1.StatefulSet{}
		if err := json.Unmarshal(raw, sts); err != nil {
			t.Fatal(err)
		}
		sts.Spec.Template.Spec.Containers[0].TerminationMessagePath = strings.Clone(corev1.TerminationMessagePathDefault)
		return sts
	}
	transform := canonicalStrings(func(obj any) (any, error) { return obj, nil })
	sts := decoded()
	pod := &corev1.Pod{Spec: *decoded().Spec.Template.Spec.DeepCopy()}
	// A Service as the API server returns it: the defaults filled in.
	svc := &corev1.Service{Spec: corev1.ServiceSpec{
		Type: corev1.ServiceType(strings.Clone(string(corev1.ServiceTypeClusterIP))), SessionAffinity: corev1.ServiceAffinity(strings.Clone(string(corev1.ServiceAffinityNone))),
		IPFamilies: []corev1.IPFamily{corev1.IPFamily(strings.Clone(string(corev1.IPv4Protocol)))}, ClusterIP: "10.0.0.7",
		Ports: []corev1.ServicePort{{Name: "postgres", Protocol: corev1.Protocol(strings.Clone(string(corev1.ProtocolTCP))), Port: 5432}},
	}}
	for _, obj := range []any{sts, pod, svc} {
		if _, err := transform(obj); err != nil {
			t.Fatal(err)
		}
	}
	if want := decoded(); !equality.Semantic.DeepEqual(sts, want) {
		t.Fatalf("the transform changed the StatefulSet: %s", cmp.Diff(want, sts))
	}
	if want := decoded().Spec.Template.Spec; !equality.Semantic.DeepEqual(pod.Spec, want) {
		t.Fatalf("the transform changed the pod: %s", cmp.Diff(want, pod.Spec))
	}
	for name, spec := range map[string]any{"StatefulSet": &sts.Spec, "pod": &pod.Spec, "Service": &svc.Spec} {
		shared, private := 0, []string{}
		rewriteStrings(reflect.ValueOf(spec).Elem(), func(s string) (string, bool) {
			switch c, ok := canonical[s]; {
			case ok && unsafe.StringData(c) == unsafe.StringData(s):
				shared++
			case ok:
				private = append(private, s)
			}
			return "", false
		})
		if len(private) > 0 {
			t.Errorf("%s: %d strings with a canonical copy are still private: %q", name, len(private), private)
		}
		if least := map[string]int{"StatefulSet": 20, "pod": 20, "Service": 4}[name]; shared < least {
			t.Errorf("%s: only %d strings share the canonical copy", name, shared)
		}
	}
	for _, s := range []string{corev1.TerminationMessagePathDefault, specs.Image(db), specs.DataVolumeName} {
		if _, ok := canonical[s]; !ok {
			t.Errorf("%q has no canonical copy", s)
		}
	}
	for _, s := range []string{db.Name, specs.HeadlessServiceName(db)} {
		if _, ok := canonical[s]; ok {
			t.Errorf("%q, which names one MyDatabase, has a canonical copy", s)
		}
	}
}

// BenchmarkCanonicalStatefulSet is the transform's cost on a StatefulSet
// as the cache decodes one.
func BenchmarkCanonicalStatefulSet(b *testing.B) {
	db := sampleDatabase("orders")
	raw, err := json.Marshal(specs.StatefulSet(db, specs.Platform{}))
	if err != nil {
		b.Fatal(err)
	}
	sts := &appsv1.StatefulSet{}
	if err := json.Unmarshal(raw, sts); err != nil {
		b.Fatal(err)
	}
	transform := canonicalStrings(func(obj any) (any, error) { return obj, nil })
	b.ReportAllocs()
	for b.Loop() {
		if _, err := transform(sts); err != nil {
			b.Fatal(err)
		}
	}
}

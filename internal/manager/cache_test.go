package manager

import (
	"strings"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

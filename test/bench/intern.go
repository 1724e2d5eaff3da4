package bench

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"example.com/myoperator/internal/specs"
)

// internTransform is the +intern experiment: after next, equal strings
// that every managed object repeats (label and annotation keys, the shared
// label values, ConfigMap files) point at one copy instead of one per
// object. Values unique to one MyDatabase (its name, UID, hashes) are left
// alone so that the table stays small.
func internTransform(next toolscache.TransformFunc) toolscache.TransformFunc {
	var mu sync.Mutex
	table := map[string]string{}
	intern := func(v string) string {
		mu.Lock()
		defer mu.Unlock()
		if c, ok := table[v]; ok {
			return c
		}
		table[v] = v
		return v
	}
	sharedValue := map[string]bool{specs.LabelName: true, specs.LabelComponent: true, specs.LabelManagedBy: true}
	internMap := func(m map[string]string, values func(k, v string) bool) map[string]string {
		if len(m) == 0 {
			return m
		}
		out := make(map[string]string, len(m))
		for k, v := range m {
			if values(k, v) {
				v = intern(v)
			}
			out[intern(k)] = v
		}
		return out
	}
	return func(obj any) (any, error) {
		if next != nil {
			var err error
			if obj, err = next(obj); err != nil {
				return obj, err
			}
		}
		if m, ok := obj.(metav1.Object); ok {
			m.SetLabels(internMap(m.GetLabels(), func(k, _ string) bool { return sharedValue[k] }))
			m.SetAnnotations(internMap(m.GetAnnotations(), func(string, string) bool { return false }))
		}
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			cm.Data = internMap(cm.Data, func(string, string) bool { return true })
		}
		return obj, nil
	}
}

package manager

import (
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// CacheOptions keeps the informer cache to what the operator manages: every
// child kind is watched only through the managed-by label, so the Secrets,
// ConfigMaps and pods of everything else in a large cluster cost no memory,
// managedFields (often half an object's size) are dropped, and the strings
// every child repeats are shared (canonicalStrings). With namespaces, the
// operator watches only those (a namespace-scoped install,
// config/namespaced); without, every namespace.
func CacheOptions(namespaces ...string) cache.Options {
	managed := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{databasev1alpha1.LabelManagedBy: databasev1alpha1.ManagedBy})}
	var only map[string]cache.Config
	for _, ns := range namespaces {
		if only == nil {
			only = map[string]cache.Config{}
		}
		only[ns] = cache.Config{}
	}
	return cache.Options{
		DefaultNamespaces: only,
		DefaultTransform:  canonicalStrings(cache.TransformStripManagedFields()),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}:                managed,
			&corev1.ConfigMap{}:             managed,
			&corev1.Service{}:               managed,
			&corev1.Pod{}:                   managed,
			&corev1.PersistentVolumeClaim{}: managed,
			&appsv1.StatefulSet{}:           managed,
			&batchv1.Job{}:                  managed,
			&policyv1.PodDisruptionBudget{}: managed,
			&networkingv1.NetworkPolicy{}:   managed,
			&corev1.ServiceAccount{}:        managed,
			&rbacv1.Role{}:                  managed,
			&rbacv1.RoleBinding{}:           managed,
			&coordinationv1.Lease{}:         managed,
		},
	}
}

// canonical holds one copy of each of specs.SharedStrings. It is fixed:
// what the cluster holds cannot make it grow.
var canonical = func() map[string]string {
	m := map[string]string{}
	for _, s := range specs.SharedStrings() {
		m[s] = s
	}
	return m
}()

// canonicalStrings runs next, then points the label and annotation keys,
// the shared label values, owner reference kinds and the ConfigMap files of
// each cached object at the canonical copy: a decoded object otherwise owns
// a private copy of each, which made up about a fifth of the heap per
// MyDatabase (docs/benchmarks.md, B4).
func canonicalStrings(next toolscache.TransformFunc) toolscache.TransformFunc {
	return func(obj any) (any, error) {
		obj, err := next(obj)
		if err != nil {
			return obj, err
		}
		if m, ok := obj.(metav1.Object); ok {
			m.SetLabels(canonicalMap(m.GetLabels()))
			m.SetAnnotations(canonicalMap(m.GetAnnotations()))
			refs := m.GetOwnerReferences()
			for i := range refs {
				refs[i].APIVersion, refs[i].Kind = canonicalString(refs[i].APIVersion), canonicalString(refs[i].Kind)
			}
		}
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			cm.Data = canonicalMap(cm.Data)
		}
		return obj, nil
	}
}

func canonicalString(s string) string {
	if c, ok := canonical[s]; ok {
		return c
	}
	return s
}

// canonicalMap copies m with canonical keys and values; a map cannot
// change its keys in place.
func canonicalMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[canonicalString(k)] = canonicalString(v)
	}
	return out
}

package controller

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/myoperator/internal/specs"
)

// CacheOptions keeps the informer cache to what the operator manages: every
// child kind is watched only through the managed-by label, so the Secrets,
// ConfigMaps and pods of everything else in a large cluster cost no memory,
// and managedFields (often half an object's size) are dropped. With
// namespaces, the operator watches only those (a namespace-scoped install,
// config/namespaced); without, every namespace.
func CacheOptions(namespaces ...string) cache.Options {
	managed := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{specs.LabelManagedBy: specs.ManagedBy})}
	var only map[string]cache.Config
	for _, ns := range namespaces {
		if only == nil {
			only = map[string]cache.Config{}
		}
		only[ns] = cache.Config{}
	}
	return cache.Options{
		DefaultNamespaces: only,
		DefaultTransform:  cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}:                managed,
			&corev1.ConfigMap{}:             managed,
			&corev1.Service{}:               managed,
			&corev1.Pod{}:                   managed,
			&corev1.PersistentVolumeClaim{}: managed,
			&appsv1.StatefulSet{}:           managed,
			&policyv1.PodDisruptionBudget{}: managed,
		},
	}
}

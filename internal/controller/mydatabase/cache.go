package mydatabase

import (
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/leancache"
	"example.com/myoperator/internal/specs"
)

// CacheOptions is the informer cache this controller reads from: only
// what carries the managed-by label, in namespaces (every namespace when
// none), held as internal/leancache tunes it for the children the
// builders make.
func CacheOptions(config *rest.Config, namespaces ...string) cache.Options {
	return leancache.CacheOptions(config, leancache.Settings{
		Managed:    labels.Set{databasev1alpha1.LabelManagedBy: databasev1alpha1.ManagedBy},
		Shared:     specs.SharedStrings(),
		PodSamples: specs.SamplePodSpecs(),
		Namespaces: namespaces,
	})
}

package manager

import (
	"reflect"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// CacheOptions keeps the informer cache to what the operator manages: every
// child kind is watched only through the managed-by label, so the Secrets,
// ConfigMaps and pods of everything else in a large cluster cost no memory,
// and managedFields (often half an object's size) are dropped. The kinds
// the operator only reads with Get are held encoded (encoded), the others
// share the strings every child repeats (canonicalStrings). With
// namespaces, the operator watches only those (a namespace-scoped install,
// config/namespaced); without, every namespace, and the kinds held encoded
// are read straight from the wire (wire.go) with config.
func CacheOptions(config *rest.Config, namespaces ...string) cache.Options {
	selector := labels.SelectorFromSet(labels.Set{databasev1alpha1.LabelManagedBy: databasev1alpha1.ManagedBy})
	var only map[string]cache.Config
	for _, ns := range namespaces {
		if only == nil {
			only = map[string]cache.Config{}
		}
		only[ns] = cache.Config{}
	}
	managed := cache.ByObject{Label: selector}
	k := kinds{selector: selector, byObject: map[client.Object]cache.ByObject{
		// Read whole by the event predicates (controller.go), and listed.
		&corev1.Pod{}:                   managed,
		&corev1.PersistentVolumeClaim{}: managed,
		&coordinationv1.Lease{}:         managed,
	}, wire: map[reflect.Type]wireKind{}}
	holdEncoded[corev1.Secret](k)
	holdEncoded[corev1.ConfigMap](k)
	holdEncoded[corev1.Service](k)
	holdEncoded[appsv1.StatefulSet](k)
	holdEncoded[batchv1.Job](k)
	holdEncoded[policyv1.PodDisruptionBudget](k)
	holdEncoded[networkingv1.NetworkPolicy](k)
	holdEncoded[corev1.ServiceAccount](k)
	holdEncoded[rbacv1.Role](k)
	holdEncoded[rbacv1.RoleBinding](k)
	opts := cache.Options{
		DefaultNamespaces: only,
		DefaultTransform:  canonicalStrings(cache.TransformStripManagedFields()),
		ByObject:          k.byObject,
	}
	if len(namespaces) == 0 {
		opts.NewInformer = wireInformers(config, selector.String(), k.wire)
	}
	return opts
}

// kinds are the cache's settings by kind.
type kinds struct {
	selector labels.Selector
	byObject map[client.Object]cache.ByObject
	wire     map[reflect.Type]wireKind
}

// holdEncoded has the cache hold the kind P encoded: through encodedAs,
// or read from the wire.
func holdEncoded[T any, P interface {
	*T
	protoObject
}](k kinds) {
	k.byObject[P(new(T))] = cache.ByObject{Label: k.selector, Transform: encodedAs[T, P](cache.TransformStripManagedFields())}
	t, kind := wireKindOf[T, P]()
	k.wire[t] = kind
}

// canonical holds one copy of each of specs.SharedStrings, of the strings
// Kubernetes defaults in the pods' specs, and of the strings of a pod
// template that do not depend on its MyDatabase (podStrings). It is fixed:
// what the cluster holds cannot make it grow.
var canonical = func() map[string]string {
	m := map[string]string{}
	for _, s := range slices.Concat(specs.SharedStrings(), serverDefaults, podStrings()) {
		m[s] = s
	}
	return m
}()

// serverDefaults are the values the API server fills in, unasked, in the
// specs of the pods the StatefulSets make.
var serverDefaults = []string{
	string(corev1.ProtocolTCP), string(corev1.PullIfNotPresent), string(corev1.PullAlways), string(corev1.TerminationMessageReadFile),
	corev1.TerminationMessagePathDefault, string(corev1.DNSClusterFirst), corev1.DefaultSchedulerName, string(corev1.RestartPolicyAlways),
	string(corev1.ResourceCPU), string(corev1.ResourceMemory),
}

// podStrings are the strings of the pod template of a StatefulSet the
// operator builds that do not depend on the MyDatabase: those found in the
// templates of two MyDatabases that differ only in name, namespace and
// uid. Every pod repeats them.
func podStrings() []string {
	found := func(name string) map[string]bool {
		seen := map[string]bool{}
		rewriteStrings(reflect.ValueOf(&specs.StatefulSet(sampleDatabase(name), specs.Platform{}).Spec.Template.Spec).Elem(), func(s string) (string, bool) {
			seen[s] = true
			return "", false
		})
		return seen
	}
	a, b := found("first"), found("second")
	var both []string
	for s := range a {
		if b[s] {
			both = append(both, s)
		}
	}
	return both
}

// sampleDatabase is a MyDatabase named name with the CRD's defaults (those
// the StatefulSet reads; api/v1alpha1's markers), in a namespace and with a
// uid of its own.
func sampleDatabase(name string) *databasev1alpha1.MyDatabase {
	return &databasev1alpha1.MyDatabase{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: name + "-ns", UID: types.UID(name + "-uid")},
		Spec: databasev1alpha1.MyDatabaseSpec{
			Engine: databasev1alpha1.EnginePostgres, Version: "17", Replicas: ptr.To[int32](1),
			DatabaseName: "app", User: "app", DeletionPolicy: databasev1alpha1.DeletionPolicyRetain,
			Service: databasev1alpha1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Port: 5432},
		},
	}
}

// canonicalStrings runs next, then points the label and annotation keys,
// the shared label values, owner reference kinds and the strings of pod
// specs of each cached object at the canonical copy: a decoded object
// otherwise owns a private copy of each, which made up about a fifth of the
// heap per MyDatabase (docs/benchmarks.md, B4). Maps are changed in place.
func canonicalStrings(next toolscache.TransformFunc) toolscache.TransformFunc {
	return func(obj any) (any, error) {
		obj, err := next(obj)
		if err != nil {
			return obj, err
		}
		if m, ok := obj.(metav1.Object); ok {
			rewriteMap(m.GetLabels(), canonicalOf)
			rewriteMap(m.GetAnnotations(), canonicalOf)
			canonicalOwners(m.GetOwnerReferences())
		}
		if pod, ok := obj.(*corev1.Pod); ok {
			rewriteStrings(reflect.ValueOf(&pod.Spec).Elem(), canonicalOf)
		}
		return obj, nil
	}
}

// canonicalOwners points the API versions and kinds of refs at the
// canonical copy.
func canonicalOwners(refs []metav1.OwnerReference) {
	for i := range refs {
		refs[i].APIVersion, refs[i].Kind = canonicalString(refs[i].APIVersion), canonicalString(refs[i].Kind)
	}
}

func canonicalString(s string) string {
	if c, ok := canonical[s]; ok {
		return c
	}
	return s
}

func canonicalOf(s string) (string, bool) {
	c, ok := canonical[s]
	return c, ok
}

// rewriteMap is rewriteStrings for a map[string]string, in place:
// assigning to an existing key stores the key given, so a decoded copy is
// let go.
func rewriteMap(m map[string]string, f func(string) (string, bool)) {
	for k, v := range m {
		nk, keyOK := f(k)
		nv, valueOK := f(v)
		switch {
		case keyOK && valueOK:
			m[nk] = nv
		case keyOK:
			m[nk] = v
		case valueOK:
			m[k] = nv
		}
	}
}

// rewriteStrings calls f on every string v holds, through struct fields,
// pointers, slices and map keys and values, and puts what f returns in its
// place when f says so. v must be settable. Unexported fields (a
// quantity's) are left alone.
func rewriteStrings(v reflect.Value, f func(string) (string, bool)) {
	switch v.Kind() {
	case reflect.String:
		if s, ok := f(v.String()); ok {
			v.SetString(s)
		}
	case reflect.Pointer:
		if !v.IsNil() {
			rewriteStrings(v.Elem(), f)
		}
	case reflect.Struct:
		// Not v.Fields(), which builds a StructField for every field: six
		// times slower here (BenchmarkCanonicalPod).
		for i := range v.NumField() { //nolint:modernize
			if field := v.Field(i); field.CanSet() {
				rewriteStrings(field, f)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return
		}
		for i := range v.Len() {
			rewriteStrings(v.Index(i), f)
		}
	case reflect.Map:
		if m, ok := reflect.TypeAssert[map[string]string](v); ok {
			rewriteMap(m, f)
			return
		}
		if v.Type().Key().Kind() != reflect.String {
			return
		}
		for it := v.MapRange(); it.Next(); {
			k, val, changed := it.Key(), it.Value(), false
			if s, ok := f(k.String()); ok {
				k, changed = stringOf(k.Type(), s), true
			}
			if val.Kind() == reflect.String {
				if s, ok := f(val.String()); ok {
					val, changed = stringOf(val.Type(), s), true
				}
			}
			if changed {
				v.SetMapIndex(k, val) // an equal key is replaced too
			}
		}
	}
}

// stringOf is s as a value of the string type t.
func stringOf(t reflect.Type, s string) reflect.Value {
	v := reflect.New(t).Elem()
	v.SetString(s)
	return v
}

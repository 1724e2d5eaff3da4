package leancache

import (
	"context"
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
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/myoperator/internal/apply"
)

// Settings are what the operator's cache is tuned to.
type Settings struct {
	// Managed selects the objects the operator manages: every child kind
	// is watched only through it.
	Managed labels.Set
	// Shared are strings the metadata of every cached object repeats
	// verbatim (label and annotation keys, shared label values, owner
	// reference kinds): the cache keeps one copy of each.
	Shared []string
	// PodSamples are the pod templates of two owners that differ only in
	// name, namespace and uid: the strings found in both do not depend on
	// the owner, every pod repeats them, and the cache keeps one copy of
	// each.
	PodSamples [2]*corev1ac.PodSpecApplyConfiguration
	// Namespaces, when set, are the only ones watched (a namespace-scoped
	// install); by default every namespace.
	Namespaces []string
}

// CacheOptions keeps the informer cache to what the operator manages: every
// child kind is watched only through s.Managed, so the Secrets,
// ConfigMaps and pods of everything else in a large cluster cost no memory,
// and managedFields (often half an object's size) are dropped. The kinds
// the operator only reads with Get are held encoded (encoded), the others
// share the strings every child repeats (canonicalStrings). With
// s.Namespaces, the operator watches only those; without, every namespace,
// and the kinds held encoded are read straight from the wire (wire.go)
// with config.
func CacheOptions(config *rest.Config, s Settings) cache.Options {
	selector := labels.SelectorFromSet(s.Managed)
	var only map[string]cache.Config
	for _, ns := range s.Namespaces {
		if only == nil {
			only = map[string]cache.Config{}
		}
		only[ns] = cache.Config{}
	}
	managed := cache.ByObject{Label: selector}
	k := kinds{selector: selector, byObject: map[client.Object]cache.ByObject{
		// Read whole by the event predicates, and listed.
		&corev1.Pod{}:                   managed,
		&corev1.PersistentVolumeClaim{}: managed,
		&coordinationv1.Lease{}:         managed,
	}, wire: map[reflect.Type]wireKind{}}
	for _, kind := range encodedKinds {
		kind.hold(k)
	}
	opts := cache.Options{
		DefaultNamespaces: only,
		DefaultTransform:  newCanon(s).transform(cache.TransformStripManagedFields()),
		ByObject:          k.byObject,
	}
	if len(s.Namespaces) == 0 {
		opts.NewInformer = wireInformers(config, selector.String(), k.wire)
	}
	return opts
}

// encodedKinds are the kinds the operator only reads with Get, held
// encoded.
var encodedKinds = []encodedKind{
	encodedKindOf[corev1.Secret](), encodedKindOf[corev1.ConfigMap](), encodedKindOf[corev1.Service](),
	encodedKindOf[appsv1.StatefulSet](), encodedKindOf[appsv1.Deployment](), encodedKindOf[batchv1.Job](), encodedKindOf[policyv1.PodDisruptionBudget](),
	encodedKindOf[networkingv1.NetworkPolicy](), encodedKindOf[corev1.ServiceAccount](), encodedKindOf[rbacv1.Role](),
	encodedKindOf[rbacv1.RoleBinding](),
}

// encodedKind is a kind held encoded: an empty object of it, and what
// sets the cache up to hold it so.
type encodedKind struct {
	obj  client.Object
	hold func(kinds)
}

func encodedKindOf[T any, P interface {
	*T
	protoObject
}]() encodedKind {
	return encodedKind{obj: P(new(T)), hold: holdEncoded[T, P]}
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

// canon holds one copy of each of Settings.Shared, of the strings
// Kubernetes defaults in the pods' specs, and of the strings of the pod
// templates found in both PodSamples. It is fixed: what the cluster holds
// cannot make it grow.
type canon map[string]string

func newCanon(s Settings) canon {
	c := canon{}
	for _, str := range slices.Concat(s.Shared, serverDefaults, common(s.PodSamples)) {
		c[str] = str
	}
	return c
}

// serverDefaults are the values the API server fills in, unasked, in the
// specs of the pods the StatefulSets make.
var serverDefaults = []string{
	string(corev1.ProtocolTCP), string(corev1.PullIfNotPresent), string(corev1.PullAlways), string(corev1.TerminationMessageReadFile),
	corev1.TerminationMessagePathDefault, string(corev1.DNSClusterFirst), corev1.DefaultSchedulerName, string(corev1.RestartPolicyAlways),
	string(corev1.ResourceCPU), string(corev1.ResourceMemory),
}

// common are the strings found in both pod templates.
func common(samples [2]*corev1ac.PodSpecApplyConfiguration) []string {
	if samples[0] == nil || samples[1] == nil {
		return nil
	}
	found := func(spec *corev1ac.PodSpecApplyConfiguration) map[string]bool {
		seen := map[string]bool{}
		rewriteStrings(reflect.ValueOf(spec).Elem(), func(s string) (string, bool) {
			seen[s] = true
			return "", false
		})
		return seen
	}
	a, b := found(samples[0]), found(samples[1])
	var both []string
	for s := range a {
		if b[s] {
			both = append(both, s)
		}
	}
	return both
}

// transform runs next, then points the label and annotation keys,
// the shared label values, owner reference kinds and the strings of pod
// specs of each cached object at the canonical copy: a decoded object
// otherwise owns a private copy of each, a large part of the heap per
// MyDatabase (docs/benchmarks.md, B4). Maps are changed in place.
func (c canon) transform(next toolscache.TransformFunc) toolscache.TransformFunc {
	return func(obj any) (any, error) {
		obj, err := next(obj)
		if err != nil {
			return obj, err
		}
		if m, ok := obj.(metav1.Object); ok {
			rewriteMap(m.GetLabels(), c.of)
			rewriteMap(m.GetAnnotations(), c.of)
			c.owners(m.GetOwnerReferences())
		}
		if pod, ok := obj.(*corev1.Pod); ok {
			rewriteStrings(reflect.ValueOf(&pod.Spec).Elem(), c.of)
		}
		return obj, nil
	}
}

// owners points the API versions and kinds of refs at the canonical copy.
func (c canon) owners(refs []metav1.OwnerReference) {
	for i := range refs {
		refs[i].APIVersion, refs[i].Kind = c.string(refs[i].APIVersion), c.string(refs[i].Kind)
	}
}

func (c canon) string(s string) string {
	if cs, ok := c[s]; ok {
		return cs
	}
	return s
}

func (c canon) of(s string) (string, bool) {
	cs, ok := c[s]
	return cs, ok
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

// Marks finds, in the cache's informer stores, the cached copy of a child
// the apply engine may mark as found agreeing (apply.Agreement): the
// kinds held encoded, whose copies carry the mark. A cache over several
// namespaces has no store of its own per kind (its informer spans one per
// namespace): there every child is checked field by field.
type Marks struct {
	stores map[reflect.Type]toolscache.Store
}

// NewMarks looks up the stores of c's informers of the kinds held
// encoded.
func NewMarks(ctx context.Context, c cache.Cache) (*Marks, error) {
	m := &Marks{stores: map[reflect.Type]toolscache.Store{}}
	for _, kind := range encodedKinds {
		informer, err := c.GetInformer(ctx, kind.obj)
		if err != nil {
			return nil, err
		}
		if s, ok := informer.(interface{ GetStore() toolscache.Store }); ok {
			m.stores[reflect.TypeOf(kind.obj)] = s.GetStore()
		}
	}
	return m, nil
}

// Of returns the cached copy of live, when it is the very version live
// was read from and can carry a mark; nil otherwise.
func (m *Marks) Of(live client.Object) apply.Agreement {
	store, ok := m.stores[reflect.TypeOf(live)]
	if !ok {
		return nil
	}
	obj, exists, err := store.GetByKey(live.GetNamespace() + "/" + live.GetName()) // the informers' key
	if err != nil || !exists {
		return nil
	}
	a, ok := obj.(apply.Agreement)
	if !ok || a.GetResourceVersion() != live.GetResourceVersion() {
		return nil
	}
	return a
}

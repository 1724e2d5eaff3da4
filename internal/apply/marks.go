package apply

import (
	"reflect"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Agreement is implemented by the informer cache's own copy of an object
// that can remember the desired state it was found to agree with
// (internal/manager holds the children it caches encoded this way). The
// mark belongs to that version of the object: a change to the object
// reaches the cache as a new copy, without it.
type Agreement interface {
	GetResourceVersion() string
	// Agrees reports whether this version was marked agreeing with the
	// desired state of that hash.
	Agrees(hash uint64) bool
	MarkAgreed(hash uint64)
}

// Marks finds the cache's own copy of a child by its Go type (the typed
// object Apply is given) and key, in the informers' stores. A kind
// without a store here, or whose copies are not an Agreement, is checked
// field by field on every pass.
type Marks map[reflect.Type]toolscache.Store

// of returns the cached copy of key, when it is the very version live was
// read from and can carry a mark; nil otherwise.
func (m Marks) of(live client.Object, key client.ObjectKey) Agreement {
	store, ok := m[reflect.TypeOf(live)]
	if !ok {
		return nil
	}
	obj, exists, err := store.GetByKey(key.String()) // namespace/name, the informers' key
	if err != nil || !exists {
		return nil
	}
	a, ok := obj.(Agreement)
	if !ok || a.GetResourceVersion() != live.GetResourceVersion() {
		return nil
	}
	return a
}

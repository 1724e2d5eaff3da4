package apply

import (
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Agreement is implemented by the informer cache's own copy of an object
// that can remember the desired state it was found to agree with
// (internal/leancache holds the children it caches encoded this way). The
// mark belongs to that version of the object: a change to the object
// reaches the cache as a new copy, without it.
type Agreement interface {
	GetResourceVersion() string
	// Agrees reports whether this version was marked agreeing with the
	// desired state of that hash.
	Agrees(hash uint64) bool
	MarkAgreed(hash uint64)
}

// Marks finds the cache's own copy of a child, which can carry a mark.
// The informer cache provides it (internal/leancache.Marks).
type Marks interface {
	// Of returns the cached copy of live when it is the very version live
	// was read from and can carry a mark; nil otherwise.
	Of(live client.Object) Agreement
}

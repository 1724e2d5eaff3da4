package leancache

import (
	"fmt"
	"sync/atomic"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// protoObject is a built-in kind with its generated protobuf codec.
type protoObject interface {
	client.Object
	Marshal() ([]byte, error)
	Unmarshal([]byte) error
}

// encoded is how the cache holds a child of a kind the operator only reads
// with Get, and whose events it maps to a MyDatabase by owner reference or
// by label: the whole object in its protobuf encoding, and the metadata
// the informer and the owner-reference handler read on every event (name,
// namespace, resource version, owner references). Decoded, a child takes
// several times the memory of its encoding (docs/benchmarks.md, B4).
//
// The cache copies an object on every read (DeepCopyObject, so that a
// caller may change what it got); an encoded child decodes a fresh whole
// object there instead, of the child's own type, so that readers see
// exactly what they would without it, at the cost of a decode instead of
// a deep copy (docs/benchmarks.md). The rest of the metadata
// is decoded when asked for: the labels on the events of the Secrets,
// which map by label.
//
// It implements metav1.Object itself rather than embedding an ObjectMeta,
// which is 248 bytes even with most fields empty, and it keeps the
// namespace and the owner reference as handles to one shared copy: every
// child of a MyDatabase names the same owner, and the children of a
// namespace the same namespace (80 bytes per child, where an ObjectMeta
// and an owner reference of its own took about 450). A child with more
// than one owner reference (someone else's too) is rare: those are read
// from the encoding. Its type parameters are the child's type, instead of
// a field. Like every object in the cache it is read-only, but for the
// agreement mark (apply.Agreement): its setters panic.
type encoded[T any, P interface {
	*T
	protoObject
}] struct {
	name, resourceVersion string
	namespace             unique.Handle[string]
	// owner is the one owner reference, the zero Handle for none,
	// severalOwners for more.
	owner unique.Handle[ownerRef]
	raw   []byte
	// agreed is the hash of the desired state this very version was found
	// to agree with (apply.Engine), 0 for none.
	agreed atomic.Uint64
}

// Agrees and MarkAgreed are apply.Agreement: a version found to agree
// with a desired state still does as long as the cache holds it, as any
// change makes a new version, held by a new encoded child.
func (e *encoded[T, P]) Agrees(hash uint64) bool { return hash != 0 && e.agreed.Load() == hash }
func (e *encoded[T, P]) MarkAgreed(hash uint64)  { e.agreed.Store(hash) }

// ownerRef is a metav1.OwnerReference that can be compared, and so shared
// through unique.
type ownerRef struct {
	apiVersion, kind, name string
	uid                    types.UID
	controller, block      optionalBool
}

// optionalBool is a *bool that can be compared.
type optionalBool int8

const (
	unset optionalBool = iota
	isFalse
	isTrue
)

func optional(b *bool) optionalBool {
	switch {
	case b == nil:
		return unset
	case *b:
		return isTrue
	}
	return isFalse
}

func (o optionalBool) pointer() *bool {
	if o == unset {
		return nil
	}
	return new(o == isTrue)
}

func (e *encoded[T, P]) GetName() string            { return e.name }
func (e *encoded[T, P]) GetNamespace() string       { return e.namespace.Value() }
func (e *encoded[T, P]) GetResourceVersion() string { return e.resourceVersion }

// ownersOf is what an encoded child keeps of refs: nothing for none, the
// shared copy of one, severalOwners for more.
func ownersOf(refs []metav1.OwnerReference) unique.Handle[ownerRef] {
	switch len(refs) {
	case 0:
		return unique.Handle[ownerRef]{}
	case 1:
		r := refs[0]
		return unique.Make(ownerRef{apiVersion: r.APIVersion, kind: r.Kind, name: r.Name, uid: r.UID,
			controller: optional(r.Controller), block: optional(r.BlockOwnerDeletion)})
	}
	return severalOwners
}

// severalOwners stands for two or more owner references (someone else's
// too): rare, and read from the encoding.
var severalOwners = unique.Make(ownerRef{kind: "(several)"})

// GetOwnerReferences returns a copy of its own of the owner references.
func (e *encoded[T, P]) GetOwnerReferences() []metav1.OwnerReference {
	switch e.owner {
	case unique.Handle[ownerRef]{}:
		return nil
	case severalOwners:
		return e.object().GetOwnerReferences()
	}
	o := e.owner.Value()
	return []metav1.OwnerReference{{APIVersion: o.apiVersion, Kind: o.kind, Name: o.name, UID: o.uid,
		Controller: o.controller.pointer(), BlockOwnerDeletion: o.block.pointer()}}
}

// The other getters read the encoding.
func (e *encoded[T, P]) GetGenerateName() string            { return e.object().GetGenerateName() }
func (e *encoded[T, P]) GetUID() types.UID                  { return e.object().GetUID() }
func (e *encoded[T, P]) GetGeneration() int64               { return e.object().GetGeneration() }
func (e *encoded[T, P]) GetSelfLink() string                { return e.object().GetSelfLink() }
func (e *encoded[T, P]) GetCreationTimestamp() metav1.Time  { return e.object().GetCreationTimestamp() }
func (e *encoded[T, P]) GetDeletionTimestamp() *metav1.Time { return e.object().GetDeletionTimestamp() }
func (e *encoded[T, P]) GetDeletionGracePeriodSeconds() *int64 {
	return e.object().GetDeletionGracePeriodSeconds()
}
func (e *encoded[T, P]) GetLabels() map[string]string                  { return e.object().GetLabels() }
func (e *encoded[T, P]) GetAnnotations() map[string]string             { return e.object().GetAnnotations() }
func (e *encoded[T, P]) GetFinalizers() []string                       { return e.object().GetFinalizers() }
func (e *encoded[T, P]) GetManagedFields() []metav1.ManagedFieldsEntry { return nil } // stripped before encoding

func (e *encoded[T, P]) readOnly(field string) {
	panic(fmt.Sprintf("setting the %s of the cached %s/%s: objects in the cache are read-only (read a copy with the client)",
		field, e.GetNamespace(), e.name))
}

func (e *encoded[T, P]) SetNamespace(string)               { e.readOnly("namespace") }
func (e *encoded[T, P]) SetName(string)                    { e.readOnly("name") }
func (e *encoded[T, P]) SetGenerateName(string)            { e.readOnly("generateName") }
func (e *encoded[T, P]) SetUID(types.UID)                  { e.readOnly("uid") }
func (e *encoded[T, P]) SetResourceVersion(string)         { e.readOnly("resourceVersion") }
func (e *encoded[T, P]) SetGeneration(int64)               { e.readOnly("generation") }
func (e *encoded[T, P]) SetSelfLink(string)                { e.readOnly("selfLink") }
func (e *encoded[T, P]) SetCreationTimestamp(metav1.Time)  { e.readOnly("creationTimestamp") }
func (e *encoded[T, P]) SetDeletionTimestamp(*metav1.Time) { e.readOnly("deletionTimestamp") }
func (e *encoded[T, P]) SetDeletionGracePeriodSeconds(*int64) {
	e.readOnly("deletionGracePeriodSeconds")
}
func (e *encoded[T, P]) SetLabels(map[string]string)                  { e.readOnly("labels") }
func (e *encoded[T, P]) SetAnnotations(map[string]string)             { e.readOnly("annotations") }
func (e *encoded[T, P]) SetFinalizers([]string)                       { e.readOnly("finalizers") }
func (e *encoded[T, P]) SetOwnerReferences([]metav1.OwnerReference)   { e.readOnly("ownerReferences") }
func (e *encoded[T, P]) SetManagedFields([]metav1.ManagedFieldsEntry) { e.readOnly("managedFields") }

// GetObjectKind is empty, as for every object a typed watch decodes.
func (*encoded[T, P]) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject decodes the child.
func (e *encoded[T, P]) DeepCopyObject() runtime.Object { return e.object() }

func (e *encoded[T, P]) object() P {
	obj := P(new(T))
	if err := obj.Unmarshal(e.raw); err != nil {
		// raw is what Marshal made of an object of this very type.
		panic(fmt.Sprintf("decoding the cached %T %s/%s: %v", obj, e.GetNamespace(), e.name, err))
	}
	return obj
}

// encodedAs runs next, then holds each object of type P encoded. An object
// already encoded (the informer may hand one back) passes as it is.
func encodedAs[T any, P interface {
	*T
	protoObject
}](next toolscache.TransformFunc) toolscache.TransformFunc {
	return func(obj any) (any, error) {
		obj, err := next(obj)
		if err != nil {
			return obj, err
		}
		o, ok := obj.(P)
		if !ok {
			return obj, nil
		}
		raw, err := o.Marshal()
		if err != nil {
			return obj, fmt.Errorf("encoding %T %s/%s for the cache: %w", o, o.GetNamespace(), o.GetName(), err)
		}
		return &encoded[T, P]{name: o.GetName(), namespace: unique.Make(o.GetNamespace()), resourceVersion: o.GetResourceVersion(),
			owner: ownersOf(o.GetOwnerReferences()), raw: raw}, nil
	}
}

var _ client.Object = (*encoded[corev1.Secret, *corev1.Secret])(nil)

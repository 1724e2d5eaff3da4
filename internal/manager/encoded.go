package manager

import (
	"fmt"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
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
// namespace, resource version, owner references). Decoded, a StatefulSet
// takes five times the memory of its encoding, and the label and
// annotation maps of every child were a third of the heap per MyDatabase
// (docs/benchmarks.md, B4).
//
// The cache copies an object on every read (DeepCopyObject, so that a
// caller may change what it got); an encoded child decodes a fresh whole
// object there instead, of the child's own type, so that readers see
// exactly what they would without it. Decoding costs about twice a deep
// copy: 28 µs against 13 µs for a StatefulSet. The rest of the metadata
// is decoded when asked for: the labels on the events of the Secrets,
// which map by label.
//
// It implements metav1.Object itself rather than embedding an ObjectMeta,
// which is 248 bytes even with most fields empty, and it keeps the
// namespace and the owner references as handles to one shared copy: every
// child of a MyDatabase names the same owner, and the children of a
// namespace the same namespace (96 bytes per child, where an ObjectMeta
// and an owner reference of its own took about 450). Like every object in
// the cache it is read-only: its setters panic.
type encoded struct {
	name, resourceVersion string
	namespace             unique.Handle[string]
	owners                []unique.Handle[ownerRef]
	raw                   []byte
	// decoded returns an empty object of the child's type.
	decoded func() protoObject
}

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
	return ptr.To(o == isTrue)
}

func (e *encoded) GetName() string            { return e.name }
func (e *encoded) GetNamespace() string       { return e.namespace.Value() }
func (e *encoded) GetResourceVersion() string { return e.resourceVersion }

// GetOwnerReferences returns a copy of the owner references of its own.
func (e *encoded) GetOwnerReferences() []metav1.OwnerReference {
	if len(e.owners) == 0 {
		return nil
	}
	refs := make([]metav1.OwnerReference, len(e.owners))
	for i, h := range e.owners {
		o := h.Value()
		refs[i] = metav1.OwnerReference{APIVersion: o.apiVersion, Kind: o.kind, Name: o.name, UID: o.uid,
			Controller: o.controller.pointer(), BlockOwnerDeletion: o.block.pointer()}
	}
	return refs
}

// The other getters read the encoding.
func (e *encoded) GetGenerateName() string            { return e.object().GetGenerateName() }
func (e *encoded) GetUID() types.UID                  { return e.object().GetUID() }
func (e *encoded) GetGeneration() int64               { return e.object().GetGeneration() }
func (e *encoded) GetSelfLink() string                { return e.object().GetSelfLink() }
func (e *encoded) GetCreationTimestamp() metav1.Time  { return e.object().GetCreationTimestamp() }
func (e *encoded) GetDeletionTimestamp() *metav1.Time { return e.object().GetDeletionTimestamp() }
func (e *encoded) GetDeletionGracePeriodSeconds() *int64 {
	return e.object().GetDeletionGracePeriodSeconds()
}
func (e *encoded) GetLabels() map[string]string                  { return e.object().GetLabels() }
func (e *encoded) GetAnnotations() map[string]string             { return e.object().GetAnnotations() }
func (e *encoded) GetFinalizers() []string                       { return e.object().GetFinalizers() }
func (e *encoded) GetManagedFields() []metav1.ManagedFieldsEntry { return nil } // stripped before encoding

func (e *encoded) readOnly(field string) {
	panic(fmt.Sprintf("setting the %s of the cached %s/%s: objects in the cache are read-only (read a copy with the client)",
		field, e.GetNamespace(), e.name))
}

func (e *encoded) SetNamespace(string)                          { e.readOnly("namespace") }
func (e *encoded) SetName(string)                               { e.readOnly("name") }
func (e *encoded) SetGenerateName(string)                       { e.readOnly("generateName") }
func (e *encoded) SetUID(types.UID)                             { e.readOnly("uid") }
func (e *encoded) SetResourceVersion(string)                    { e.readOnly("resourceVersion") }
func (e *encoded) SetGeneration(int64)                          { e.readOnly("generation") }
func (e *encoded) SetSelfLink(string)                           { e.readOnly("selfLink") }
func (e *encoded) SetCreationTimestamp(metav1.Time)             { e.readOnly("creationTimestamp") }
func (e *encoded) SetDeletionTimestamp(*metav1.Time)            { e.readOnly("deletionTimestamp") }
func (e *encoded) SetDeletionGracePeriodSeconds(*int64)         { e.readOnly("deletionGracePeriodSeconds") }
func (e *encoded) SetLabels(map[string]string)                  { e.readOnly("labels") }
func (e *encoded) SetAnnotations(map[string]string)             { e.readOnly("annotations") }
func (e *encoded) SetFinalizers([]string)                       { e.readOnly("finalizers") }
func (e *encoded) SetOwnerReferences([]metav1.OwnerReference)   { e.readOnly("ownerReferences") }
func (e *encoded) SetManagedFields([]metav1.ManagedFieldsEntry) { e.readOnly("managedFields") }

// GetObjectKind is empty, as for every object a typed watch decodes.
func (*encoded) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject decodes the child.
func (e *encoded) DeepCopyObject() runtime.Object { return e.object() }

func (e *encoded) object() protoObject {
	obj := e.decoded()
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
	decoded := func() protoObject { return P(new(T)) }
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
		e := &encoded{name: o.GetName(), namespace: unique.Make(o.GetNamespace()), resourceVersion: o.GetResourceVersion(),
			raw: raw, decoded: decoded}
		if refs := o.GetOwnerReferences(); len(refs) > 0 {
			e.owners = make([]unique.Handle[ownerRef], len(refs))
			for i, r := range refs {
				e.owners[i] = unique.Make(ownerRef{apiVersion: r.APIVersion, kind: r.Kind, name: r.Name, uid: r.UID,
					controller: optional(r.Controller), block: optional(r.BlockOwnerDeletion)})
			}
		}
		return e, nil
	}
}

var _ client.Object = (*encoded)(nil)

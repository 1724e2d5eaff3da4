package manager

import (
	"fmt"

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
// namespace, resource version, owner references). Decoded, a StatefulSet
// takes five times the memory of its encoding, and the label and
// annotation maps of every child were a third of the heap per MyDatabase
// (docs/benchmarks.md, B4).
//
// The cache copies an object on every read (DeepCopyObject, so that a
// caller may change what it got); an encoded child decodes a fresh whole
// object there instead, of the child's own type, so that readers see
// exactly what they would without it. Decoding costs about twice a deep
// copy: 28 µs against 13 µs for a StatefulSet. The metadata not kept
// (uid, labels, annotations, finalizers) is decoded when asked for: on the
// events of the Secrets, which map by label. Like every object in the
// cache it is read-only.
type encoded struct {
	metav1.ObjectMeta
	raw []byte
	// decoded returns an empty object of the child's type.
	decoded func() protoObject
}

// GetUID, GetLabels, GetAnnotations, GetFinalizers, GetGenerateName and
// GetDeletionGracePeriodSeconds read what encoded does not keep.
func (e *encoded) GetUID() types.UID { return e.object().GetUID() }

func (e *encoded) GetLabels() map[string]string { return e.object().GetLabels() }

func (e *encoded) GetAnnotations() map[string]string { return e.object().GetAnnotations() }

func (e *encoded) GetFinalizers() []string { return e.object().GetFinalizers() }

func (e *encoded) GetGenerateName() string { return e.object().GetGenerateName() }

func (e *encoded) GetDeletionGracePeriodSeconds() *int64 {
	return e.object().GetDeletionGracePeriodSeconds()
}

// GetObjectMeta is the encoded child itself, not the metadata it keeps.
func (e *encoded) GetObjectMeta() metav1.Object { return e }

// GetObjectKind is empty, as for every object a typed watch decodes.
func (*encoded) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject decodes the child.
func (e *encoded) DeepCopyObject() runtime.Object { return e.object() }

func (e *encoded) object() protoObject {
	obj := e.decoded()
	if err := obj.Unmarshal(e.raw); err != nil {
		// raw is what Marshal made of an object of this very type.
		panic(fmt.Sprintf("decoding the cached %T %s/%s: %v", obj, e.Namespace, e.Name, err))
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
		canonicalOwners(o.GetOwnerReferences())
		raw, err := o.Marshal()
		if err != nil {
			return obj, fmt.Errorf("encoding %T %s/%s for the cache: %w", o, o.GetNamespace(), o.GetName(), err)
		}
		return &encoded{ObjectMeta: metav1.ObjectMeta{
			Name: o.GetName(), Namespace: o.GetNamespace(), ResourceVersion: o.GetResourceVersion(),
			Generation: o.GetGeneration(), CreationTimestamp: o.GetCreationTimestamp(), DeletionTimestamp: o.GetDeletionTimestamp(),
			OwnerReferences: o.GetOwnerReferences(),
		}, raw: raw, decoded: decoded}, nil
	}
}

// Package children is how the operator's controllers write and delete
// the objects they own, written once for the MyDatabase and the
// MyDatabasePooler reconcilers: server-side apply through internal/apply
// under one field owner, deletion of the owner's own objects only, the
// optional PodMonitor, and the rule for when an issued certificate is
// due (certificates.go).
package children

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/apply"
	"example.com/myoperator/internal/specs"
)

// FieldOwner is the server-side apply field manager of every child: one
// operator, whichever controller writes.
const FieldOwner = "myoperator"

// Owner writes the children of one object.
type Owner struct {
	Client client.Client
	// Marks is apply.Engine's: nil on a plain client.
	Marks apply.Marks
	// Owns says whether a live child is the owner's: only those are
	// deleted (OwnerUIDLabel, ControlledBy).
	Owns func(client.Object) bool
}

// OwnerUIDLabel owns the children labelled with uid (LabelOwnerUID): a
// MyDatabase's, some of which outlive it by the deletion policy and
// carry no owner reference.
func OwnerUIDLabel(uid types.UID) func(client.Object) bool {
	return func(o client.Object) bool { return o.GetLabels()[databasev1alpha1.LabelOwnerUID] == string(uid) }
}

// ControlledBy owns the children whose controller reference is owner.
func ControlledBy(owner metav1.Object) func(client.Object) bool {
	return func(o client.Object) bool { return metav1.IsControlledBy(o, owner) }
}

// Apply aligns live with desired (apply.Engine.Apply).
func (o Owner) Apply(ctx context.Context, desired apply.Configuration, live client.Object) (apply.Outcome, error) {
	e := apply.Engine{Client: o.Client, FieldOwner: FieldOwner, HashAnnotation: databasev1alpha1.AnnotationSpecHash, Marks: o.Marks}
	return e.Apply(ctx, desired, live)
}

// Delete deletes the child key of obj's kind if it exists, is the
// owner's and is not being deleted already, read into obj. It says
// whether it asked for the deletion.
func (o Owner) Delete(ctx context.Context, obj client.Object, key client.ObjectKey) (bool, error) {
	if err := o.Client.Get(ctx, key, obj); err != nil {
		return false, ObjectError("get", obj, key.Name, client.IgnoreNotFound(err))
	}
	if !o.Owns(obj) || !obj.GetDeletionTimestamp().IsZero() {
		return false, nil
	}
	return true, DeleteExact(ctx, o.Client, obj)
}

// DeleteExact deletes obj only if it is still the object with obj's UID:
// an object made again under the same name in the meantime is never
// touched.
func DeleteExact(ctx context.Context, c client.Writer, obj client.Object) error {
	uid := obj.GetUID()
	err := c.Delete(ctx, obj, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone already, or a different object now has the name
	}
	return ObjectError("delete", obj, obj.GetName(), err)
}

// PodMonitorResult is what Owner.PodMonitor did.
type PodMonitorResult struct {
	// Live is the PodMonitor as applied or read.
	Live *unstructured.Unstructured
	// Outcome is the apply's, when a PodMonitor was asked for.
	Outcome apply.Outcome
	// Deleted: the owner's PodMonitor was deleted.
	Deleted bool
	// CRDMissing: the cluster has no PodMonitor CRD (the Prometheus
	// Operator's), so there is none to keep.
	CRDMissing bool
}

// PodMonitor keeps the owner's PodMonitor: desired applied, or, when
// desired is nil, the owner's PodMonitor key deleted. A cluster without
// the CRD is no error (CRDMissing). The PodMonitor is read from the API
// server, never the cache: an informer on a kind that may not exist
// would keep the operator from starting (the cache reads no
// unstructured objects).
func (o Owner) PodMonitor(ctx context.Context, key client.ObjectKey, desired *specs.PodMonitorConfiguration) (PodMonitorResult, error) {
	res := PodMonitorResult{Live: &unstructured.Unstructured{}}
	res.Live.SetGroupVersionKind(specs.PodMonitorGVK)
	var err error
	if desired != nil {
		res.Outcome, err = o.Apply(ctx, desired, res.Live)
	} else {
		res.Deleted, err = o.Delete(ctx, res.Live, key)
	}
	if meta.IsNoMatchError(err) {
		res.CRDMissing = true
		return res, nil
	}
	return res, err
}

// ObjectError names the object a failed request was about (nil when err
// is): a status message says which child, and classifies by the error
// it wraps.
func ObjectError(verb string, obj client.Object, name string, err error) error {
	if err == nil {
		return nil
	}
	return &apply.ObjectError{Verb: verb, Kind: apply.KindOf(obj), Name: name, Err: err}
}

// Package apply aligns objects with their desired state by server-side
// apply, writing nothing when the live object already agrees. It is the
// engine every reconciler of this operator writes its children through.
package apply

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// Engine applies desired objects under one field owner.
type Engine struct {
	// Client reads the live object (from the informer cache) and writes.
	Client client.Client
	// FieldOwner is the server-side apply field manager of every write.
	FieldOwner string
	// HashAnnotation is the annotation that carries the hash of the
	// desired state a child was last applied with.
	HashAnnotation string
	// Marks, when set, finds the cache's own copy of a child, on which a
	// check that found no drift is remembered until the child changes: a
	// later pass over the same version and the same desired state skips
	// the walk through its fields.
	Marks Marks
}

// Configuration is a client-go apply configuration of a namespaced
// object.
type Configuration interface {
	runtime.ApplyConfiguration
	GetName() *string
	GetNamespace() *string
}

// Apply aligns one object with its desired apply configuration, with
// server-side apply under our field owner. It writes nothing when the live
// object (from the cache) already agrees:
//   - its spec-hash annotation equals the hash of the desired configuration,
//     which catches every change of ours, removals included; and
//   - every field we set has our value in the live object, which catches
//     drift by anyone else (a hand edit of replicas, say). A version of
//     the live object found so is marked in the cache (Marks), and is not
//     walked again for the same desired state: any edit makes a new
//     version.
//
// live must be an empty object of the child's kind (an Unstructured with
// its kind set for kinds outside the scheme); it is filled with the live
// object, or with the server's answer after a write.
func (e *Engine) Apply(ctx context.Context, desired Configuration, live client.Object) (Outcome, error) {
	raw, err := json.Marshal(desired)
	if err != nil {
		return Unchanged, fmt.Errorf("encoding desired %T: %w", desired, err)
	}
	sum := sha256.Sum256(raw)
	hash := hex.EncodeToString(sum[:])[:16]

	key := client.ObjectKey{Namespace: ptr.Deref(desired.GetNamespace(), ""), Name: ptr.Deref(desired.GetName(), "")}
	outcome := Updated
	switch err := e.Client.Get(ctx, key, live); {
	case apierrors.IsNotFound(err):
		outcome = Created
	case err != nil:
		return Unchanged, &ObjectError{Verb: "get", Kind: KindOf(live), Name: key.Name, Err: err}
	case ownedByAnother(desired, live):
		return Unchanged, &OwnedElsewhereError{Kind: KindOf(live), Name: key.Name, Owner: metav1.GetControllerOf(live).UID}
	case e.agrees(ctx, desired, live, key, hash, binary.BigEndian.Uint64(sum[:8])):
		return Unchanged, nil
	}

	body, err := withAnnotation(raw, e.HashAnnotation, hash)
	if err != nil {
		return Unchanged, fmt.Errorf("encoding desired %T: %w", desired, err)
	}
	// A raw apply patch into the typed object: the client decodes the
	// server's answer straight into live (protobuf for built-in kinds), with
	// no detour through a map and the unstructured converter.
	live.SetNamespace(key.Namespace)
	live.SetName(key.Name)
	if err := e.Client.Patch(ctx, live, client.RawPatch(types.ApplyPatchType, body),
		client.FieldOwner(e.FieldOwner), client.ForceOwnership); err != nil {
		return Unchanged, &ObjectError{Verb: "apply", Kind: KindOf(live), Name: key.Name, Err: err}
	}
	logf.FromContext(ctx).V(1).Info("Applied", "kind", KindOf(live), "name", key.Name)
	return outcome, nil
}

// agrees says whether live, as read, already is what desired asks for: it
// carries desired's hash, and no field the operator sets has changed
// since (the drift walk, skipped for a version found agreeing with
// desiredHash before; Marks).
func (e *Engine) agrees(ctx context.Context, desired Configuration, live client.Object, key client.ObjectKey, hash string, desiredHash uint64) bool {
	if live.GetAnnotations()[e.HashAnnotation] != hash {
		logf.FromContext(ctx).V(1).Info("Spec changed", "kind", KindOf(live), "name", key.Name)
		return false
	}
	var mark Agreement
	if e.Marks != nil {
		mark = e.Marks.Of(live)
	}
	if mark != nil && mark.Agrees(desiredHash) {
		return true
	}
	if field := disagreement(desired, live); field != "" {
		logf.FromContext(ctx).V(1).Info("Drift", "kind", KindOf(live), "name", key.Name, "field", field)
		return false
	}
	if mark != nil {
		mark.MarkAgreed(desiredHash)
	}
	return true
}

// withAnnotation returns the JSON object raw with one more annotation. It
// decodes only the top level and the metadata, not the whole object.
func withAnnotation(raw []byte, key, value string) ([]byte, error) {
	var object, metadata map[string]json.RawMessage
	if err := json.Unmarshal(raw, &object); err != nil {
		return nil, err
	}
	if m, ok := object["metadata"]; ok {
		if err := json.Unmarshal(m, &metadata); err != nil {
			return nil, err
		}
	}
	if metadata == nil {
		metadata = map[string]json.RawMessage{}
	}
	annotations := map[string]string{}
	if a, ok := metadata["annotations"]; ok {
		if err := json.Unmarshal(a, &annotations); err != nil {
			return nil, err
		}
	}
	annotations[key] = value
	var err error
	if metadata["annotations"], err = json.Marshal(annotations); err != nil {
		return nil, err
	}
	if object["metadata"], err = json.Marshal(metadata); err != nil {
		return nil, err
	}
	return json.Marshal(object)
}

// ownedByAnother reports whether live is controlled by another owner than
// the desired object names: typically the previous MyDatabase of the same
// name, whose children the garbage collector has not removed yet. Applying
// over it would fight the collector (and hit immutable fields such as the
// StatefulSet's volumeClaimTemplates), so it is left alone.
func ownedByAnother(desired any, live client.Object) bool {
	ref := metav1.GetControllerOf(live)
	if ref == nil {
		return false
	}
	uid, ok := controllerUID(desired)
	return ok && uid != string(ref.UID)
}

// OwnedElsewhereError says a child of ours still belongs to another owner.
type OwnedElsewhereError struct {
	Kind, Name string
	Owner      types.UID
}

func (e *OwnedElsewhereError) Error() string {
	return fmt.Sprintf("%s %q still belongs to a deleted MyDatabase of the same name (uid %s); waiting for the garbage collector to remove it",
		e.Kind, e.Name, e.Owner)
}

// Outcome is what Apply did.
type Outcome int

const (
	Unchanged Outcome = iota
	Created
	Updated
)

// ObjectError is a request about one object that the API server refused
// or could not answer. It names the object, so that a status message can
// say which child failed, and wraps the server's own error.
type ObjectError struct {
	Verb, Kind, Name string
	Err              error
}

func (e *ObjectError) Error() string {
	return fmt.Sprintf("%s %s %s: %v", e.Verb, e.Kind, e.Name, e.Err)
}

func (e *ObjectError) Unwrap() error { return e.Err }

// KindOf names the kind of a typed object for messages and events.
func KindOf(obj client.Object) string {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u.GetKind()
	}
	return reflect.TypeOf(obj).Elem().Name()
}

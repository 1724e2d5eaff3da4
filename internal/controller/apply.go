package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// applyConfiguration is a client-go apply configuration of a namespaced
// object.
type applyConfiguration interface {
	runtime.ApplyConfiguration
	GetName() *string
	GetNamespace() *string
}

// apply aligns one child with its desired apply configuration, with
// server-side apply under our field owner. It writes nothing when the live
// object (from the cache) already agrees:
//   - its spec-hash annotation equals the hash of the desired configuration,
//     which catches every change of ours, removals included; and
//   - every field we set has our value in the live object, which catches
//     drift by anyone else (a hand edit of replicas, say).
//
// live must be an empty object of the child's kind; it is filled with the
// live object, or left as returned by the server after a write.
func (r *MyDatabaseReconciler) apply(ctx context.Context, desired applyConfiguration, live client.Object) (applied, error) {
	raw, err := json.Marshal(desired)
	if err != nil {
		return unchanged, fmt.Errorf("encoding desired %T: %w", desired, err)
	}
	sum := sha256.Sum256(raw)
	hash := hex.EncodeToString(sum[:])[:16]

	key := client.ObjectKey{Namespace: ptr.Deref(desired.GetNamespace(), ""), Name: ptr.Deref(desired.GetName(), "")}
	outcome := updated
	switch err := r.Get(ctx, key, live); {
	case apierrors.IsNotFound(err):
		outcome = created
	case err != nil:
		return unchanged, err
	case ownedByAnother(raw, live):
		return unchanged, &ownedElsewhereError{kind: kindOf(live), name: key.Name, owner: metav1.GetControllerOf(live).UID}
	case live.GetAnnotations()[specs.AnnotationSpecHash] != hash:
		log(ctx).V(1).Info("Spec changed", "kind", kindOf(live), "name", key.Name)
	default:
		field := disagreement(raw, live)
		if field == "" {
			return unchanged, nil
		}
		log(ctx).V(1).Info("Drift", "kind", kindOf(live), "name", key.Name, "field", field)
	}

	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(raw, &u.Object); err != nil {
		return unchanged, err
	}
	annotations := u.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[specs.AnnotationSpecHash] = hash
	u.SetAnnotations(annotations)
	if err := r.Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
		client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return unchanged, fmt.Errorf("applying %s %s: %w", u.GetKind(), key.Name, err)
	}
	log(ctx).V(1).Info("Applied", "kind", u.GetKind(), "name", key.Name)
	return outcome, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, live)
}

// ownedByAnother reports whether live is controlled by another owner than
// the desired object names: typically the previous MyDatabase of the same
// name, whose children the garbage collector has not removed yet. Applying
// over it would fight the collector (and hit immutable fields such as the
// StatefulSet's volumeClaimTemplates), so it is left alone.
func ownedByAnother(desiredJSON []byte, live client.Object) bool {
	ref := metav1.GetControllerOf(live)
	if ref == nil {
		return false
	}
	var desired metav1.PartialObjectMetadata
	if err := json.Unmarshal(desiredJSON, &desired); err != nil {
		return false
	}
	want := metav1.GetControllerOfNoCopy(&desired)
	return want != nil && want.UID != ref.UID
}

// ownedElsewhereError says a child of ours still belongs to another owner.
type ownedElsewhereError struct {
	kind, name string
	owner      types.UID
}

func (e *ownedElsewhereError) Error() string {
	return fmt.Sprintf("%s %q still belongs to a deleted MyDatabase of the same name (uid %s); waiting for the garbage collector to remove it",
		e.kind, e.name, e.owner)
}

// applied is what apply did.
type applied int

const (
	unchanged applied = iota
	created
	updated
)

// disagreement returns the path of the first field set in the desired JSON
// whose value differs in live, or "" when live agrees with every field we
// set. Fields the server or others added are ignored; a desired list must be
// a prefix of the live one, element by element.
func disagreement(desiredJSON []byte, live client.Object) string {
	var want, got any
	if err := json.Unmarshal(desiredJSON, &want); err != nil {
		return "(desired: " + err.Error() + ")"
	}
	liveJSON, err := json.Marshal(live)
	if err != nil {
		return "(live: " + err.Error() + ")"
	}
	if err := json.Unmarshal(liveJSON, &got); err != nil {
		return "(live: " + err.Error() + ")"
	}
	w := want.(map[string]any)
	delete(w, "apiVersion") // objects from the cache carry no type meta
	delete(w, "kind")
	return subset(w, got, "")
}

func subset(want, got any, path string) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return path
		}
		for k, v := range w {
			if bad := subset(v, g[k], path+"."+k); bad != "" {
				return bad
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) < len(w) {
			return path
		}
		for i := range w {
			if bad := subset(w[i], g[i], fmt.Sprintf("%s[%d]", path, i)); bad != "" {
				return bad
			}
		}
	default:
		if want != got {
			return path
		}
	}
	return ""
}

// deleteOwned deletes the named child if it exists and belongs to this
// MyDatabase (by owner UID label), with a UID precondition so that an object
// re-created under the same name in the meantime is never touched.
func (r *MyDatabaseReconciler) deleteOwned(ctx context.Context, db *databasev1alpha1.MyDatabase, obj client.Object, name string) (bool, error) {
	if err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, obj); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if obj.GetLabels()[specs.LabelOwnerUID] != string(db.UID) || !obj.GetDeletionTimestamp().IsZero() {
		return false, nil
	}
	return true, r.deleteExact(ctx, obj)
}

// deleteExact deletes obj only if it is still the object with obj's UID.
func (r *MyDatabaseReconciler) deleteExact(ctx context.Context, obj client.Object) error {
	uid := obj.GetUID()
	err := r.Delete(ctx, obj, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone already, or a different object now has the name
	}
	return err
}

package mydatabase

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/apply"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/controller/children"
	"example.com/myoperator/internal/metrics"
	"example.com/myoperator/internal/pki"
	"example.com/myoperator/internal/specs"
)

// kit is what every component works with: the clients, the apply engine,
// events and the clock. One per reconciler.
type kit struct {
	// Client reads from the informer cache, which holds only objects
	// labelled app.kubernetes.io/managed-by=myoperator (see cmd/main.go).
	client.Client
	// APIReader reads around the cache: user-supplied Secrets carry none of
	// our labels, and "does the data still exist" must never be answered
	// from a stale cache.
	APIReader   client.Reader
	Recorder    events.EventRecorder
	NewPassword func() (string, error)
	Clock       clock.PassiveClock
	Metrics     *metrics.Metrics
	Platform    specs.Platform
	// Managers replaces running instance managers by the operator's own
	// (managers.go); nil: they are not replaced in place.
	Managers     ManagerReplacer
	replacements *replacements
	// StallRetry is how often a Stalled MyDatabase is looked at again.
	StallRetry time.Duration
	// SecretSync is Reconciler.SecretSync.
	SecretSync time.Duration
	// certs remembers the certificates found good, by content: a pass
	// over an unchanged Secret does not verify it again.
	certs *pki.Checker
	// marks finds the cached copies of the children the apply engine can
	// mark as found agreeing; nil on a plain client.
	marks apply.Marks
	// indexed is set once the cache's pods, claims and Secrets are
	// indexed byDatabase; a reconciler on a plain client has no index.
	indexed bool
	// poolers: the MyDatabasePooler CRD is installed (Reconciler.Poolers).
	poolers bool
}

// listOwn lists the pods, volume claims or Secrets of db that carry every
// label of selector; from the cache, through the byDatabase index: a pass
// costs what its MyDatabase has, not what its namespace holds. A label
// selector alone made the cache test every object of the namespace (and
// decode every cached Secret, which the cache keeps encoded), so that with
// many MyDatabases in one namespace every pass got slower the more there
// were: `make bench`'s 1,000 passes after a restart took 9.7 s instead of
// 1.3 s once the role Secrets were listed by label (docs/benchmarks.md).
func (k *kit) listOwn(ctx context.Context, list client.ObjectList, db *databasev1alpha1.MyDatabase, selector map[string]string) error {
	opts := []client.ListOption{client.InNamespace(db.Namespace), client.MatchingLabels(selector)}
	if k.indexed {
		opts = append(opts, client.MatchingFields{byDatabase: db.Name})
	}
	return k.List(ctx, list, opts...)
}

// serverPods lists db's server pods: those its instance labels select
// whose name is one of its StatefulSet's. Labels alone would count a pod
// of another MyDatabase whose instance manager relabelled it, which RBAC
// allows on its own pods (contract.PodOrdinal).
func (k *kit) serverPods(ctx context.Context, db *databasev1alpha1.MyDatabase) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := k.listOwn(ctx, pods, db, specs.InstanceSelector(db)); err != nil {
		return nil, objectError("list", &corev1.Pod{}, "", err)
	}
	return slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool {
		_, ok := contract.PodOrdinal(specs.StatefulSetName(db), p.Name)
		return !ok
	}), nil
}

// roleSecrets lists the generated role Secrets of db's name in the
// cache: those of the roles declared now, and of roles declared once.
func (k *kit) roleSecrets(ctx context.Context, db *databasev1alpha1.MyDatabase) ([]corev1.Secret, error) {
	secrets := &corev1.SecretList{}
	if err := k.listOwn(ctx, secrets, db, map[string]string{databasev1alpha1.LabelInstance: db.Name,
		databasev1alpha1.LabelComponent: specs.ComponentRole, databasev1alpha1.LabelManagedBy: databasev1alpha1.ManagedBy}); err != nil {
		return nil, objectError("list", &corev1.Secret{}, "", err)
	}
	return secrets.Items, nil
}

// byDatabase indexes the cached pods, volume claims and Secrets by the
// MyDatabase they belong to (their instance label).
const byDatabase = "mydatabase"

// children is how the components write and delete db's children
// (internal/controller/children, shared with the pooler's controller).
func (r *kit) children(db *databasev1alpha1.MyDatabase) children.Owner {
	return children.Owner{Client: r.Client, Marks: r.marks, Owns: children.OwnerUIDLabel(db.UID)}
}

// applyChild applies desired into live; a child another MyDatabase of
// the same name still owns is a wait, and one it created is recorded.
func (r *kit) applyChild(ctx context.Context, obs *observation,
	desired apply.Configuration, live client.Object) error {
	outcome, err := children.Owner{Client: r.Client, Marks: r.marks}.Apply(ctx, desired, live)
	return applied(obs, live, outcome, err)
}

// applied records what applying live came to (applyChild).
func applied(obs *observation, live client.Object, outcome apply.Outcome, err error) error {
	if owned := (*apply.OwnedElsewhereError)(nil); errors.As(err, &owned) {
		obs.waiting = &blocker{Reason: databasev1alpha1.ReasonWaitingForOldInstance, Message: owned.Error()}
		return nil
	}
	if outcome == apply.Created {
		obs.created = append(obs.created, apply.KindOf(live)+" "+live.GetName())
	}
	return err
}

// deleteChild deletes db's child name of obj's kind, if it is db's
// (children.Owner.Delete), with an event.
func (r *kit) deleteChild(ctx context.Context, db *databasev1alpha1.MyDatabase, obj client.Object, name string) error {
	deleted, err := r.children(db).Delete(ctx, obj, client.ObjectKey{Namespace: db.Namespace, Name: name})
	if deleted {
		r.event(db, corev1.EventTypeNormal, "Deleted", "Deleted %s %s", apply.KindOf(obj), name)
	}
	return err
}

// deleteExact deletes obj only if it is still the object with obj's UID
// (children.DeleteExact).
func (r *kit) deleteExact(ctx context.Context, obj client.Object) error {
	return children.DeleteExact(ctx, r.Client, obj)
}

// explainExistingSecret handles a Create refused because the Secret exists
// although the cache (which holds only our labelled Secrets) did not show
// it: either the cache lags behind our own earlier create (retry), or it is
// someone else's Secret, which is reported and never overwritten.
func (r *kit) explainExistingSecret(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation, name string) error {
	existing := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, existing); err != nil {
		return objectError("get", existing, name, err)
	}
	return explainSecret(db, obs, existing)
}

// explainSecret tells, of a Secret read from the API server that the
// cache does not show, our own create the cache lags behind (a conflict,
// retried quietly: the watch brings it) from someone else's Secret
// (Stalled).
func explainSecret(db *databasev1alpha1.MyDatabase, obs *observation, existing *corev1.Secret) error {
	if existing.Labels[databasev1alpha1.LabelManagedBy] == databasev1alpha1.ManagedBy {
		return apierrors.NewConflict(corev1.Resource("secrets"), existing.Name,
			errors.New("it exists but is not in the cache yet"))
	}
	remedy := "rename or delete it"
	switch existing.Name {
	case specs.GeneratedCredentialsSecretName(db):
		remedy += ", or name it in spec.credentials.secretName"
	case specs.CASecretName(db):
		remedy += ", or name a certificate of yours in spec.tls.serverCertSecret (the operator then issues none)"
	}
	obs.stalled = &blocker{Reason: databasev1alpha1.ReasonSecretConflict, Message: fmt.Sprintf(
		"Secret %q exists but was not created by this operator (it lacks the label %s=%s): %s",
		existing.Name, databasev1alpha1.LabelManagedBy, databasev1alpha1.ManagedBy, remedy)}
	return nil
}

// alignMetadata sets our labels and exactly the owner references we want on
// a child we create once and never re-apply (Secrets, PVCs), keeping every
// label and owner reference of others. It adopts what a deleted MyDatabase of
// the same name retained, and follows changes of the deletion policy.
func (r *kit) alignMetadata(ctx context.Context, obj client.Object, labels, annotations map[string]string,
	owners []metav1.OwnerReference, db *databasev1alpha1.MyDatabase) error {
	wantLabels := withEntries(obj.GetLabels(), labels)
	wantAnnotations := withEntries(obj.GetAnnotations(), annotations)
	var wantOwners []metav1.OwnerReference
	for _, ref := range obj.GetOwnerReferences() {
		if ref.Kind != "MyDatabase" || ref.APIVersion != databasev1alpha1.GroupVersion.String() {
			wantOwners = append(wantOwners, ref)
		}
	}
	wantOwners = append(wantOwners, owners...)
	if maps.Equal(wantLabels, obj.GetLabels()) && maps.Equal(wantAnnotations, obj.GetAnnotations()) &&
		slices.EqualFunc(wantOwners, obj.GetOwnerReferences(), sameOwner) {
		return nil
	}
	before := obj.DeepCopyObject().(client.Object)
	adopted := obj.GetLabels()[databasev1alpha1.LabelOwnerUID] != string(db.UID)
	obj.SetLabels(wantLabels)
	obj.SetAnnotations(wantAnnotations)
	obj.SetOwnerReferences(wantOwners)
	if err := r.Patch(ctx, obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return objectError("patch", obj, obj.GetName(), err)
	}
	if adopted {
		r.event(db, corev1.EventTypeNormal, "Adopted", "Adopted %s %s left by a previous MyDatabase of the same name",
			apply.KindOf(obj), obj.GetName())
	}
	return nil
}

// withEntries returns a copy of m with the entries of add set.
func withEntries(m, add map[string]string) map[string]string {
	out := maps.Clone(m)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, add)
	return out
}

func sameOwner(a, b metav1.OwnerReference) bool {
	return a.UID == b.UID && a.Kind == b.Kind && a.APIVersion == b.APIVersion && a.Name == b.Name &&
		ptrEqual(a.Controller, b.Controller) && ptrEqual(a.BlockOwnerDeletion, b.BlockOwnerDeletion)
}

func ptrEqual(a, b *bool) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// event records an event on the MyDatabase. Messages never carry a secret
// value: only names of objects and of keys.
func (r *kit) event(db *databasev1alpha1.MyDatabase, eventType, reason, format string, args ...any) {
	r.Recorder.Eventf(db, nil, eventType, reason, "Reconcile", format, args...)
}

// recordCreated emits one event for every child a pass created: a new
// MyDatabase gets one "Created" event naming all of them, rather than one
// per child, which the event API would fold into a series and lose.
func (r *kit) recordCreated(db *databasev1alpha1.MyDatabase, obs *observation) {
	if len(obs.created) > 0 {
		r.event(db, corev1.EventTypeNormal, "Created", "Created %s", strings.Join(obs.created, ", "))
	}
}

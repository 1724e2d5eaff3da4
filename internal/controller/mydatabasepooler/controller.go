// Package mydatabasepooler reconciles MyDatabasePooler objects: a
// Deployment of PgBouncer pods in front of a MyDatabase, its Service, its
// configuration and certificates (internal/specs, pooler.go). The pods run
// the pooler manager (internal/pooler), which reloads PgBouncer when the
// configuration or the certificates change.
//
// A pooler holds no data: its children carry its owner reference and go
// with it, and it needs no finalizer. Deleting its MyDatabase leaves it
// Stalled (DatabaseNotFound) with its pods still up, failing every login,
// until the database is back or the pooler is deleted.
package mydatabasepooler

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/conditions"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/controller/children"
	"example.com/myoperator/internal/pki"
	"example.com/myoperator/internal/specs"
)

// FieldOwner is the server-side apply field manager of the pooler's
// children (the MyDatabase's own: one operator).
const FieldOwner = children.FieldOwner

// DatabaseField indexes poolers by spec.database.
const DatabaseField = "spec.database"

// Reconciler reconciles MyDatabasePooler objects.
type Reconciler struct {
	client.Client
	// APIReader reads a user's server certificate Secret, which carries
	// none of the labels the cache holds.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	Platform  specs.Platform
	// StallRetry is how often a Stalled pooler is looked at again
	// (besides the watches): a minute when zero.
	StallRetry time.Duration
}

// +kubebuilder:rbac:groups=database.example.com,resources=mydatabasepoolers,verbs=get;list;watch
// +kubebuilder:rbac:groups=database.example.com,resources=mydatabasepoolers/status,verbs=get;patch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=core,resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=podmonitors,verbs=get;create;patch;delete

// Reconcile aligns the pooler's children with its spec, then writes what
// it found into the status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := &databasev1alpha1.MyDatabasePooler{}
	if err := r.Get(ctx, req.NamespacedName, p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !p.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // the garbage collector takes the children
	}
	var alignErr error
	var dep *appsv1.Deployment
	var db *databasev1alpha1.MyDatabase
	if !p.Spec.Paused {
		dep, db, alignErr = r.align(ctx, p)
	} else {
		dep = r.deployment(ctx, p)
	}
	if err := r.writeStatus(ctx, p, dep, db, alignErr); err != nil {
		return ctrl.Result{}, err
	}
	var stalled *conditions.Cause
	switch {
	case errors.As(alignErr, &stalled):
		return ctrl.Result{RequeueAfter: r.stallRetry()}, nil
	case alignErr != nil:
		return ctrl.Result{}, alignErr
	}
	// Looked at again hourly besides the watches: the certificates are
	// renewed on time, and follow a MyDatabase's rotated server CA.
	return ctrl.Result{RequeueAfter: time.Hour}, nil
}

func (r *Reconciler) stallRetry() time.Duration {
	if r.StallRetry > 0 {
		return r.StallRetry
	}
	return time.Minute
}

// align writes the children: the certificates first (the pods mount
// them), then the configuration, the Service, the Deployment and its
// disruption budget. It returns the Deployment and the MyDatabase, if
// found.
func (r *Reconciler) align(ctx context.Context, p *databasev1alpha1.MyDatabasePooler) (*appsv1.Deployment, *databasev1alpha1.MyDatabase, error) {
	db := &databasev1alpha1.MyDatabase{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: p.Spec.Database}, db); err != nil {
		if apierrors.IsNotFound(err) {
			return r.deployment(ctx, p), nil, &conditions.Cause{Reason: databasev1alpha1.ReasonDatabaseNotFound, Message: fmt.Sprintf(
				"no MyDatabase %q in namespace %s: create it, or delete this pooler and create one for an existing database (spec.database cannot change)",
				p.Spec.Database, p.Namespace)}
		}
		return nil, nil, err
	}
	dep, err := r.alignTo(ctx, p, db)
	return dep, db, err
}

// alignTo writes the children of p in front of db.
func (r *Reconciler) alignTo(ctx context.Context, p *databasev1alpha1.MyDatabasePooler, db *databasev1alpha1.MyDatabase) (*appsv1.Deployment, error) {
	if err := r.certificates(ctx, p, db); err != nil {
		return r.deployment(ctx, p), err
	}
	own := r.children(p)
	if _, err := own.Apply(ctx, specs.PoolerConfigMap(p, db), &corev1.ConfigMap{}); err != nil {
		return nil, err
	}
	if err := r.nudgePods(ctx, p, specs.PoolerConfigHash(p, db)); err != nil {
		return nil, err
	}
	if _, err := own.Apply(ctx, specs.PoolerService(p), &corev1.Service{}); err != nil {
		return nil, err
	}
	dep := &appsv1.Deployment{}
	if _, err := own.Apply(ctx, specs.PoolerDeployment(p, r.Platform), dep); err != nil {
		return nil, err
	}
	if specs.PoolerInstances(p) > 1 {
		if _, err := own.Apply(ctx, specs.PoolerDisruptionBudget(p), &policyv1.PodDisruptionBudget{}); err != nil {
			return dep, err
		}
	} else if _, err := own.Delete(ctx, &policyv1.PodDisruptionBudget{}, client.ObjectKeyFromObject(p)); err != nil {
		return dep, err
	}
	// The PodMonitor of the pooler's pods, while its MyDatabase has
	// spec.monitoring.podMonitor. Without the Prometheus Operator's CRD
	// there is none to keep (the MyDatabase's MonitoringReady condition
	// says so); the metrics are served on port metrics either way.
	var monitor *specs.PodMonitorConfiguration
	if db.Spec.Monitoring.PodMonitor {
		monitor = specs.PoolerPodMonitor(p)
	}
	_, err := own.PodMonitor(ctx, client.ObjectKeyFromObject(p), monitor)
	return dep, err
}

// children is how the pooler's children are written and deleted
// (internal/controller/children, shared with the MyDatabase's
// controller): those it controls are its own.
func (r *Reconciler) children(p *databasev1alpha1.MyDatabasePooler) children.Owner {
	return children.Owner{Client: r.Client, Owns: children.ControlledBy(p)}
}

// nudgePods puts the hash of the configuration on each of the pooler's
// running pods that lacks it (AnnotationPoolerConfig): the kubelet then
// refreshes the ConfigMap's volume at once, and the pooler manager reloads
// PgBouncer or pauses it within seconds of a change, not a minute.
func (r *Reconciler) nudgePods(ctx context.Context, p *databasev1alpha1.MyDatabasePooler, hash string) error {
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(p.Namespace), client.MatchingLabels(specs.PoolerSelectorLabels(p))); err != nil {
		return err
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.Annotations[databasev1alpha1.AnnotationPoolerConfig] == hash || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, databasev1alpha1.AnnotationPoolerConfig, hash))
		if err := r.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("annotating the pooler's pod %s with its configuration: %w", pod.Name, err)
		}
	}
	return nil
}

// deployment is the live Deployment, for the status of a pass that did
// not apply it; nil when there is none.
func (r *Reconciler) deployment(ctx context.Context, p *databasev1alpha1.MyDatabasePooler) *appsv1.Deployment {
	dep := &appsv1.Deployment{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: p.Name}, dep); err != nil || !metav1.IsControlledBy(dep, p) {
		return nil
	}
	return dep
}

// certificates keeps the pooler's Secret: a server certificate for its
// Service's names and a client certificate for contract.PoolerRole, both
// issued by the MyDatabase's CA, the MyDatabase's trust bundle (ca.crt)
// and the CA that verifies the servers. They are issued again when they
// no longer verify against the CA that issues, cover other names, or
// have a third of their lifetime left; the pods reload them. During a
// rotation of the MyDatabase's CA the bundle carries two CAs and the
// first of them issues (specs.CAPhase): the Secret follows each phase,
// and the MyDatabase's rotation waits for it.
func (r *Reconciler) certificates(ctx context.Context, p *databasev1alpha1.MyDatabasePooler, db *databasev1alpha1.MyDatabase) error {
	// The CA and an issued server certificate carry the operator's labels
	// and are in the cache; a user's server certificate is read around it.
	caSecret := &corev1.Secret{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: specs.CASecretName(db)}, caSecret); err != nil {
		if apierrors.IsNotFound(err) {
			return &conditions.Cause{Reason: databasev1alpha1.ReasonDatabaseCANotFound, Message: fmt.Sprintf(
				"the MyDatabase %s has no CA Secret %s to issue the pooler's certificates from: it is made with the MyDatabase (README, TLS): the pooler waits for it",
				db.Name, specs.CASecretName(db))}
		}
		return err
	}
	ca, bundle := specs.IssuingCA(caSecret.Data), caSecret.Data[specs.CACertKey]
	serverSecret := &corev1.Secret{}
	reader := client.Reader(r.Client)
	if specs.UserSuppliedServerCert(db) {
		reader = r.APIReader
	}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: specs.ServerCertSecretName(db)}, serverSecret); err != nil {
		if apierrors.IsNotFound(err) {
			return &conditions.Cause{Reason: databasev1alpha1.ReasonDatabaseCANotFound, Message: fmt.Sprintf(
				"the MyDatabase %s has no server certificate Secret %s yet: the pooler verifies the servers with its ca.crt", db.Name, specs.ServerCertSecretName(db))}
		}
		return err
	}
	serverCA := serverSecret.Data[specs.CACertKey]

	now := r.Clock.Now()
	live := &corev1.Secret{}
	err := r.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: specs.PoolerSecretName(p)}, live)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	exists := err == nil
	if exists && !metav1.IsControlledBy(live, p) {
		return &conditions.Cause{Reason: databasev1alpha1.ReasonSecretConflict, Message: fmt.Sprintf(
			"the Secret %s exists and is not this pooler's: rename or delete it", specs.PoolerSecretName(p))}
	}
	d, names := live.Data, specs.PoolerDNSNames(p)
	if exists && children.Renewal(pki.CheckServer(d[specs.TLSCertKey], d[specs.TLSKeyKey], ca.Cert, names, now), names) == "" &&
		children.Renewal(pki.CheckClient(d[contract.PoolerClientCertKey], d[contract.PoolerClientKeyKey], ca.Cert, contract.PoolerRole, now), nil) == "" {
		// The certificates stay; only the CAs to trust may have changed.
		_, err := children.Trust(ctx, r.Client, live, map[string][]byte{specs.CACertKey: bundle, contract.PoolerServerCAKey: serverCA},
			client.FieldOwner(FieldOwner))
		return err
	}
	server, err := pki.NewServer(ca, p.Name, specs.PoolerDNSNames(p), now)
	if err != nil {
		return fmt.Errorf("issuing the pooler's server certificate from %s: %w", specs.CASecretName(db), err)
	}
	cl, err := pki.NewClient(ca, contract.PoolerRole, now)
	if err != nil {
		return fmt.Errorf("issuing the pooler's client certificate from %s: %w", specs.CASecretName(db), err)
	}
	want := specs.PoolerSecret(p, server, cl, bundle, serverCA)
	if !exists {
		return r.Create(ctx, want, client.FieldOwner(FieldOwner))
	}
	patch := client.MergeFrom(live.DeepCopy())
	live.Data = want.Data
	if err := r.Patch(ctx, live, patch, client.FieldOwner(FieldOwner)); err != nil {
		return err
	}
	r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, "CertificatesIssued", "Issue", "issued the pooler's certificates into %s", live.Name)
	return nil
}

// writeStatus sets the status from the Deployment, the MyDatabase's last
// switchover and the pass's outcome, and writes it if it changed.
func (r *Reconciler) writeStatus(ctx context.Context, p *databasev1alpha1.MyDatabasePooler, dep *appsv1.Deployment,
	db *databasev1alpha1.MyDatabase, alignErr error) error {
	orig := p.DeepCopy()
	st := &p.Status
	switched := followSwitchover(p, db)
	computeStatus(p, dep, lookupPending(db), alignErr, r.Clock.Now())
	// conditions.Set keeps a condition's transition time while its status
	// holds: an unchanged pass compares equal.
	if equality.Semantic.DeepEqual(orig.Status, p.Status) {
		return nil
	}
	patch := client.MergeFrom(orig)
	if switched != nil {
		// Reported once: a pass on a stale pooler conflicts instead of
		// reporting the switchover again.
		patch = client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})
	}
	if err := r.Status().Patch(ctx, p, patch); err != nil {
		return err
	}
	if switched != nil {
		r.Recorder.Eventf(p, db, switched.eventType, switched.reason, "Switchover", "%s", st.LastSwitchover.Message)
	}
	return nil
}

// SetupWithManager watches poolers, their children (through their
// controller reference) and MyDatabases (through the index of
// spec.database: a pooler waiting for its database starts when it
// appears, follows a change of its TLS or port, is Ready once its
// primary can log clients in, and reports the end of its switchovers),
// and its MyDatabase's certificate Secrets (a pooler's Secret follows each
// phase of a CA rotation).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &databasev1alpha1.MyDatabasePooler{}, DatabaseField,
		func(o client.Object) []string { return []string{o.(*databasev1alpha1.MyDatabasePooler).Spec.Database} }); err != nil {
		return err
	}
	ofController := func(_ context.Context, o client.Object) []reconcile.Request {
		ref := metav1.GetControllerOf(o)
		if ref == nil || ref.Kind != "MyDatabasePooler" || ref.APIVersion != databasev1alpha1.GroupVersion.String() {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}}}
	}
	byController := handler.EnqueueRequestsFromMapFunc(ofController)
	ofDatabase := func(ctx context.Context, o client.Object) []reconcile.Request {
		poolers := &databasev1alpha1.MyDatabasePoolerList{}
		if err := r.List(ctx, poolers, client.InNamespace(o.GetNamespace()), client.MatchingFields{DatabaseField: o.GetName()}); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(poolers.Items))
		for _, p := range poolers.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&p)})
		}
		return reqs
	}
	byDatabase := handler.EnqueueRequestsFromMapFunc(ofDatabase)
	// A pooler's Secret follows its MyDatabase's certificate Secrets (the
	// CA, rotated in phases, and the servers' ca.crt), which carry the
	// MyDatabase's name in their labels.
	secrets := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		if l := o.GetLabels(); l[databasev1alpha1.LabelComponent] == specs.ComponentTLS && l[databasev1alpha1.LabelInstance] != "" {
			return ofDatabase(ctx, &databasev1alpha1.MyDatabase{ObjectMeta: metav1.ObjectMeta{Namespace: o.GetNamespace(), Name: l[databasev1alpha1.LabelInstance]}})
		}
		return ofController(ctx, o)
	})
	b := ctrl.NewControllerManagedBy(mgr).For(&databasev1alpha1.MyDatabasePooler{}).Watches(&corev1.Secret{}, secrets)
	for _, obj := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}, &corev1.ConfigMap{}, &policyv1.PodDisruptionBudget{}} {
		b = b.Watches(obj, byController)
	}
	return b.Watches(&databasev1alpha1.MyDatabase{}, byDatabase, builder.WithPredicates(predicate.Or[client.Object](
		predicate.GenerationChangedPredicate{}, switchoverFinished, lookupChanged))).
		Named("mydatabasepooler").
		Complete(r)
}

// lookupChanged passes a MyDatabase update that changes whether its
// servers can log a pooler's clients in (lookupPending).
var lookupChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	return lookupPending(e.ObjectOld.(*databasev1alpha1.MyDatabase)) != lookupPending(e.ObjectNew.(*databasev1alpha1.MyDatabase))
}}

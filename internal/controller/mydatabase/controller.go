package mydatabase

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/apply"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/controller/children"
	"example.com/myoperator/internal/leancache"
	"example.com/myoperator/internal/metrics"
	"example.com/myoperator/internal/pki"
	"example.com/myoperator/internal/specs"
)

// FieldOwner is the server-side apply field manager of every write.
const FieldOwner = children.FieldOwner

// Reconciler aligns the children of each MyDatabase with its spec
// and reports what it finds in status. Each feature is a component
// (component.go); the reconciler runs them, writes the status once, and
// runs the deletion.
type Reconciler struct {
	// Client reads from the informer cache, which holds only objects
	// labelled app.kubernetes.io/managed-by=myoperator (see cmd/main.go).
	client.Client
	// APIReader reads around the cache (kit.APIReader).
	APIReader client.Reader
	Recorder  events.EventRecorder
	// NewPassword generates passwords (crypto/rand in production).
	NewPassword func() (string, error)
	Clock       clock.PassiveClock
	Metrics     *metrics.Metrics
	// StallRetry is how often a Stalled MyDatabase is looked at again
	// (30 s when zero).
	StallRetry time.Duration
	// SecretSync is the longest the kubelet takes to bring a changed
	// Secret into a pod's volume (DefaultSecretSync in production): each
	// phase of a CA rotation lasts at least this long, for the pods whose
	// files no report confirms (the poolers'). Zero in tests.
	SecretSync time.Duration
	// Platform is what the pods take from the operator's configuration:
	// the instance manager's image.
	Platform specs.Platform
	// Managers replaces running instance managers by the operator's own,
	// without restarting their servers; nil: a new operator version rolls
	// the pods instead.
	Managers ManagerReplacer
	// Poolers: the MyDatabasePooler CRD is installed, and a pass looks for
	// the poolers that lead to its MyDatabase (contract.Declared.Pooler).
	// An operator upgraded before its CRDs runs without them.
	Poolers bool

	// written remembers the writes to MyDatabases the cache does not show
	// yet.
	written ownWrites
	// certs remembers the certificates found good, by content.
	certs pki.Checker
	// replacements remembers the in-place replacements of instance managers.
	replacements replacements
	// marks and indexed are what SetupWithManager found of the cache
	// (kit).
	marks   apply.Marks
	indexed bool
}

// DefaultSecretSync bounds the kubelet's update of a mounted Secret: its
// pod sync period (1 minute by default) plus its cache's delay, with
// margin.
const DefaultSecretSync = 2 * time.Minute

// kit is what the components of a pass work with.
func (r *Reconciler) kit() *kit {
	return &kit{Client: r.Client, APIReader: r.APIReader, Recorder: r.Recorder, NewPassword: r.NewPassword, Clock: r.Clock,
		Metrics: r.Metrics, Platform: r.Platform, Managers: r.Managers, replacements: &r.replacements, StallRetry: r.stallRetry(), SecretSync: r.SecretSync, certs: &r.certs, marks: r.marks, indexed: r.indexed,
		poolers: r.Poolers}
}

// +kubebuilder:rbac:groups=database.example.com,resources=mydatabases,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=database.example.com,resources=mydatabases/status,verbs=get;patch
// +kubebuilder:rbac:groups=database.example.com,resources=mydatabases/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=core,resources=services;configmaps,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=core,resources=secrets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=core,resources=persistentvolumeclaims,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups=core,resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile reads the MyDatabase, runs its deletion or aligns its children,
// and then, whatever happened, writes the status that pass observed: a
// failed step shows in status (Ready False, with the reason and the
// server's words), never only in the log.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	db := &databasev1alpha1.MyDatabase{}
	if err := r.Get(ctx, req.NamespacedName, db); err != nil {
		if apierrors.IsNotFound(err) {
			r.Metrics.Forget(req.NamespacedName)
			r.written.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// Every step reads the status as this process last wrote it, not as a
	// lagging cache may still show it: a switchover or a rotation in
	// progress is known only from there.
	cached := db.ResourceVersion
	db = r.written.baseline(req.NamespacedName, db)
	obs := &observation{}
	k := r.kit()
	var err error
	if db.DeletionTimestamp.IsZero() {
		err = r.reconcileSpec(ctx, k, db, cached, obs)
	} else {
		err = k.reconcileDelete(ctx, db, obs)
	}
	if apierrors.IsConflict(err) {
		return conflict(ctx, err)
	}
	if err != nil {
		log(ctx).V(1).Info("Pass failed", "error", err.Error())
		b, stalled := classify(db, err)
		if stalled {
			obs.stalled = b
		} else {
			obs.failure = b
		}
		r.Metrics.ReconcileError(b.Reason)
	}
	if obs.gone {
		return ctrl.Result{}, nil
	}
	if werr := r.writeStatus(ctx, db, cached, obs); werr != nil {
		if apierrors.IsConflict(werr) {
			return conflict(ctx, werr)
		}
		return ctrl.Result{}, werr
	}
	if obs.failure != nil {
		// Through the queue's rate limiter: backoff, and one log line per
		// retry at most.
		return ctrl.Result{}, err
	}
	return obs.result(k.StallRetry), nil
}

// conflict retries a pass that lost a race with another writer (or read a
// cache behind this process's own last write) through the queue's rate
// limiter, without an error in the log: the watch brings the newer object.
func conflict(ctx context.Context, err error) (ctrl.Result, error) {
	log(ctx).V(1).Info("Conflict, retrying", "error", err.Error())
	return ctrl.Result{Requeue: true}, nil //nolint:staticcheck // the rate-limited requeue without an error log
}

// reconcileSpec makes sure the MyDatabase has its finalizer, then runs its
// components. cached is the resourceVersion the cache showed.
func (r *Reconciler) reconcileSpec(ctx context.Context, k *kit, db *databasev1alpha1.MyDatabase, cached string, obs *observation) error {
	if err := r.ensureFinalizer(ctx, db, cached); err != nil {
		return err
	}
	return k.align(ctx, db, obs)
}

// ensureFinalizer adds the finalizer when the MyDatabase lacks it. db is
// the baseline: the cache's object, or the one this process last wrote
// while the cache lags behind it (the events of the children a pass creates
// wake the next pass before the finalizer reaches the cache), so a pass
// never adds it twice. The patch carries db's resourceVersion: if anyone
// wrote since (a deletion included), it conflicts and the pass is retried
// on the newer object.
func (r *Reconciler) ensureFinalizer(ctx context.Context, db *databasev1alpha1.MyDatabase, cached string) error {
	if controllerutil.ContainsFinalizer(db, databasev1alpha1.Finalizer) {
		return nil
	}
	base := db.DeepCopy()
	controllerutil.AddFinalizer(db, databasev1alpha1.Finalizer)
	if err := r.Patch(ctx, db, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return objectError("patch", db, db.Name, err)
	}
	r.rememberWrite(ctx, cached, base.ResourceVersion, db)
	return nil
}

// rememberWrite records db as this process wrote it over resourceVersion
// base, in a pass that read resourceVersion cached (ownWrites).
func (r *Reconciler) rememberWrite(ctx context.Context, cached, base string, db *databasev1alpha1.MyDatabase) {
	key := client.ObjectKeyFromObject(db)
	r.written.remember(key, cached, base, db)
	// The cache may have shown the write already, before it was
	// remembered: its event then found nothing to end (caughtUp).
	now := &databasev1alpha1.MyDatabase{}
	if err := r.Get(ctx, key, now, client.UnsafeDisableDeepCopy); err == nil {
		r.written.caughtUp(key, now.ResourceVersion)
	}
}

// writeStatus computes the status from what was observed and patches it
// when it differs from what the server holds: db's status, which
// Reconcile took from this process's last write while the cache (at
// resourceVersion cached) does not show it yet. Comparing with the cache
// alone would skip a needed write (the cache says Provisioning, the server
// the Ready we wrote a moment ago) and leave a lie in place; comparing
// with the last write alone would repeat it. The patch carries the
// resourceVersion it was computed against: if anyone wrote since, it
// conflicts and the pass is retried on the newer object.
func (r *Reconciler) writeStatus(ctx context.Context, db *databasev1alpha1.MyDatabase, cached string, obs *observation) error {
	key := types.NamespacedName{Namespace: db.Namespace, Name: db.Name}
	base := db.DeepCopy()
	computeStatus(db, obs, r.Clock.Now())
	r.Metrics.Set(key, db.Status.Phase)
	var lastBackup *time.Time
	if b := db.Status.Backup; b != nil && b.LastBackupTime != nil {
		lastBackup = &b.LastBackupTime.Time
	}
	r.Metrics.LastBackup(key, lastBackup)
	r.Metrics.Verification(key, db.Status.Backup)
	if equality.Semantic.DeepEqual(base.Status, db.Status) {
		return nil
	}
	if err := r.Status().Patch(ctx, db, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	r.rememberWrite(ctx, cached, base.ResourceVersion, db)
	r.kit().recordTransitions(ctx, base, db)
	return nil
}

// SetupWithManager watches MyDatabases and every kind of child. Children
// with a controller reference map back through it (requestForController);
// the retained Secrets, PVCs and the pods (owned by the StatefulSet) map
// back through the instance label; pods only when their role label is missing or changed,
// claims only while they are being expanded. Every MyDatabase update also
// tells ownWrites what the cache now shows (caughtUp), and the cache's
// marks are kept for the apply engine (apply.Marks).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, workers int) error {
	for _, obj := range []client.Object{&corev1.Pod{}, &corev1.PersistentVolumeClaim{}, &corev1.Secret{}} {
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), obj, byDatabase, func(o client.Object) []string {
			if name, ok := o.GetLabels()[databasev1alpha1.LabelInstance]; ok {
				return []string{name}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	r.indexed = true
	byInstance := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		name, ok := o.GetLabels()[databasev1alpha1.LabelInstance]
		if !ok {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
	})
	byController := handler.EnqueueRequestsFromMapFunc(requestForController)
	// Enqueues nothing: tells ownWrites what the cache shows.
	caughtUp := handler.Funcs{UpdateFunc: func(_ context.Context, e event.UpdateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		r.written.caughtUp(client.ObjectKeyFromObject(e.ObjectNew), e.ObjectNew.GetResourceVersion())
	}}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&databasev1alpha1.MyDatabase{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&databasev1alpha1.MyDatabase{}, caughtUp)
	for _, obj := range []client.Object{&appsv1.StatefulSet{}, &batchv1.Job{}, &corev1.Service{}, &corev1.ConfigMap{},
		&policyv1.PodDisruptionBudget{}, &networkingv1.NetworkPolicy{}, &corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}} {
		b = b.Watches(obj, byController)
	}
	marks, err := leancache.NewMarks(context.Background(), mgr.GetCache())
	if err != nil {
		return err
	}
	r.marks = marks
	if r.Poolers {
		// A pooler that comes or goes changes what the primary keeps
		// (contract.Declared.Pooler); its spec.database never changes.
		b = b.Watches(&databasev1alpha1.MyDatabasePooler{}, handler.EnqueueRequestsFromMapFunc(poolerDatabase),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }}))
	}
	return b.
		Watches(&databasev1alpha1.MyDatabaseBackup{}, handler.EnqueueRequestsFromMapFunc(backupDatabase),
			builder.WithPredicates(completedOrVerified)).
		Watches(&coordinationv1.Lease{}, byController, builder.WithPredicates(holderChanged)).
		Watches(&corev1.Secret{}, byInstance).
		Watches(&corev1.Pod{}, byInstance, builder.WithPredicates(roleOrReportChanged)).
		Watches(&corev1.PersistentVolumeClaim{}, byInstance, builder.WithPredicates(claimResized)).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Named("mydatabase").
		Complete(r)
}

// requestForController maps a child to the MyDatabase its controller
// reference names: what Owns does, without the RESTMapper lookup Owns
// makes on every event to learn that a MyDatabase is namespaced, which a
// restarted operator, receiving every child at once, paid for visibly
// (docs/benchmarks.md, B8).
func requestForController(_ context.Context, o client.Object) []reconcile.Request {
	ref := metav1.GetControllerOf(o)
	if ref == nil || ref.Kind != "MyDatabase" {
		return nil
	}
	if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != databasev1alpha1.GroupVersion.Group {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}}}
}

// poolerDatabase maps a MyDatabasePooler to the MyDatabase it leads to.
func poolerDatabase(_ context.Context, o client.Object) []reconcile.Request {
	p, ok := o.(*databasev1alpha1.MyDatabasePooler)
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Spec.Database}}}
}

// roleOrReportChanged passes the pod events the operator acts on: a pod
// without a role label, or whose role label someone changed from one role
// to another, or whose instance report changed (status.instances). The
// operator's own labelling (no role to a role) passes nothing. Readiness
// reaches the status through the StatefulSet's own status, so every other
// pod change would only cost a reconcile (about two per MyDatabase on a
// busy cluster).
var roleOrReportChanged = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool {
		return !specs.KnownRole(e.Object.GetLabels()[databasev1alpha1.LabelRole])
	},
	UpdateFunc: func(e event.UpdateEvent) bool {
		role, was := e.ObjectNew.GetLabels()[databasev1alpha1.LabelRole], e.ObjectOld.GetLabels()[databasev1alpha1.LabelRole]
		reported := e.ObjectNew.GetAnnotations()[contract.AnnotationInstance] !=
			e.ObjectOld.GetAnnotations()[contract.AnnotationInstance]
		return !specs.KnownRole(role) || (specs.KnownRole(was) && role != was) || reported
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// holderChanged passes the Lease events that change the primary: its
// renewals (one every few seconds per MyDatabase) pass nothing.
var holderChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		holder := func(o client.Object) string {
			if l, ok := o.(*coordinationv1.Lease); ok {
				return ptr.Deref(l.Spec.HolderIdentity, "")
			}
			return ""
		}
		return holder(e.ObjectNew) != holder(e.ObjectOld)
	},
}

// defaultStallRetry is how often a Stalled MyDatabase looks again at what
// it waits for, for the things no watch can see: a user-supplied Secret
// carries none of our labels, and a ResourceQuota, an admission policy or
// a role being changed wakes nothing.
const defaultStallRetry = 30 * time.Second

func (r *Reconciler) stallRetry() time.Duration {
	if r.StallRetry > 0 {
		return r.StallRetry
	}
	return defaultStallRetry
}

func log(ctx context.Context) logr.Logger { return logf.FromContext(ctx) }

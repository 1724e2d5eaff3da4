// Package mydatabasebackup reconciles MyDatabaseBackup objects: it asks
// one instance of the MyDatabase to take the base backup and writes what
// that instance reports into the object's status. The backup itself runs
// in the instance manager (internal/instance, backuprun.go).
package mydatabasebackup

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
)

// Reconciler reconciles MyDatabaseBackup objects.
type Reconciler struct {
	client.Client
	// APIReader reads around the cache: a backup is failed for good only
	// on what the API server says (see database).
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// Platform is what a verification pod takes from the operator's
	// configuration: the image its instance manager comes from.
	Platform specs.Platform
}

// +kubebuilder:rbac:groups=database.example.com,resources=mydatabasebackups,verbs=get;list;watch
// +kubebuilder:rbac:groups=database.example.com,resources=mydatabasebackups/status,verbs=get;patch
// +kubebuilder:rbac:groups=core,resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get

// instanceField indexes MyDatabaseBackups by status.instance.
const instanceField = "status.instance"

// retry is how soon a backup that waits for an instance looks again.
const retry = 10 * time.Second

// reportFresh is how old a replica's report may be for it to take a
// backup: an older one is from an instance manager that stopped reporting.
const reportFresh = time.Minute

// Reconcile moves a backup on by one step: fail it when it cannot be
// taken, choose the instance that takes it, ask that instance, and copy
// its report; then it sets the conditions from the phase, so that one
// status write carries both, the one that finishes the backup included.
// A finished backup is never moved on again: one finished by an operator
// that wrote no conditions gets them, once, and nothing else.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	b := &databasev1alpha1.MyDatabaseBackup{}
	if err := r.Get(ctx, req.NamespacedName, b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if b.Status.Finished() && meta.FindStatusCondition(b.Status.Conditions, databasev1alpha1.ConditionReady) != nil &&
		!verifyRequested(b) && b.Status.Verification == nil {
		return ctrl.Result{}, nil
	}
	before := b.DeepCopy()
	var res ctrl.Result
	if !b.Status.Finished() {
		var err error
		if res, err = r.step(ctx, b); err != nil {
			return ctrl.Result{}, err
		}
	} else if err := r.verify(ctx, b); err != nil {
		return ctrl.Result{}, err
	}
	setConditions(b, r.Clock.Now())
	if !equality.Semantic.DeepEqual(b.Status, before.Status) {
		// Optimistic: a pass that read a stale backup must not choose a
		// second instance.
		if err := r.Status().Patch(ctx, b, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, err
		}
		if b.Status.Finished() && !before.Status.Finished() {
			r.recordFinished(b)
		}
		if v := b.Status.Verification; v.Finished() && !before.Status.Verification.Finished() {
			r.recordVerified(b)
		}
	}
	return res, nil
}

// database reads the MyDatabase the backup names. The cache may lag
// behind the API server: a MyDatabase created (or given spec.backup) a
// moment before the backup, as one `kubectl apply` of both does, is not
// in it yet. So what would fail the backup for good (no MyDatabase, no
// spec.backup, being deleted) is read again from the API server, and only
// its answer fails it.
func (r *Reconciler) database(ctx context.Context, b *databasev1alpha1.MyDatabaseBackup) (*databasev1alpha1.MyDatabase, error) {
	key := client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.Database}
	db := &databasev1alpha1.MyDatabase{}
	err := r.Get(ctx, key, db)
	if err == nil && db.Spec.Backup != nil && db.DeletionTimestamp.IsZero() {
		return db, nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	db = &databasev1alpha1.MyDatabase{}
	return db, r.APIReader.Get(ctx, key, db)
}

func (r *Reconciler) step(ctx context.Context, b *databasev1alpha1.MyDatabaseBackup) (ctrl.Result, error) {
	st := &b.Status
	db, err := r.database(ctx, b)
	switch {
	case apierrors.IsNotFound(err):
		r.fail(b, fmt.Sprintf("there is no MyDatabase %q in namespace %q", b.Spec.Database, b.Namespace))
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, err
	case db.Spec.Backup == nil:
		r.fail(b, fmt.Sprintf("MyDatabase %q has no spec.backup: set spec.backup.objectStore to say where its backups go", db.Name))
		return ctrl.Result{}, nil
	case !db.DeletionTimestamp.IsZero():
		r.fail(b, fmt.Sprintf("MyDatabase %q is being deleted", db.Name))
		return ctrl.Result{}, nil
	case specs.FollowsSource(db):
		r.fail(b, fmt.Sprintf("MyDatabase %q is a replica of %s: its backups are its source's; back it up once promoted (spec.replica.enabled: false)",
			db.Name, specs.ReplicaSource(db.Spec.Replica)))
		return ctrl.Result{}, nil
	}
	if st.Instance == "" && db.Spec.Hibernate {
		st.Phase = databasev1alpha1.BackupPending
		st.Message = fmt.Sprintf("MyDatabase %q is hibernated (spec.hibernate): the backup waits until its servers run again", db.Name)
		return ctrl.Result{RequeueAfter: retry}, nil
	}
	if st.Instance == "" {
		st.Phase = databasev1alpha1.BackupPending
		revision, why, err := r.revision(ctx, db)
		if err != nil {
			return ctrl.Result{}, err
		}
		if why != "" {
			st.Message = why
			return ctrl.Result{RequeueAfter: retry}, nil
		}
		pods := &corev1.PodList{}
		if err := r.List(ctx, pods, client.InNamespace(db.Namespace), client.MatchingLabels(specs.SelectorLabels(db))); err != nil {
			return ctrl.Result{}, err
		}
		pod, why := choose(pods.Items, revision, b.Spec.Target, r.Clock.Now())
		if pod == nil {
			st.Message = why
			return ctrl.Result{RequeueAfter: retry}, nil
		}
		st.Instance, st.InstanceUID = pod.Name, string(pod.UID)
		st.Message = fmt.Sprintf("asked %s (%s) to take the backup", pod.Name, why)
		// The status is written before the pod is asked, so that a crash in
		// between asks the same pod again, never two; the write brings the
		// next pass.
		return ctrl.Result{}, nil
	}
	pod := &corev1.Pod{}
	err = r.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: st.Instance}, pod)
	if apierrors.IsNotFound(err) || (err == nil && string(pod.UID) != st.InstanceUID) {
		r.fail(b, fmt.Sprintf("pod %s, which was taking the backup, was deleted or replaced: create a new MyDatabaseBackup", st.Instance))
		return ctrl.Result{}, nil
	} else if err != nil {
		return ctrl.Result{}, err
	}
	var run *contract.BackupRun
	if rep, err := contract.Parse(pod.Annotations[contract.AnnotationInstance]); err == nil {
		run = rep.Backup
	}
	if run != nil && run.Name == b.Name {
		copyRun(st, run)
		return ctrl.Result{}, nil
	}
	asked := pod.Annotations[contract.AnnotationBackupRequest]
	if asked == b.Name {
		return ctrl.Result{}, nil // the instance's report brings the rest
	}
	if asked != "" && (run == nil || run.Name != asked || run.Phase == string(databasev1alpha1.BackupRunning)) {
		st.Message = fmt.Sprintf("waiting for %s to finish backup %s", pod.Name, asked)
		return ctrl.Result{RequeueAfter: retry}, nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{ // a map always marshals
		"annotations": map[string]string{contract.AnnotationBackupRequest: b.Name}}})
	if err := r.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// revision is the pod template revision a pod must run to take a backup:
// the StatefulSet's, once its controller has taken in the current template
// (the operator applies the template before it makes a scheduled backup,
// in the same pass). A pod the rollout is still to replace may not know
// the object store at all (one from before spec.backup was set, which
// brings the schedule's first backup at once), or be replaced while it
// copies. Until there is a revision, why says what the backup waits for.
// The StatefulSet is read around the cache: a cached one from before the
// spec's change would name the old revision. A StatefulSet its controller
// has never reported on has made no pod: pods that are there were made
// some other way (test/postgres makes its own), and any of them may take
// the backup (revision "").
func (r *Reconciler) revision(ctx context.Context, db *databasev1alpha1.MyDatabase) (revision, why string, err error) {
	sts := &appsv1.StatefulSet{}
	err = r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: specs.StatefulSetName(db)}, sts)
	switch {
	case apierrors.IsNotFound(err):
		return "", fmt.Sprintf("waiting for MyDatabase %q's StatefulSet", db.Name), nil
	case err != nil:
		return "", "", err
	case sts.Status.ObservedGeneration == 0 && sts.Status.UpdateRevision == "":
		return "", "", nil
	case sts.Status.ObservedGeneration < sts.Generation || sts.Status.UpdateRevision == "":
		return "", fmt.Sprintf("waiting for StatefulSet %q to take in its current pod template", sts.Name), nil
	}
	return sts.Status.UpdateRevision, "", nil
}

// choose picks the pod that takes a backup to target, among those that run
// the pod template revision (any, if it is ""): the ready replica that has
// replayed the most, unless target is Primary or none is ready; else the
// ready primary. It says why it chose, or why there is none.
func choose(pods []corev1.Pod, revision string, target databasev1alpha1.BackupTarget, now time.Time) (*corev1.Pod, string) {
	var primary, replica *corev1.Pod
	var replayed uint64
	outdated := 0
	for i := range pods {
		p := &pods[i]
		rep, err := contract.Parse(p.Annotations[contract.AnnotationInstance])
		if err != nil || !rep.Ready || !p.DeletionTimestamp.IsZero() {
			continue
		}
		if revision != "" && p.Labels[appsv1.ControllerRevisionHashLabelKey] != revision {
			outdated++
			continue
		}
		switch rep.Role {
		case databasev1alpha1.RolePrimary:
			if p.Labels[databasev1alpha1.LabelRole] == databasev1alpha1.RolePrimary {
				primary = p
			}
		case databasev1alpha1.RoleReplica:
			pos, err := contract.LSN(rep.Replayed)
			if err == nil && now.Sub(rep.Time) < reportFresh && (replica == nil || pos > replayed) {
				replica, replayed = p, pos
			}
		}
	}
	switch {
	case target != databasev1alpha1.BackupTargetPrimary && replica != nil:
		return replica, "a ready replica"
	case primary != nil && target == databasev1alpha1.BackupTargetPrimary:
		return primary, "the primary"
	case primary != nil:
		return primary, "the primary: no replica is ready"
	}
	why := "no instance reports one"
	if outdated > 0 {
		why = fmt.Sprintf("ready instances the rollout is still to update to the current spec: %d", outdated)
	}
	if target == databasev1alpha1.BackupTargetPrimary {
		return nil, "waiting for a ready primary to take the backup: " + why
	}
	return nil, "waiting for a ready primary or replica to take the backup: " + why
}

// copyRun writes what the instance reported into the status.
func copyRun(st *databasev1alpha1.MyDatabaseBackupStatus, run *contract.BackupRun) {
	st.Phase, st.Message = databasev1alpha1.BackupPhase(run.Phase), run.Message
	st.BackupID, st.Size, st.Timeline, st.BeginLSN, st.EndLSN = run.ID, run.Size, run.Timeline, run.BeginLSN, run.EndLSN
	st.StartedAt, st.StoppedAt = contract.MetaTime(run.Started), contract.MetaTime(run.Stopped)
	st.BeginWAL, st.EndWAL = run.BeginWAL, run.EndWAL
	st.Type, st.ParentBackupID = "", run.Parent
	if run.ID != "" {
		st.Type = databasev1alpha1.BackupFull
		if run.Parent != "" {
			st.Type = databasev1alpha1.BackupIncremental
		}
	}
}

func (r *Reconciler) fail(b *databasev1alpha1.MyDatabaseBackup, message string) {
	now := metav1.NewTime(r.Clock.Now())
	b.Status.Phase, b.Status.Message, b.Status.StoppedAt = databasev1alpha1.BackupFailed, message, &now
}

func (r *Reconciler) recordVerified(b *databasev1alpha1.MyDatabaseBackup) {
	v := b.Status.Verification
	if v.Result == databasev1alpha1.VerificationPassed {
		r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, databasev1alpha1.ReasonVerificationPassed, "Verify",
			"Backup %s restored to %s in %s: %s", b.Status.BackupID, v.ReachedLSN, v.Took(), v.Message)
		return
	}
	r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "Verification"+string(v.Result), "Verify", "%s", v.Message)
}

func (r *Reconciler) recordFinished(b *databasev1alpha1.MyDatabaseBackup) {
	if b.Status.Phase == databasev1alpha1.BackupCompleted {
		r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, "Completed", "Backup",
			"Backup %s taken on %s: %d bytes, WAL %s to %s", b.Status.BackupID, b.Status.Instance, b.Status.Size, b.Status.BeginLSN, b.Status.EndLSN)
		return
	}
	r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "Failed", "Backup", "%s", b.Status.Message)
}

// SetupWithManager watches the MyDatabaseBackups and, for those under
// way, the reports of the pods that take them, and the pods that verify
// them.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &databasev1alpha1.MyDatabaseBackup{}, instanceField,
		func(o client.Object) []string {
			if b := o.(*databasev1alpha1.MyDatabaseBackup); b.Status.Instance != "" && !b.Status.Finished() {
				return []string{b.Status.Instance}
			}
			return nil
		}); err != nil {
		return err
	}
	byPod := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		if owner := metav1.GetControllerOf(o); owner != nil && owner.Kind == "MyDatabaseBackup" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: owner.Name}}}
		}
		list := &databasev1alpha1.MyDatabaseBackupList{}
		if err := r.List(ctx, list, client.InNamespace(o.GetNamespace()), client.MatchingFields{instanceField: o.GetName()}); err != nil {
			return nil
		}
		var out []reconcile.Request
		for _, b := range list.Items {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&b)})
		}
		return out
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(&databasev1alpha1.MyDatabaseBackup{}).
		Watches(&corev1.Pod{}, byPod).
		Named("mydatabasebackup").
		Complete(r)
}

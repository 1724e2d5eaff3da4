package mydatabase

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/conditions"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
)

// observation is what one reconcile pass found and did, merged from the
// outcomes of its components; the status is a plain function of it. Each
// field says who sets it.
type observation struct {
	// sts is the StatefulSet as the pass left it (the scope's, or the
	// servers component's answer to its apply), nil when there is none.
	sts *appsv1.StatefulSet
	// pods are the MyDatabase's pods, with their instance reports (the
	// scope's); nil when the pass did not look (paused).
	pods []corev1.Pod
	// primary is the holder of the primary Lease (the scope's), "" when it
	// has none or the pass did not look: status.currentPrimary then stays
	// as it was.
	primary string
	// pooled: a MyDatabasePooler leads to the MyDatabase (the scope's
	// mode).
	pooled bool
	// created names the children this pass created ("Service pg-rw"),
	// reported in one event.
	created []string
	// passwords is status.passwords as the rotation component saw it, nil
	// when it did not run.
	passwords []databasev1alpha1.PasswordStatus
	// stalled is set when only the user can unblock the MyDatabase.
	stalled *blocker
	// waiting is set when something outside our control must happen first
	// (the previous instance's Secret being collected); it resolves itself.
	waiting *blocker
	// failure is set when the pass ended early on a transient error; it is
	// retried with backoff.
	failure *blocker
	// podsMissing is set when the StatefulSet has seen its spec but has
	// fewer pods than it should, and its events say no more than that
	// yet. Its controller reports a refused pod or claim only in an event,
	// which no watch brings: the pass looks again soon.
	podsMissing bool
	// switchover is the switchover part of the status (the switchover
	// component), nil when the pass did not get to it (the status keeps
	// what it had).
	switchover *switchoverState
	// tls is the TLS part of the status (tlsCerts), nil when the pass did
	// not get to it.
	tls *tlsState
	// caRotation is status.tls.caRotation (caRotation), nil when the pass
	// did not get to it or the CA was never rotated: the status then keeps
	// what it had.
	caRotation *databasev1alpha1.CARotationStatus
	// upgrade is the major upgrade part of the status (majorUpgrade), nil
	// when the pass did not get to it.
	upgrade *upgradeState
	// monitoring is the MonitoringReady condition's reason and message
	// (podMonitor), nil when the pass did not get to it; an empty reason
	// removes it.
	monitoring *blocker
	// hibernation is status.hibernation (hibernation), nil when the pass
	// did not get to it or there never was one.
	hibernation *databasev1alpha1.HibernationStatus
	// storage is the size of the volumes and an auto-growth, by volume
	// name (servers), nil when the pass did not get to it (the status
	// keeps what it had).
	storage map[string]*storageState
	// schedule is spec.backup.schedule's last and next times (schedule),
	// nil when the pass did not get to it (the status keeps what it had).
	schedule *scheduleState
	// replica is status.replica (the replica component), nil when the pass
	// did not get to it (the status keeps what it had).
	replica *replicaState
	// requeue, when positive, is how soon the pass wants to look again at
	// something no watch brings (a switchover's deadline).
	requeue time.Duration
	// deleting is set while the finalizer runs; gone once the MyDatabase
	// has no finalizer left and nothing remains to report.
	deleting, gone bool
}

// blocker is why a component could not bring the MyDatabase to its
// spec: the (reason, message) pair every controller reports its
// conditions with. The name stays the reconciler's, for the observation's
// fields stalled, waiting and failure.
type blocker = conditions.Cause

// primaryPod is the pod that runs the primary: the Lease's holder, else
// the last one reported (specs.PrimaryPod).
func (o *observation) primaryPod(db *databasev1alpha1.MyDatabase) string {
	if o.primary != "" {
		return o.primary
	}
	return specs.PrimaryPod(db)
}

// ownWrites remembers, per MyDatabase, the object as this process last
// wrote it (its finalizer, its status), with the resourceVersion that
// write produced and the resourceVersions older than it that the cache may
// still show, until the informer cache shows another object. The watch
// event of a child a pass applied often wakes the next pass before the
// MyDatabase's own write reaches the cache: that pass must start from
// what was written, not from the cache. Entries live only while the cache
// lags, and a little longer (caughtUp), so the map stays small.
type ownWrites struct {
	mu sync.Mutex
	m  map[types.NamespacedName]ownWrite
	// grace is how long an entry outlives the cache catching up with it
	// (defaultWriteGrace when zero).
	grace time.Duration
}

// defaultWriteGrace is far longer than a pass takes from reading the
// MyDatabase to calling baseline (no request lies between), which is all
// it must cover, even on a machine whose CPUs are saturated.
const defaultWriteGrace = 10 * time.Second

type ownWrite struct {
	over    []string // resourceVersions older than the write, which the cache may still show
	version string   // resourceVersion the write produced
	object  *databasev1alpha1.MyDatabase
}

// baseline returns what the server holds of db as far as this process
// knows: db itself, or, while the cache still shows an object this process
// has since written over, the object that write returned.
func (w *ownWrites) baseline(key types.NamespacedName, db *databasev1alpha1.MyDatabase) *databasev1alpha1.MyDatabase {
	w.mu.Lock()
	defer w.mu.Unlock()
	last, ok := w.m[key]
	switch {
	case !ok:
	case slices.Contains(last.over, db.ResourceVersion):
		return last.object.DeepCopy()
	default:
		delete(w.m, key) // the cache has moved on
	}
	return db.DeepCopy()
}

// caughtUp is told each resourceVersion of key the cache shows. Once that
// is not one the last write was made over, the cache shows the write, and
// the entry is forgotten after the grace period: the last status write of
// a converged MyDatabase wakes no pass (status changes pass no predicate),
// so no baseline would ever forget it, and every converged MyDatabase
// would keep a copy of itself. Not at once: a pass that read the object
// just before the cache moved on must still find the write when it calls
// baseline.
func (w *ownWrites) caughtUp(key types.NamespacedName, resourceVersion string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	last, ok := w.m[key]
	if !ok || slices.Contains(last.over, resourceVersion) {
		return
	}
	grace := w.grace
	if grace == 0 {
		grace = defaultWriteGrace
	}
	time.AfterFunc(grace, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if now, ok := w.m[key]; ok && now.version == last.version {
			delete(w.m, key)
		}
	})
}

// remember records a write over the object at resourceVersion base, in a
// pass that read resourceVersion cached from the cache; written is the
// object as the write returned it. A chain of writes the cache has not
// caught up with keeps every version of it: the cache may show any of
// them next.
func (w *ownWrites) remember(key types.NamespacedName, cached, base string, written *databasev1alpha1.MyDatabase) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[types.NamespacedName]ownWrite{}
	}
	over := []string{cached}
	if last, ok := w.m[key]; ok && slices.Contains(last.over, cached) {
		over = append(last.over, last.version)
	}
	if !slices.Contains(over, base) {
		over = append(over, base)
	}
	object := written.DeepCopy()
	object.ManagedFields = nil // as the cache holds it
	w.m[key] = ownWrite{over: over, version: written.ResourceVersion, object: object}
}

func (w *ownWrites) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, key)
}

// podCreationRecheck is how soon a pass looks again at the StatefulSet
// controller's events while pods are missing.
const podCreationRecheck = 5 * time.Second

func (o *observation) result(stallRetry time.Duration) ctrl.Result {
	switch {
	case o.waiting != nil:
		return ctrl.Result{RequeueAfter: 5 * time.Second}
	case o.stalled != nil:
		return ctrl.Result{RequeueAfter: stallRetry}
	case o.podsMissing:
		return ctrl.Result{RequeueAfter: podCreationRecheck}
	}
	return ctrl.Result{RequeueAfter: o.requeue}
}

// recheck asks for another pass within d.
func (o *observation) recheck(d time.Duration) {
	d = max(d, time.Second)
	if o.requeue == 0 || d < o.requeue {
		o.requeue = d
	}
}

// rolledOut reports whether the StatefulSet runs the latest template on
// exactly the desired number of pods, all of them ready.
func rolledOut(sts *appsv1.StatefulSet, desired int32) bool {
	if sts == nil || sts.Spec.Replicas == nil || *sts.Spec.Replicas != desired {
		return false
	}
	s := sts.Status
	// Not status.currentRevision: with the OnDelete strategy the
	// StatefulSet controller does not move it (kubernetes#73492).
	return s.ObservedGeneration >= sts.Generation &&
		s.Replicas == desired && s.ReadyReplicas == desired && s.UpdatedReplicas == desired
}

// computeStatus sets db.Status from the observation. The conditions follow
// kstatus, with one meaning each:
//   - Ready: the servers run the current spec and are all ready, and this
//     pass applied every child; or, with reason Hibernated, no server
//     runs, as spec.hibernate asks. It says nothing about whether the pass
//     wrote: a repair no client can see (a ConfigMap edited by hand and
//     put back) leaves it True, with its lastTransitionTime.
//   - Reconciling: present (True) while the operator works towards the
//     spec: rolling out, scaling, waiting for servers, or retrying a
//     transient error. Ready is then False.
//   - Stalled: present (True) when only a person can unblock it; the
//     message says what to do. Ready is then False.
//
// status.observedGeneration moves to the generation once the operator has
// fully acted on it (Ready, Stalled or Paused), never while a new
// generation is still Reconciling.
func computeStatus(db *databasev1alpha1.MyDatabase, obs *observation, now time.Time) {
	st := &db.Status
	desired := specs.Replicas(db)
	st.Selector = specs.Selector(db)
	st.CredentialsSecret = specs.CredentialsSecretName(db)
	if obs.passwords != nil {
		st.Passwords = obs.passwords
	}
	st.CurrentPrimary = obs.primaryPod(db)
	if obs.pods != nil {
		st.Instances = instanceStatuses(obs.pods, st.CurrentPrimary)
	}
	if obs.switchover != nil {
		st.TargetPrimary, st.Switchover = obs.switchover.target, obs.switchover.status
	}
	if obs.tls != nil {
		rotation := obs.caRotation
		if rotation == nil && st.TLS != nil {
			rotation = st.TLS.CARotation
		}
		st.TLS = obs.tls.status
		st.TLS.CARotation = rotation
		valid := metav1.ConditionTrue
		if obs.tls.reason != databasev1alpha1.ReasonCertificateValid {
			valid = metav1.ConditionFalse
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: databasev1alpha1.ConditionCertificateValid, Status: valid,
			Reason: obs.tls.reason, Message: obs.tls.message, ObservedGeneration: db.Generation, LastTransitionTime: metav1.NewTime(now)})
	}
	if obs.upgrade != nil {
		st.MajorUpgrade = obs.upgrade.status
		if obs.upgrade.currentVersion != "" {
			st.CurrentVersion = obs.upgrade.currentVersion
		}
	}
	if obs.hibernation != nil {
		st.Hibernation = obs.hibernation
	}
	setHibernatedCondition(db, now)
	setMonitoringCondition(db, obs.monitoring, now)
	setArchivingStatus(db, obs.pods, st.CurrentPrimary, obs.schedule, now)
	if obs.replica != nil {
		st.Replica = obs.replica.status
	}
	if obs.pods != nil { // else the pass did not look: the status keeps what it had
		setDeclaredStatus(db, reportOf(obs.pods, st.CurrentPrimary), obs.pooled, now)
	}
	setWALSpaceCondition(db, now)
	setStorageStatus(st, obs.storage)
	st.Endpoint = fmt.Sprintf("%s:%d", specs.ReadWriteHost(db), specs.ServicePort(db))
	st.ReadEndpoint = ""
	if desired > 1 {
		st.ReadEndpoint = fmt.Sprintf("%s:%d", specs.ReadOnlyHost(db), specs.ServicePort(db))
	}
	st.Replicas, st.ReadyReplicas = 0, 0
	if obs.sts != nil {
		st.Replicas, st.ReadyReplicas = obs.sts.Status.Replicas, obs.sts.Status.ReadyReplicas
	}
	st.Ready = fmt.Sprintf("%d/%d", st.ReadyReplicas, desired)

	phase, summary, observed := outcome(db, obs, desired)
	st.Phase = phase
	if phase == databasev1alpha1.PhaseReady {
		st.CurrentVersion = db.Spec.Version
	}
	conditions.Set(&st.Conditions, db.Generation, now, summary)
	if observed {
		st.ObservedGeneration = db.Generation
	}
}

// outcome is the phase and the kstatus summary of the pass, and whether
// the operator has fully acted on db's generation.
func outcome(db *databasev1alpha1.MyDatabase, obs *observation, desired int32) (databasev1alpha1.Phase, conditions.Summary, bool) {
	settled := obs.failure == nil && obs.waiting == nil
	switch {
	case obs.deleting:
		message := fmt.Sprintf("deleting with deletionPolicy %s", db.Spec.DeletionPolicy)
		if obs.failure != nil || obs.stalled != nil {
			message = fmt.Sprintf("%s: %s", message, cmp.Or(obs.failure, obs.stalled).Message)
		} else if rest := db.GetFinalizers(); len(rest) > 0 {
			message = fmt.Sprintf("%s; done, waiting for the finalizers %v of others", message, rest)
		}
		return databasev1alpha1.PhaseDeleting, conditions.Summary{State: conditions.Held, Reason: databasev1alpha1.ReasonDeleting, Message: message}, false
	case obs.stalled != nil:
		return databasev1alpha1.PhaseStalled, conditions.Summary{State: conditions.Failed, Reason: obs.stalled.Reason, Message: obs.stalled.Message}, true
	case modeOf(db).paused && obs.failure == nil:
		return databasev1alpha1.PhasePaused, conditions.Summary{State: conditions.Held, Reason: databasev1alpha1.ReasonPaused,
			Message: "spec.paused is true: the operator changes nothing; set it to false to resume"}, true
	case settled && hibernated(db):
		// What the spec asks for is done: kstatus, Flux and kubectl wait
		// read Current, and the reason says no server runs.
		return databasev1alpha1.PhaseHibernated, conditions.Summary{State: conditions.Current, Reason: databasev1alpha1.ReasonHibernated,
			Message: hibernatedMessage(db)}, true
	case settled && rolledOut(obs.sts, desired):
		return databasev1alpha1.PhaseReady, conditions.Summary{State: conditions.Current, Reason: databasev1alpha1.ReasonAvailable,
			Message: fmt.Sprintf("%d/%d servers ready; read-write endpoint %s", desired, desired, db.Status.Endpoint)}, true
	}
	phase := databasev1alpha1.PhaseUpdating
	switch {
	case obs.sts == nil:
		phase = databasev1alpha1.PhasePending
	case db.Status.CurrentVersion == "":
		phase = databasev1alpha1.PhaseProvisioning
	}
	reason, message := progress(db, obs, desired)
	return phase, conditions.Summary{State: conditions.InProgress, Reason: reason, Message: message}, false
}

// progress explains why a MyDatabase that is not stalled is not ready yet.
func progress(db *databasev1alpha1.MyDatabase, obs *observation, desired int32) (reason, message string) {
	sts := obs.sts
	restore := restoring(obs.pods)
	switch {
	case obs.failure != nil:
		return obs.failure.Reason, obs.failure.Message
	case obs.waiting != nil:
		return obs.waiting.Reason, obs.waiting.Message
	case db.Status.CurrentVersion == "" && restore != nil:
		return databasev1alpha1.ReasonRestoring, fmt.Sprintf("%d/%d servers ready; %s restores base backup %s: %s",
			readyReplicas(sts), desired, restore.pod, restore.BackupID, restore.Message)
	case db.Status.CurrentVersion == "" || sts == nil:
		return databasev1alpha1.ReasonProvisioning, fmt.Sprintf("%d/%d servers ready", readyReplicas(sts), desired)
	case sts.Status.Replicas != desired || sts.Spec.Replicas == nil || *sts.Spec.Replicas != desired:
		return databasev1alpha1.ReasonScaling, fmt.Sprintf("scaling from %d to %d servers", sts.Status.Replicas, desired)
	case sts.Status.ObservedGeneration >= sts.Generation && sts.Status.UpdatedReplicas == desired:
		return databasev1alpha1.ReasonServersNotReady, fmt.Sprintf(
			"%d/%d servers ready: the servers run the current spec, waiting for the others to become ready", readyReplicas(sts), desired)
	default:
		return databasev1alpha1.ReasonUpdating, fmt.Sprintf("rolling out the spec: %d/%d servers ready", readyReplicas(sts), desired)
	}
}

func readyReplicas(sts *appsv1.StatefulSet) int32 {
	if sts == nil {
		return 0
	}
	return sts.Status.ReadyReplicas
}

// podRestore is the restore one pod reports.
type podRestore struct {
	pod string
	*contract.Restore
}

// restoring is the restore a pod of a new MyDatabase reports (only the
// first instance restores), nil when none does.
func restoring(pods []corev1.Pod) *podRestore {
	for name, rep := range podReports(pods) {
		if rep.Restore != nil {
			return &podRestore{name, rep.Restore}
		}
	}
	return nil
}

// restoreStalled is the blocker of a restore that failed or makes no
// progress, nil otherwise: only a person can give the archive the WAL it
// lacks, or choose another target.
func restoreStalled(db *databasev1alpha1.MyDatabase, pods []corev1.Pod) *blocker {
	r := restoring(pods)
	if db.Status.CurrentVersion != "" || r == nil || (r.Phase != contract.RestoreFailed && !r.Stalled) {
		return nil
	}
	reason, what := databasev1alpha1.ReasonRestoreFailed, "failed"
	if r.Phase != contract.RestoreFailed {
		reason, what = databasev1alpha1.ReasonRestoreStalled, "makes no progress"
	}
	restore := "the restore of base backup " + r.BackupID
	if r.BackupID == "" {
		restore = "the restore of spec.bootstrap.recovery" // no backup chosen
	}
	return &blocker{Reason: reason, Message: fmt.Sprintf("%s on %s %s: %s. Make the object store of "+
		"spec.bootstrap.recovery hold the backup and the WAL the restore needs, or create the MyDatabase again with another "+
		"spec.bootstrap.recovery (kubectl logs %s shows the server's own words)", restore, r.pod, what, r.Message, r.pod)}
}

// setStorageStatus writes status.storage and status.walStorage from what
// the servers component saw of each volume; a volume it did not get to
// keeps what the status had.
func setStorageStatus(st *databasev1alpha1.MyDatabaseStatus, storage map[string]*storageState) {
	for name, s := range storage {
		to := &st.Storage
		if name == specs.WALVolumeName {
			to = &st.WALStorage
		}
		if *to == nil {
			*to = &databasev1alpha1.StorageStatus{}
		}
		(*to).Size = &s.size
		if s.growth != nil {
			(*to).LastAutoGrowth = s.growth
		}
	}
}

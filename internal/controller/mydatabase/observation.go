package mydatabase

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/conditions"
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
	// verify is the verifications of the database's backups and
	// spec.backup.verify's next time (verifySchedule), nil when the pass
	// did not get to it (the status keeps what it had).
	verify *verifyState
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

// blocked: a component met what stops the pass's prerequisites (align).
func (o *observation) blocked() bool { return o.stalled != nil || o.waiting != nil }

// primaryPod is the pod that runs the primary: the Lease's holder, else
// the last one reported (specs.PrimaryPod).
func (o *observation) primaryPod(db *databasev1alpha1.MyDatabase) string {
	if o.primary != "" {
		return o.primary
	}
	return specs.PrimaryPod(db)
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

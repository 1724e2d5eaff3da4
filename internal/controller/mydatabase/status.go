package mydatabase

import (
	"cmp"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/conditions"
	"example.com/myoperator/internal/specs"
)

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
	setArchivingStatus(db, obs.pods, st.CurrentPrimary, obs.schedule, obs.verify, now)
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

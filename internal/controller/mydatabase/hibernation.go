package mydatabase

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
)

// Hibernation (docs/hibernation.md). spec.hibernate stops every server and
// keeps everything else; status.hibernation records how far it has got,
// and each pass takes the next step from that record and what exists:
//
//	Preparing   the primary is moved to ordinal 0 by a switchover
//	            (switchover.go): the StatefulSet stops the highest ordinal
//	            first, so no replica is left to take over once the primary
//	            stops, and ordinal 0, which it starts first, resumes as the
//	            primary. A backup that runs is waited for;
//	Stopping    the StatefulSet is scaled to zero, its claims retained
//	            whatever the deletionPolicy; each instance manager
//	            checkpoints and shuts its server down, the primary last,
//	            which then gives up the Lease;
//	Hibernated  no server pod is left;
//	Resumed     spec.hibernate is false again: the StatefulSet runs
//	            spec.replicas; ordinal 0, the most advanced, is elected
//	            again, and the replicas stream from it.
//
// Once stopping has begun it goes on to the end even if the primary
// moves: going back up halfway would be a second disruption for nothing.

// hibernation is the component of spec.hibernate.
type hibernation struct {
	*kit
	*scope
	upgrade input[upgradeResult] // a hibernation waits for an upgrade to end
	out     *result[hibernationResult]
	// status is status.hibernation as this pass leaves it.
	status *databasev1alpha1.HibernationStatus
}

// hibernationResult is what hibernation hands over to servers and
// switchover.
type hibernationResult struct {
	// stopped: the servers are to run none (Stopping, Hibernated).
	stopped bool
	// switchoverTo is the instance the switchover component is to make the
	// primary before the servers stop (Preparing), "" for none.
	switchoverTo string
}

// hibernationOf is what a hibernation of status st hands over.
func hibernationOf(st *databasev1alpha1.HibernationStatus) hibernationResult {
	if st == nil {
		return hibernationResult{}
	}
	switch st.Phase {
	case databasev1alpha1.HibernationStopping, databasev1alpha1.HibernationHibernated:
		return hibernationResult{stopped: true}
	case databasev1alpha1.HibernationPreparing:
		return hibernationResult{switchoverTo: st.Primary}
	}
	return hibernationResult{}
}

// reconcile starts, advances or ends a hibernation.
func (r *hibernation) reconcile(_ context.Context, obs *observation) error {
	db := r.db
	r.status = db.Status.Hibernation.DeepCopy()
	out := r.out.produce()
	defer func() { obs.hibernation, *out = r.status, hibernationOf(r.status) }()
	hibernating := r.status != nil && r.status.Phase != databasev1alpha1.HibernationResumed
	switch {
	case !r.mode.hibernate && hibernating:
		r.status.Phase, r.status.Message = databasev1alpha1.HibernationResumed, ""
		r.status.ResumedAt = new(metav1.NewTime(r.Clock.Now()))
		r.event(db, corev1.EventTypeNormal, "Resuming", "Starting the servers again: spec.hibernate is false")
		return nil
	case !r.mode.hibernate, r.upgrade.get().active:
		return nil // an upgrade stops and starts the servers itself; a hibernation follows it
	case !hibernating:
		r.status = &databasev1alpha1.HibernationStatus{Phase: databasev1alpha1.HibernationPreparing,
			Primary: specs.BootstrapPod(db), StartedAt: metav1.NewTime(r.Clock.Now())}
		r.event(db, corev1.EventTypeNormal, "Hibernating", "Stopping every server, %s last: spec.hibernate is true", r.status.Primary)
	}
	st := r.status
	if st.Phase == databasev1alpha1.HibernationPreparing {
		why := r.primaryAtOrdinalZero()
		if running := backupsRunning(r.pods); why == "" && len(running) > 0 {
			why = fmt.Sprintf("the backup on %s is to finish first", strings.Join(running, ", "))
		}
		if why != "" {
			r.waits(obs, "before the servers stop, %s must be the primary, which the StatefulSet stops last, and no backup may run: %s",
				st.Primary, why)
			return nil
		}
		st.Phase = databasev1alpha1.HibernationStopping
	}
	if n := len(r.pods); n > 0 {
		st.Phase = databasev1alpha1.HibernationStopping
		r.waits(obs, "stopping the servers cleanly, %s last: %d still running: %s", st.Primary, n, stillRunning(r.pods))
		return nil
	}
	if st.Phase != databasev1alpha1.HibernationHibernated {
		st.Phase, st.Message = databasev1alpha1.HibernationHibernated, ""
		st.HibernatedAt = new(metav1.NewTime(r.Clock.Now()))
		r.event(db, corev1.EventTypeNormal, "Hibernated", "Every server has stopped; the volumes, Secrets and WAL archive are kept")
	}
	return nil
}

// primaryAtOrdinalZero says why ordinal 0 is not the primary yet, "" once
// it holds the Lease and no switchover runs (or when there is nothing to
// move: no instance reports); the switchover component asks for it
// meanwhile.
func (r *hibernation) primaryAtOrdinalZero() string {
	want, target := r.status.Primary, r.db.Status.TargetPrimary
	switch {
	case len(podReports(r.pods)) == 0:
		return ""
	case target != "":
		return fmt.Sprintf("switching over from %s to %s", r.primaryPod(), target)
	case r.holder() == want:
		return ""
	case r.holder() == "":
		return "the primary Lease has no holder (an election is under way)"
	}
	if _, why := pickTarget(r.scope, want); why != "" {
		return why + "; setting spec.hibernate to false calls the hibernation off"
	}
	if sw := r.db.Status.Switchover; sw != nil && sw.Reason == databasev1alpha1.SwitchoverHibernation &&
		sw.Phase == databasev1alpha1.SwitchoverFailed && sw.StartedAt != nil && !sw.StartedAt.Before(&r.status.StartedAt) {
		return fmt.Sprintf("the last switchover failed (%s); trying again", sw.Message)
	}
	return "switching over from " + r.holder()
}

// waits reports the hibernation as progress.
func (r *hibernation) waits(obs *observation, format string, args ...any) {
	r.status.Message = fmt.Sprintf(format, args...)
	obs.waiting = &blocker{Reason: databasev1alpha1.ReasonHibernating, Message: "hibernating: " + r.status.Message}
}

// backupsRunning names the pods asked to take a backup that has not
// finished.
func backupsRunning(pods []corev1.Pod) []string {
	reports := podReports(pods)
	var running []string
	for _, pod := range pods {
		asked := pod.Annotations[contract.AnnotationBackupRequest]
		if asked == "" {
			continue
		}
		var run *contract.BackupRun
		if rep := reports[pod.Name]; rep != nil {
			run = rep.Backup
		}
		if run == nil || run.Name != asked || run.Phase == string(databasev1alpha1.BackupRunning) {
			running = append(running, fmt.Sprintf("%s (%s)", pod.Name, asked))
		}
	}
	return running
}

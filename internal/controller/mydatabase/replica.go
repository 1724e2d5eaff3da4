package mydatabase

import (
	"context"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
)

// replica is the component of a replica MyDatabase (spec.replica): it
// reports in status.replica where the designated primary's replay of the
// source's WAL stands, a demotion (the token where this MyDatabase's own
// WAL ended), and a promotion once the primary takes writes. What the
// servers do is the instance managers' (internal/instance, replica.go);
// the operator's part is the Lease's contract.AnnotationReplica and
// contract.AnnotationPromotionToken (specs.Lease) and the source in the
// pods' environment (specs.backupEnv, specs.replicaStreamEnv).
type replica struct {
	*kit
	*scope
}

// replicaState is the replica part of the status.
type replicaState struct {
	status *databasev1alpha1.ReplicaStatus
}

func (r *replica) reconcile(_ context.Context, obs *observation) error {
	db, rep := r.db, r.mode.replica
	if rep == nil {
		return nil
	}
	primary := r.primaryPod()
	report := reportOf(r.pods, primary)
	st := &databasev1alpha1.ReplicaStatus{Source: specs.ReplicaSource(rep)}
	switch {
	case report != nil && report.Replica != nil:
		st.DesignatedPrimary, st.LastReplayedLSN, st.Streaming = primary, report.Replayed, report.Replica.Streaming
		st.LastFetchedWAL, st.LastReplayedTime = report.Replica.LastWAL, contract.MetaTime(report.Replica.ReplayedAt)
		st.DemotionToken = report.Replica.DemotionToken
		st.Message = strings.Join(slices.DeleteFunc([]string{report.Replica.Waiting, report.Replica.Rejoined}, func(m string) bool { return m == "" }), "; ")
		source, serr := contract.LSN(report.Replica.SourceLSN)
		replayed, rerr := contract.LSN(report.Replayed)
		if st.Streaming && serr == nil && rerr == nil {
			st.LagBytes = new(int64(max(source, replayed) - replayed))
		}
		if rejoined := report.Replica.Rejoined; rejoined != "" && (db.Status.Replica == nil || !strings.Contains(db.Status.Replica.Message, rejoined)) {
			r.event(db, corev1.EventTypeWarning, "Rejoined", "%s demoted and %s", primary, rejoined)
		}
		if st.DemotionToken != "" && (db.Status.Replica == nil || db.Status.Replica.DemotionToken != st.DemotionToken) {
			r.event(db, corev1.EventTypeNormal, "Demoted", "%s demoted: its WAL ends at %s; it follows %s. Promote the MyDatabase that takes over "+
				"with spec.replica.promotionToken: %s, so that it has every commit this one acknowledged", primary, st.DemotionToken, st.Source, st.DemotionToken)
		}
	case report != nil && report.Ready && report.Role == databasev1alpha1.RolePrimary && rep.Enabled:
		st.Message = "demoting: the primary takes writes until its instance manager stops it and follows " + st.Source
	case report != nil && report.Ready && report.Role == databasev1alpha1.RolePrimary:
		// A primary that takes writes: promoted.
		if db.Status.Replica != nil {
			r.event(db, corev1.EventTypeNormal, "Promoted", "%s promoted: this MyDatabase takes writes on timeline %d and no longer follows %s",
				primary, report.Timeline, st.Source)
		}
		st = nil
	case db.Status.Replica != nil:
		st = db.Status.Replica // no report yet (a new pod, or a restart): as it was
	case !rep.Enabled:
		st = nil
	}
	obs.replica = &replicaState{status: st}
	return nil
}

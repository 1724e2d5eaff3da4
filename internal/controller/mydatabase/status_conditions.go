package mydatabase

import (
	"fmt"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// The conditions computeStatus (status.go) folds from what the components
// of the pass found: each a plain function of the MyDatabase, its status
// as the pass leaves it, and the time. They live beside computeStatus, not
// in the feature files, so that a pass enters the feature files through
// their components only (setArchivingStatus stays in backup.go, which the
// backup-encryption branch edits, and setDeclaredStatus in declared.go).

// hibernatedMessage is what Ready and Hibernated say while no server runs.
func hibernatedMessage(db *databasev1alpha1.MyDatabase) string {
	return fmt.Sprintf("hibernated: no server runs (since %s); the volumes, Secrets and WAL archive are kept, and backups wait; "+
		"set spec.hibernate to false to start the servers again", db.Status.Hibernation.HibernatedAt.UTC().Format(time.RFC3339))
}

// setHibernatedCondition keeps the Hibernated condition (True) while no
// server runs for spec.hibernate; on the way there Reconciling says what
// the hibernation waits for.
func setHibernatedCondition(db *databasev1alpha1.MyDatabase, now time.Time) {
	if !hibernated(db) {
		meta.RemoveStatusCondition(&db.Status.Conditions, databasev1alpha1.ConditionHibernated)
		return
	}
	meta.SetStatusCondition(&db.Status.Conditions, metav1.Condition{Type: databasev1alpha1.ConditionHibernated,
		Status: metav1.ConditionTrue, Reason: databasev1alpha1.ReasonHibernated, Message: hibernatedMessage(db),
		ObservedGeneration: db.Generation, LastTransitionTime: metav1.NewTime(now)})
}

// setMonitoringCondition writes what the podMonitor component found into the
// MonitoringReady condition; nil leaves it as it was.
func setMonitoringCondition(db *databasev1alpha1.MyDatabase, found *blocker, now time.Time) {
	switch {
	case found == nil:
	case found.Reason == "":
		meta.RemoveStatusCondition(&db.Status.Conditions, databasev1alpha1.ConditionMonitoringReady)
	default:
		status := metav1.ConditionTrue
		if found.Reason != databasev1alpha1.ReasonPodMonitorApplied {
			status = metav1.ConditionFalse
		}
		meta.SetStatusCondition(&db.Status.Conditions, metav1.Condition{Type: databasev1alpha1.ConditionMonitoringReady,
			Status: status, Reason: found.Reason, Message: found.Message,
			ObservedGeneration: db.Generation, LastTransitionTime: metav1.NewTime(now)})
	}
}

// setWALSpaceCondition reports whether the WAL on every server stays within
// half its volume (ConditionWALSpace): the WAL volume where the server
// reports one, the data volume otherwise, from status.instances. For the
// primary, the cause it names comes from the ContinuousArchiving condition,
// so it runs after setArchivingStatus.
func setWALSpaceCondition(db *databasev1alpha1.MyDatabase, now time.Time) {
	st := &db.Status
	cond := metav1.Condition{Type: databasev1alpha1.ConditionWALSpace, ObservedGeneration: db.Generation,
		LastTransitionTime: metav1.NewTime(now), Status: metav1.ConditionUnknown,
		Reason: databasev1alpha1.ReasonWALNotReported, Message: "no server has reported its storage yet"}
	if hibernated(db) {
		cond.Message = "no server runs while the MyDatabase is hibernated"
	}
	// The server whose WAL takes the largest share of its volume.
	var worst *databasev1alpha1.InstanceStatus
	var worstVolume walVolume
	for i := range st.Instances {
		if s := st.Instances[i].Storage; s != nil {
			if v := walVolumeOf(s); v.capacity > 0 && (worst == nil || v.share(s) > worstVolume.share(worst.Storage)) {
				worst, worstVolume = &st.Instances[i], v
			}
		}
	}
	if worst != nil {
		s, v := worst.Storage, worstVolume
		holds := fmt.Sprintf("pg_wal on %s holds %s, %d%% of its %s %s volume", worst.Name, iecBytes(s.WALBytes),
			int(math.Round(100*v.share(s))), iecBytes(v.capacity), v.what)
		if 2*s.WALBytes <= v.capacity {
			cond.Status, cond.Reason = metav1.ConditionTrue, databasev1alpha1.ReasonWALWithinBound
			cond.Message = holds + ", within the half checkpoints and replication slots may keep"
		} else {
			cond.Status, cond.Reason = metav1.ConditionFalse, databasev1alpha1.ReasonWALAccumulating
			cond.Message = fmt.Sprintf("%s, more than the half checkpoints and replication slots may keep; %s is free. %s",
				holds, iecBytes(v.available), walCause(db, worst.Name))
		}
	}
	meta.SetStatusCondition(&st.Conditions, cond)
}

// walVolume is the volume a server's WAL is on, as it reported it.
type walVolume struct {
	what                string // "WAL" or "data"
	capacity, available int64
}

func walVolumeOf(s *databasev1alpha1.InstanceStorage) walVolume {
	if s.WALCapacityBytes > 0 {
		return walVolume{"WAL", s.WALCapacityBytes, s.WALAvailableBytes}
	}
	return walVolume{"data", s.CapacityBytes, s.AvailableBytes}
}

// share is the WAL's share of the volume.
func (v walVolume) share(s *databasev1alpha1.InstanceStorage) float64 {
	return float64(s.WALBytes) / float64(v.capacity)
}

// iecBytes writes a byte count in MiB or GiB, one decimal.
func iecBytes(b int64) string {
	if b >= 1<<30 {
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

// walCause says why a server keeps more WAL than its bounds, and what to do.
func walCause(db *databasev1alpha1.MyDatabase, pod string) string {
	grow := "Growing spec.storage.size buys time meanwhile."
	if db.Spec.WALStorage != nil {
		grow = "Growing spec.walStorage.size buys time meanwhile."
	}
	if pod != db.Status.CurrentPrimary {
		return "A replica keeps the WAL it received until its next restartpoint: its replay may be stuck behind a long query " +
			"or a conflict (see its lagBytes and its log). " + grow
	}
	if c := meta.FindStatusCondition(db.Status.Conditions, databasev1alpha1.ConditionContinuousArchiving); c != nil &&
		c.Status == metav1.ConditionFalse {
		return "Archiving fails: " + c.Message + ". Mend the object store or its credentials: " +
			"the backlog is archived and removed once it works. " + grow
	}
	return "Archiving keeps up, so a setting in spec.parameters (max_wal_size, wal_keep_size, max_slot_wal_keep_size) " +
		"or a replication slot the operator does not manage keeps it (pg_replication_slots; " +
		"mydatabase_pg_replication_slot_retained_bytes): lower the setting or drop the slot. " + grow
}

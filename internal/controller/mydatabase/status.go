package mydatabase

import (
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// observation is what one reconcile pass found and did; the status is a
// plain function of it.
type observation struct {
	// sts is the live StatefulSet, nil when there is none yet.
	sts *appsv1.StatefulSet
	// wrote is true when this pass changed a child: what the cache shows
	// is then older than what the server has, so nothing is Ready yet.
	wrote bool
	// created names the children this pass created ("Service pg-rw"),
	// reported in one event.
	created []string
	// dataVolume is the primary's data volume as this pass read it from
	// the API server ("" when there is none), nil before it looked.
	dataVolume *string
	// stalled is set when only the user can unblock the MyDatabase.
	stalled *blocker
	// waiting is set when something outside our control must happen first
	// (the previous instance's Secret being collected); it resolves itself.
	waiting *blocker
}

type blocker struct{ reason, message string }

// statusWrites remembers, per MyDatabase, the last status this process
// wrote and the resourceVersion of the object it was computed from, until
// the informer cache shows a newer object. The watch event of a child this
// pass applied often wakes the next pass before the MyDatabase's own status
// write reaches the cache; that pass would send the same status again.
// Entries live only while the cache lags, so the map stays small.
type statusWrites struct {
	mu sync.Mutex
	m  map[types.NamespacedName]writtenStatus
}

type writtenStatus struct {
	over   string // resourceVersion the status was written over
	status databasev1alpha1.MyDatabaseStatus
}

// repeats reports whether writing status over db would repeat the last
// write: db is still the object that write was made over, and the status is
// the same. It forgets the write once the cache shows a newer object.
func (w *statusWrites) repeats(key types.NamespacedName, db *databasev1alpha1.MyDatabase, status databasev1alpha1.MyDatabaseStatus) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	last, ok := w.m[key]
	if !ok {
		return false
	}
	if last.over != db.ResourceVersion {
		delete(w.m, key)
		return false
	}
	return equality.Semantic.DeepEqual(last.status, status)
}

func (w *statusWrites) remember(key types.NamespacedName, over *databasev1alpha1.MyDatabase, status databasev1alpha1.MyDatabaseStatus) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[types.NamespacedName]writtenStatus{}
	}
	w.m[key] = writtenStatus{over: over.ResourceVersion, status: *status.DeepCopy()}
}

func (w *statusWrites) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, key)
}

func (o *observation) result() ctrl.Result {
	switch {
	case o.waiting != nil:
		return ctrl.Result{RequeueAfter: 5 * time.Second}
	case o.stalled != nil:
		return ctrl.Result{RequeueAfter: requeueAfterStall}
	}
	return ctrl.Result{}
}

// rolledOut reports whether the StatefulSet runs the latest template on
// exactly the desired number of pods, all of them ready.
func rolledOut(sts *appsv1.StatefulSet, desired int32) bool {
	if sts == nil || sts.Spec.Replicas == nil || *sts.Spec.Replicas != desired {
		return false
	}
	s := sts.Status
	return s.ObservedGeneration >= sts.Generation &&
		s.Replicas == desired && s.ReadyReplicas == desired && s.UpdatedReplicas == desired &&
		(s.UpdateRevision == "" || s.CurrentRevision == s.UpdateRevision)
}

// computeStatus sets db.Status from the observation. Conditions follow
// kstatus: Ready is the summary; Reconciling and Stalled exist only while
// True.
func computeStatus(db *databasev1alpha1.MyDatabase, obs *observation, now time.Time) {
	st := &db.Status
	desired := specs.Replicas(db)
	st.ObservedGeneration = db.Generation
	st.Selector = specs.Selector(db)
	st.CredentialsSecret = specs.CredentialsSecretName(db)
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

	ready := !obs.wrote && rolledOut(obs.sts, desired)
	if ready {
		st.CurrentVersion = db.Spec.Version
	}

	set := func(typ string, status metav1.ConditionStatus, reason, message string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: typ, Status: status, Reason: reason, Message: message,
			ObservedGeneration: db.Generation, LastTransitionTime: metav1.NewTime(now),
		})
	}
	readyCondition := func(reason, message string) {
		if ready {
			set(databasev1alpha1.ConditionReady, metav1.ConditionTrue, databasev1alpha1.ReasonAvailable,
				fmt.Sprintf("%d/%d servers ready; read-write endpoint %s", desired, desired, st.Endpoint))
			return
		}
		set(databasev1alpha1.ConditionReady, metav1.ConditionFalse, reason, message)
	}

	switch {
	case obs.stalled != nil:
		st.Phase = databasev1alpha1.PhaseStalled
		meta.RemoveStatusCondition(&st.Conditions, databasev1alpha1.ConditionReconciling)
		set(databasev1alpha1.ConditionStalled, metav1.ConditionTrue, obs.stalled.reason, obs.stalled.message)
		readyCondition(obs.stalled.reason, obs.stalled.message)
	case db.Spec.Paused:
		st.Phase = databasev1alpha1.PhasePaused
		meta.RemoveStatusCondition(&st.Conditions, databasev1alpha1.ConditionReconciling)
		meta.RemoveStatusCondition(&st.Conditions, databasev1alpha1.ConditionStalled)
		readyCondition(databasev1alpha1.ReasonPaused,
			"spec.paused is true: the operator changes nothing; set it to false to resume")
	case ready:
		st.Phase = databasev1alpha1.PhaseReady
		meta.RemoveStatusCondition(&st.Conditions, databasev1alpha1.ConditionReconciling)
		meta.RemoveStatusCondition(&st.Conditions, databasev1alpha1.ConditionStalled)
		readyCondition("", "")
	default:
		reason, message := progress(db, obs, desired)
		st.Phase = databasev1alpha1.PhaseUpdating
		if st.CurrentVersion == "" {
			st.Phase = databasev1alpha1.PhaseProvisioning
		}
		meta.RemoveStatusCondition(&st.Conditions, databasev1alpha1.ConditionStalled)
		set(databasev1alpha1.ConditionReconciling, metav1.ConditionTrue, reason, message)
		readyCondition(reason, message)
	}
}

// progress explains why a MyDatabase that is not stalled is not ready yet.
func progress(db *databasev1alpha1.MyDatabase, obs *observation, desired int32) (reason, message string) {
	sts := obs.sts
	switch {
	case obs.waiting != nil:
		return obs.waiting.reason, obs.waiting.message
	case db.Status.CurrentVersion == "":
		return databasev1alpha1.ReasonProvisioning, fmt.Sprintf("%d/%d servers ready", readyReplicas(sts), desired)
	case sts != nil && sts.Status.Replicas != desired:
		return databasev1alpha1.ReasonScaling, fmt.Sprintf("scaling from %d to %d servers", sts.Status.Replicas, desired)
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

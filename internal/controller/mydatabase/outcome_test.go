package mydatabase

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/conditions"
)

// TestOutcome: the phase and the kstatus summary of each kind of pass,
// and whether status.observedGeneration moves. Which of several causes
// wins: being deleted, then a stall, then spec.paused (unless a pass
// failed), then what the servers show.
func TestOutcome(t *testing.T) {
	rolled := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: 1},
		Spec:   appsv1.StatefulSetSpec{Replicas: new(int32(1))},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 1, Replicas: 1, ReadyReplicas: 1, UpdatedReplicas: 1}}
	stall := &blocker{Reason: databasev1alpha1.ReasonCredentialsLost, Message: "put the Secret back"}
	failure := &blocker{Reason: databasev1alpha1.ReasonAPIError, Message: "patching: conflict; retrying"}
	type want struct {
		phase    databasev1alpha1.Phase
		summary  conditions.Summary
		observed bool
	}
	for name, tc := range map[string]struct {
		db   func(*databasev1alpha1.MyDatabase)
		obs  observation
		want want
	}{
		"ready": {obs: observation{sts: rolled}, want: want{databasev1alpha1.PhaseReady, conditions.Summary{State: conditions.Current,
			Reason: databasev1alpha1.ReasonAvailable, Message: "1/1 servers ready; read-write endpoint db-rw:5432"}, true}},
		"no StatefulSet yet": {want: want{databasev1alpha1.PhasePending, conditions.Summary{State: conditions.InProgress,
			Reason: databasev1alpha1.ReasonProvisioning, Message: "0/1 servers ready"}, false}},
		"rolled out, but a pass failed": {obs: observation{sts: rolled, failure: failure}, want: want{databasev1alpha1.PhaseProvisioning,
			conditions.Summary{State: conditions.InProgress, Reason: failure.Reason, Message: failure.Message}, false}},
		"stalled": {obs: observation{sts: rolled, stalled: stall}, want: want{databasev1alpha1.PhaseStalled,
			conditions.Summary{State: conditions.Failed, Reason: stall.Reason, Message: stall.Message}, true}},
		"paused": {db: func(db *databasev1alpha1.MyDatabase) { db.Spec.Paused = true }, obs: observation{sts: rolled},
			want: want{databasev1alpha1.PhasePaused, conditions.Summary{State: conditions.Held, Reason: databasev1alpha1.ReasonPaused,
				Message: "spec.paused is true: the operator changes nothing; set it to false to resume"}, true}},
		"paused, stalled": {db: func(db *databasev1alpha1.MyDatabase) { db.Spec.Paused = true }, obs: observation{stalled: stall},
			want: want{databasev1alpha1.PhaseStalled, conditions.Summary{State: conditions.Failed, Reason: stall.Reason, Message: stall.Message}, true}},
		"deleting, stalled": {obs: observation{deleting: true, stalled: stall}, want: want{databasev1alpha1.PhaseDeleting,
			conditions.Summary{State: conditions.Held, Reason: databasev1alpha1.ReasonDeleting,
				Message: "deleting with deletionPolicy Retain: put the Secret back"}, false}},
	} {
		t.Run(name, func(t *testing.T) {
			db := &databasev1alpha1.MyDatabase{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db", Generation: 1}}
			db.Spec.DeletionPolicy = "Retain"
			db.Status.Endpoint = "db-rw:5432"
			if tc.db != nil {
				tc.db(db)
			}
			var got want
			got.phase, got.summary, got.observed = outcome(db, &tc.obs, 1)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("outcome (-want +got):\n%s", diff)
			}
		})
	}
}

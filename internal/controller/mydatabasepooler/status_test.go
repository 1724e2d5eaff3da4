package mydatabasepooler

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/conditions"
)

// TestComputeStatus: the status of each outcome of a pass, from a new
// pooler of generation 3 with two instances.
func TestComputeStatus(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const endpoint = "pool.shop.svc:5432"
	deployment := func(generation, observed int64, replicas, updated, available int32) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: generation}, Status: appsv1.DeploymentStatus{
			ObservedGeneration: observed, Replicas: replicas, UpdatedReplicas: updated, AvailableReplicas: available}}
	}
	cond := func(typ string, status metav1.ConditionStatus, reason, message string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message,
			ObservedGeneration: 3, LastTransitionTime: metav1.NewTime(now)}
	}
	notReady := func(reason, message string) []metav1.Condition {
		return []metav1.Condition{cond(databasev1alpha1.ConditionReconciling, metav1.ConditionTrue, reason, message),
			cond(databasev1alpha1.ConditionReady, metav1.ConditionFalse, reason, message)}
	}
	const noDatabase = `no MyDatabase "shop" in namespace shop: create it`
	for name, tc := range map[string]struct {
		paused     bool
		dep        *appsv1.Deployment
		lookup     string
		err        error
		ready      int32
		conditions []metav1.Condition
	}{
		"available": {dep: deployment(1, 1, 2, 2, 2), ready: 2, conditions: []metav1.Condition{
			cond(databasev1alpha1.ConditionReady, metav1.ConditionTrue, databasev1alpha1.ReasonAvailable,
				"2 of 2 PgBouncer pods available at "+endpoint)}},
		"available, the database cannot log clients in yet": {dep: deployment(1, 1, 2, 2, 2), lookup: "the MyDatabase shop: waiting", ready: 2,
			conditions: notReady(databasev1alpha1.ReasonLookupPending,
				"2 of 2 PgBouncer pods available, but no client can log in yet: the MyDatabase shop: waiting")},
		"no Deployment yet": {conditions: notReady(databasev1alpha1.ReasonPodsNotReady,
			"0 of 2 PgBouncer pods available, the Deployment is rolling out")},
		"rolled out, one pod not available": {dep: deployment(1, 1, 2, 2, 1), ready: 1,
			conditions: notReady(databasev1alpha1.ReasonPodsNotReady, "1 of 2 PgBouncer pods available")},
		"all available, the new spec not seen yet": {dep: deployment(2, 1, 2, 2, 2), ready: 2,
			conditions: notReady(databasev1alpha1.ReasonPodsNotReady, "2 of 2 PgBouncer pods available, the Deployment is rolling out")},
		"a third pod during the rollout": {dep: deployment(1, 1, 3, 2, 2), ready: 2,
			conditions: notReady(databasev1alpha1.ReasonPodsNotReady, "2 of 2 PgBouncer pods available, the Deployment is rolling out")},
		"an API error": {dep: deployment(1, 1, 2, 2, 2), ready: 2, err: errors.New("the server is on fire"),
			conditions: notReady(databasev1alpha1.ReasonAPIError, "the server is on fire")},
		"stalled, through the error's wrapping": {err: fmt.Errorf("aligning: %w",
			&conditions.Cause{Reason: databasev1alpha1.ReasonDatabaseNotFound, Message: noDatabase}),
			conditions: []metav1.Condition{
				cond(databasev1alpha1.ConditionStalled, metav1.ConditionTrue, databasev1alpha1.ReasonDatabaseNotFound, noDatabase),
				cond(databasev1alpha1.ConditionReady, metav1.ConditionFalse, databasev1alpha1.ReasonDatabaseNotFound, noDatabase)}},
		"paused": {paused: true, dep: deployment(1, 1, 2, 2, 2), ready: 2, conditions: []metav1.Condition{
			cond(databasev1alpha1.ConditionReady, metav1.ConditionFalse, databasev1alpha1.ReasonPaused,
				"spec.paused: the operator changes nothing of this pooler; its pods go on serving")}},
	} {
		t.Run(name, func(t *testing.T) {
			p := &databasev1alpha1.MyDatabasePooler{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "pool", Generation: 3}}
			p.Spec.Database, p.Spec.Paused, p.Spec.Instances = "shop", tc.paused, ptr.To[int32](2)
			computeStatus(p, tc.dep, tc.lookup, tc.err, now)
			want := databasev1alpha1.MyDatabasePoolerStatus{ObservedGeneration: 3, Instances: 2, ReadyInstances: tc.ready,
				Endpoint: endpoint, SecretName: "pool-tls", Conditions: tc.conditions}
			if diff := cmp.Diff(want, p.Status); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLookupPending: a pooler waits for its MyDatabase's
// PoolerLookupApplied, except on a replica MyDatabase.
func TestLookupPending(t *testing.T) {
	with := func(status metav1.ConditionStatus) *databasev1alpha1.MyDatabase {
		db := &databasev1alpha1.MyDatabase{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}
		if status != "" {
			db.Status.Conditions = []metav1.Condition{{Type: databasev1alpha1.ConditionPoolerLookupApplied, Status: status,
				Message: "waiting for the primary"}}
		}
		return db
	}
	replica := with("")
	replica.Spec.Replica = &databasev1alpha1.ReplicaSpec{}
	for name, tc := range map[string]struct {
		db   *databasev1alpha1.MyDatabase
		want string
	}{
		"no condition yet": {with(""), "the MyDatabase shop has not yet taken this pooler in"},
		"pending":          {with(metav1.ConditionFalse), "the MyDatabase shop: waiting for the primary"},
		"applied":          {with(metav1.ConditionTrue), ""},
		"a replica":        {replica, ""},
		"no MyDatabase":    {nil, ""},
	} {
		if got := lookupPending(tc.db); got != tc.want {
			t.Errorf("%s: %q, want %q", name, got, tc.want)
		}
	}
}

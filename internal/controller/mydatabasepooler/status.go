package mydatabasepooler

import (
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/conditions"
	"example.com/myoperator/internal/specs"
)

// computeStatus sets p's status from its Deployment (nil when there is
// none), why its MyDatabase cannot yet log its clients in (lookup, "" when
// it can: lookupPending) and the outcome of the pass, alignErr: a
// *conditions.Cause when a person must act. status.observedGeneration is p's generation after
// every pass: a pass applies the whole spec, or says why it could not.
func computeStatus(p *databasev1alpha1.MyDatabasePooler, dep *appsv1.Deployment, lookup string, alignErr error, now time.Time) {
	st := &p.Status
	st.ObservedGeneration = p.Generation
	st.Instances = specs.PoolerInstances(p)
	st.ReadyInstances = 0
	rolledOut := false
	if dep != nil {
		st.ReadyInstances = dep.Status.AvailableReplicas
		rolledOut = dep.Status.ObservedGeneration >= dep.Generation &&
			dep.Status.UpdatedReplicas == st.Instances && dep.Status.Replicas == st.Instances
	}
	st.Endpoint = specs.PoolerEndpoint(p)
	st.SecretName = specs.PoolerSecretName(p)
	conditions.Set(&st.Conditions, p.Generation, now, summary(p, rolledOut, lookup, alignErr))
}

// summary is what the pass says to kstatus: stalled on a Cause,
// reconciling on another error, while the pods roll out or are not all
// available, or while the database cannot log clients in; held while
// paused.
func summary(p *databasev1alpha1.MyDatabasePooler, rolledOut bool, lookup string, alignErr error) conditions.Summary {
	st := &p.Status
	var stalled *conditions.Cause
	switch {
	case errors.As(alignErr, &stalled):
		return conditions.Summary{State: conditions.Failed, Reason: stalled.Reason, Message: stalled.Message}
	case alignErr != nil:
		return conditions.Summary{State: conditions.InProgress, Reason: databasev1alpha1.ReasonAPIError, Message: alignErr.Error()}
	case p.Spec.Paused:
		return conditions.Summary{State: conditions.Held, Reason: databasev1alpha1.ReasonPaused,
			Message: "spec.paused: the operator changes nothing of this pooler; its pods go on serving"}
	case rolledOut && st.ReadyInstances >= st.Instances && lookup != "":
		return conditions.Summary{State: conditions.InProgress, Reason: databasev1alpha1.ReasonLookupPending,
			Message: fmt.Sprintf("%d of %d PgBouncer pods available, but no client can log in yet: %s", st.ReadyInstances, st.Instances, lookup)}
	case rolledOut && st.ReadyInstances >= st.Instances:
		return conditions.Summary{State: conditions.Current, Reason: databasev1alpha1.ReasonAvailable,
			Message: fmt.Sprintf("%d of %d PgBouncer pods available at %s", st.ReadyInstances, st.Instances, st.Endpoint)}
	}
	msg := fmt.Sprintf("%d of %d PgBouncer pods available", st.ReadyInstances, st.Instances)
	if !rolledOut {
		msg += ", the Deployment is rolling out"
	}
	return conditions.Summary{State: conditions.InProgress, Reason: databasev1alpha1.ReasonPodsNotReady, Message: msg}
}

// lookupPending says why db's servers cannot yet look up the passwords of
// a pooler's clients (ConditionPoolerLookupApplied), "" when they can. A
// replica MyDatabase's servers hold the lookup its source's primary made,
// if any: nothing here says whether it did.
func lookupPending(db *databasev1alpha1.MyDatabase) string {
	if db == nil || specs.Replica(db) != nil {
		return ""
	}
	switch c := meta.FindStatusCondition(db.Status.Conditions, databasev1alpha1.ConditionPoolerLookupApplied); {
	case c == nil:
		return fmt.Sprintf("the MyDatabase %s has not yet taken this pooler in", db.Name)
	case c.Status != metav1.ConditionTrue:
		return fmt.Sprintf("the MyDatabase %s: %s", db.Name, c.Message)
	}
	return ""
}

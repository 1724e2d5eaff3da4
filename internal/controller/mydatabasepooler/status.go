package mydatabasepooler

import (
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/conditions"
	"example.com/myoperator/internal/specs"
)

// computeStatus sets p's status from its Deployment (nil when there is
// none) and the outcome of the pass, alignErr: a *conditions.Cause when a
// person must act. status.observedGeneration is p's generation after
// every pass: a pass applies the whole spec, or says why it could not.
func computeStatus(p *databasev1alpha1.MyDatabasePooler, dep *appsv1.Deployment, alignErr error, now time.Time) {
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
	conditions.Set(&st.Conditions, p.Generation, now, summary(p, rolledOut, alignErr))
}

// summary is what the pass says to kstatus: stalled on a Cause,
// reconciling on another error or while the pods roll out or are not
// all available, held while paused.
func summary(p *databasev1alpha1.MyDatabasePooler, rolledOut bool, alignErr error) conditions.Summary {
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

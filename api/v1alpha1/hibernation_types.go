package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// HibernationPhase is how far a hibernation has got (docs/hibernation.md).
// +kubebuilder:validation:Enum=Preparing;Stopping;Hibernated;Resumed
type HibernationPhase string

const (
	// HibernationPreparing: the primary is being moved to ordinal 0 (a
	// switchover), whose pod the StatefulSet stops last, so that no
	// replica takes over while the servers stop and the same primary
	// resumes; a backup that runs is waited for.
	HibernationPreparing HibernationPhase = "Preparing"
	// HibernationStopping: the StatefulSet is scaled to zero; every server
	// stops cleanly (a checkpoint, then a shutdown), the replicas first.
	HibernationStopping HibernationPhase = "Stopping"
	// HibernationHibernated: no server runs; the volumes, the Secrets, the
	// Services and the WAL archive are kept.
	HibernationHibernated HibernationPhase = "Hibernated"
	// HibernationResumed: spec.hibernate is false again and the servers
	// start on the data they stopped with.
	HibernationResumed HibernationPhase = "Resumed"
)

// HibernationStatus reports the last hibernation.
type HibernationStatus struct {
	// phase is how far it has got.
	Phase HibernationPhase `json:"phase"`
	// primary is the pod that was the primary when the servers stopped,
	// and is again when they resume.
	// +optional
	Primary string `json:"primary,omitempty"`
	// startedAt is when spec.hibernate asked for it.
	StartedAt metav1.Time `json:"startedAt"`
	// hibernatedAt is when the last server stopped.
	// +optional
	HibernatedAt *metav1.Time `json:"hibernatedAt,omitempty"`
	// resumedAt is when spec.hibernate was set back to false.
	// +optional
	ResumedAt *metav1.Time `json:"resumedAt,omitempty"`
	// message says what it waits for, while it stops.
	// +optional
	Message string `json:"message,omitempty"`
}

// ConditionHibernated is present (True) while no server runs for
// spec.hibernate; on the way there, Reconciling (reason Hibernating) says
// what the hibernation waits for.
const ConditionHibernated = "Hibernated"

const (
	// ReasonHibernating is Reconciling's reason while the servers stop for
	// a hibernation.
	ReasonHibernating = "Hibernating"
	// ReasonHibernated is the reason of Ready (True: what the spec asks
	// for is done) and Hibernated while no server runs.
	ReasonHibernated = "Hibernated"
)

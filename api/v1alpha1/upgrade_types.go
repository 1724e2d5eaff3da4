package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// MajorUpgradePhase is how far a major version upgrade has got
// (docs/upgrade.md).
type MajorUpgradePhase string

const (
	// MajorUpgradePreparing: the primary is being moved to ordinal 0 (a
	// switchover), whose pod the StatefulSet stops last, so that no replica
	// can take over while the servers stop.
	MajorUpgradePreparing MajorUpgradePhase = "Preparing"
	// MajorUpgradeStopping: the StatefulSet is scaled to zero; every server
	// stops cleanly.
	MajorUpgradeStopping MajorUpgradePhase = "Stopping"
	// MajorUpgradeUpgrading: the upgrade Job runs pg_upgrade on the
	// primary's volume.
	MajorUpgradeUpgrading MajorUpgradePhase = "Upgrading"
	// MajorUpgradeRecloning: the data is on the new major; the replicas'
	// volumes (on the old major) are deleted, and the servers start on the
	// new major, the replicas cloning the primary.
	MajorUpgradeRecloning MajorUpgradePhase = "Recloning"
	// MajorUpgradeSucceeded: done.
	MajorUpgradeSucceeded MajorUpgradePhase = "Succeeded"
	// MajorUpgradeFailed: see message and oldDataUntouched.
	MajorUpgradeFailed MajorUpgradePhase = "Failed"
	// MajorUpgradeCancelled: it failed with the old data untouched, and
	// spec.version was then set back to the major the data is on.
	MajorUpgradeCancelled MajorUpgradePhase = "Cancelled"
)

// MajorUpgradeStatus reports the last major version upgrade.
type MajorUpgradeStatus struct {
	// from is the version the data was on (status.currentVersion then).
	From string `json:"from"`
	// to is spec.version the upgrade goes to.
	To string `json:"to"`
	// fromImage is the image the servers ran before; they run it again if
	// the upgrade fails with the old data untouched.
	FromImage string `json:"fromImage"`
	// toImage is the image of the new major.
	ToImage string `json:"toImage"`
	// primary is the pod whose volume holds the data that is upgraded.
	Primary string `json:"primary"`
	// phase is how far it has got.
	Phase MajorUpgradePhase `json:"phase"`
	// jobName is the upgrade Job.
	// +optional
	JobName string `json:"jobName,omitempty"`
	// message says what it waits for, or why it failed.
	// +optional
	Message string `json:"message,omitempty"`
	// oldDataUntouched is set on a failure before the point of no return:
	// the servers run the old major again on their old data.
	// +optional
	OldDataUntouched bool `json:"oldDataUntouched,omitempty"`
	// generation is the MyDatabase's metadata.generation the upgrade was
	// started for (at a failure: the one it failed at). A failure with the
	// old data untouched is retried when spec.version changes to another
	// later version than to; one past the point of no return, where the
	// servers are stopped anyway, by any new generation that asks for a
	// later major.
	Generation int64 `json:"generation"`
	// leaseTransitions is the primary Lease's leaseTransitions when the
	// data was upgraded. Until the Lease changes hands, the upgraded
	// primary, whose data alone is left once the replicas' volumes are
	// deleted, may be elected without other candidates (a required
	// synchronous quorum's electors could never stand: they have no data).
	// +optional
	LeaseTransitions *int32 `json:"leaseTransitions,omitempty"`
	// timeline is the timeline the upgraded data started on: above every
	// timeline of the old cluster and of its archive, so that archiving
	// goes on at the same path (docs/backup.md, "Backups across a major
	// upgrade").
	// +optional
	Timeline int64 `json:"timeline,omitempty"`
	// startedAt is when it started.
	StartedAt metav1.Time `json:"startedAt"`
	// finishedAt is when it succeeded or failed.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
}

// Major upgrade reasons and the exit codes of the upgrade Job's container.
const (
	// ReasonMajorUpgrade: a major version upgrade is under way (Reconciling).
	ReasonMajorUpgrade = "MajorUpgrade"
	// ReasonMajorUpgradeFailed: it failed (Stalled); the message says why
	// and whether the old data is untouched.
	ReasonMajorUpgradeFailed = "MajorUpgradeFailed"
	// ReasonVersionBelowData: spec.version asks for a major below the one
	// the data is on (Stalled).
	ReasonVersionBelowData = "VersionBelowData"

	// AnnotationUpgradeAttempt on the upgrade Job is the generation of the
	// attempt it belongs to (status.majorUpgrade.generation at its start),
	// so that a Job left by an earlier attempt is never taken for the
	// current one's.
	AnnotationUpgradeAttempt = "database.example.com/upgrade-attempt"
	// ComponentUpgrade labels the upgrade Job and its pod.
	ComponentUpgrade = "upgrade"
)

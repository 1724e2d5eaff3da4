package mydatabase

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
)

// A major version upgrade (docs/upgrade.md). spec.version asking for a
// later major than the data is on (status.currentVersion) starts one;
// status.majorUpgrade records it, and each pass takes the next step from
// that record and what exists, so that a pass interrupted anywhere
// converges on the next:
//
//	Preparing   the primary is moved to ordinal 0 by a switchover: the
//	            StatefulSet stops ordinal 0 last, so no replica is left to
//	            take over once the primary stops;
//	Stopping    the StatefulSet, still on the old image, is scaled to zero
//	            (every server stops cleanly; the claims are kept whatever
//	            the deletionPolicy); an upgrade Job left by an earlier
//	            attempt is deleted;
//	Upgrading   the upgrade Job runs pg_upgrade on ordinal 0's volume
//	            (internal/specs.UpgradeJob, internal/instance upgrade.go);
//	Recloning   the Job succeeded: status.currentVersion is the new
//	            version; the other servers' claims (their data is on the
//	            old major) are deleted;
//	Succeeded   the StatefulSet runs the new image with spec.replicas; the
//	            replicas clone the primary.
//
// A failure before the point of no return (the Job's exit code says so)
// puts the StatefulSet back on the old image with spec.replicas, on the
// untouched data: Failed, Stalled MajorUpgradeFailed with the Job's reason.
// Past it, or when it cannot be known, the servers stay stopped. The next
// generation of the spec that still asks for a later major retries.

// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;patch;delete

// upgradeState is the upgrade part of what a pass computes.
type upgradeState struct {
	status *databasev1alpha1.MajorUpgradeStatus
	// currentVersion, when set, is status.currentVersion from this pass on.
	currentVersion string
	// view is the MyDatabase the StatefulSet is built from, nil for db.
	view *databasev1alpha1.MyDatabase
}

func upgradeActive(up *databasev1alpha1.MajorUpgradeStatus) bool {
	switch {
	case up == nil:
		return false
	case up.Phase == databasev1alpha1.MajorUpgradeSucceeded, up.Phase == databasev1alpha1.MajorUpgradeFailed,
		up.Phase == databasev1alpha1.MajorUpgradeCancelled:
		return false
	}
	return true
}

// failedAndHeld tells whether a failed upgrade still holds: the servers on
// the old major (old data untouched) until spec.version changes to another
// later version, or back to the data's major, which calls it off; stopped
// (past the point of no return) until a new generation asks for a later
// major: the database is down anyway, so any change retries.
func failedAndHeld(up *databasev1alpha1.MajorUpgradeStatus, db *databasev1alpha1.MyDatabase, want, data int) bool {
	if up == nil || up.Phase != databasev1alpha1.MajorUpgradeFailed {
		return false
	}
	if up.OldDataUntouched {
		return want > data && db.Spec.Version == up.To
	}
	return up.Generation == db.Generation || want <= data
}

// majorUpgrade is the component of major version upgrades.
type majorUpgrade struct {
	*kit
	*scope
	out *result[upgradeResult]
}

// upgradeResult is what majorUpgrade hands over to hibernation, servers
// and switchover.
type upgradeResult struct {
	// active: an upgrade is under way, and the other components keep out
	// of its way (hibernations, switchovers and rolling updates).
	active bool
	// view is the MyDatabase the StatefulSet is built from, nil for the
	// MyDatabase itself.
	view *databasev1alpha1.MyDatabase
}

// reconcile starts, advances or reports a major upgrade.
func (r *majorUpgrade) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	up := db.Status.MajorUpgrade.DeepCopy()
	obs.upgrade = &upgradeState{status: up}
	out := r.out.produce()
	defer func() { out.active, out.view = upgradeActive(obs.upgrade.status), obs.upgrade.view }()
	data, want := specs.Major(db.Status.CurrentVersion), specs.Major(db.Spec.Version)
	switch {
	case upgradeActive(up):
		return r.advanceUpgrade(ctx, db, obs)
	case failedAndHeld(up, db, want, data):
		r.stayFailed(db, obs)
		return nil
	case db.Status.CurrentVersion == "" || want == data:
		if up != nil && up.Phase == databasev1alpha1.MajorUpgradeFailed && up.OldDataUntouched {
			up.Phase = databasev1alpha1.MajorUpgradeCancelled
			r.event(db, corev1.EventTypeNormal, "MajorUpgradeCancelled", "spec.version is back to %s: the failed upgrade to %s is called off",
				db.Spec.Version, up.To)
		}
		return nil
	case want < data:
		view := db.DeepCopy()
		// What runs now keeps running: the image of the data's major.
		view.Spec.Version, view.Spec.Image = db.Status.CurrentVersion, containerImage(r.sts)
		if up != nil && specs.Major(up.To) == data {
			view.Spec.Image = up.ToImage
		}
		obs.upgrade.view = view
		obs.stalled = &blocker{Reason: databasev1alpha1.ReasonVersionBelowData, Message: fmt.Sprintf(
			"spec.version %s is below PostgreSQL %d, which the data is on (status.currentVersion %s): data cannot be downgraded; "+
				"set spec.version back to %d", db.Spec.Version, data, db.Status.CurrentVersion, data)}
		return nil
	}
	return r.startUpgrade(ctx, db, obs)
}

// startUpgrade records a new upgrade.
func (r *majorUpgrade) startUpgrade(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation) error {
	from := db.DeepCopy()
	from.Spec.Version = db.Status.CurrentVersion
	fromImage := specs.Image(from)
	if img := containerImage(r.sts); img != "" {
		fromImage = img
	}
	obs.upgrade.status = &databasev1alpha1.MajorUpgradeStatus{
		From: db.Status.CurrentVersion, To: db.Spec.Version, FromImage: fromImage, ToImage: specs.Image(db),
		Primary: specs.BootstrapPod(db), Phase: databasev1alpha1.MajorUpgradePreparing, JobName: specs.UpgradeJobName(db),
		Generation: db.Generation, StartedAt: metav1.NewTime(r.Clock.Now()),
	}
	r.event(db, corev1.EventTypeNormal, "MajorUpgradeStarted", "Upgrading PostgreSQL from %s to %s", db.Status.CurrentVersion, db.Spec.Version)
	return r.advanceUpgrade(ctx, db, obs)
}

// advanceUpgrade takes the next step of the upgrade in progress.
func (r *majorUpgrade) advanceUpgrade(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation) error {
	up := obs.upgrade.status
	stopped := upgradeView(db, up.From, up.FromImage, true)
	switch up.Phase {
	case databasev1alpha1.MajorUpgradePreparing:
		// The servers keep running the old image until they stop: a pod
		// restarted meanwhile must not start the new major on old data.
		obs.upgrade.view = upgradeView(db, up.From, up.FromImage, false)
		return r.prepareUpgrade(ctx, db, obs)
	case databasev1alpha1.MajorUpgradeStopping:
		obs.upgrade.view = stopped
		return r.stopForUpgrade(ctx, db, obs)
	case databasev1alpha1.MajorUpgradeUpgrading:
		obs.upgrade.view = stopped
		return r.runUpgradeJob(ctx, db, obs)
	case databasev1alpha1.MajorUpgradeRecloning:
		return r.recloneReplicas(ctx, db, obs)
	}
	return nil
}

// upgradeView is db with the servers on version and image, and stopped
// (scaledToZero) when stop is set.
func upgradeView(db *databasev1alpha1.MyDatabase, version, image string, stop bool) *databasev1alpha1.MyDatabase {
	v := db.DeepCopy()
	v.Spec.Version, v.Spec.Image = version, image
	if stop {
		return scaledToZero(v)
	}
	return v
}

// scaledToZero is db with no server, the claims retained on scale-down
// whatever the deletionPolicy: a scale to zero under Delete would
// otherwise delete the very data the servers stopped for.
func scaledToZero(db *databasev1alpha1.MyDatabase) *databasev1alpha1.MyDatabase {
	v := db.DeepCopy()
	v.Spec.Replicas = ptr.To[int32](0)
	v.Spec.DeletionPolicy = databasev1alpha1.DeletionPolicyRetain
	return v
}

func containerImage(sts *appsv1.StatefulSet) string {
	if sts == nil {
		return ""
	}
	for _, c := range sts.Spec.Template.Spec.Containers {
		if c.Name == specs.ContainerName {
			return c.Image
		}
	}
	return ""
}

func (r *majorUpgrade) upgradeWaits(obs *observation, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	st := obs.upgrade.status
	st.Message = msg
	obs.waiting = &blocker{Reason: databasev1alpha1.ReasonMajorUpgrade, Message: fmt.Sprintf("upgrading PostgreSQL from %s to %s (%s): %s",
		st.From, st.To, st.Phase, msg)}
}

// prepareUpgrade makes ordinal 0 the primary, through the Lease as a
// switchover does, unless it is already.
func (r *majorUpgrade) prepareUpgrade(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation) error {
	up := obs.upgrade.status
	primary := r.primaryPod()
	if primary == up.Primary {
		if err := r.askSwitchover(ctx, r.lease, ""); err != nil {
			return err
		}
		up.Phase = databasev1alpha1.MajorUpgradeStopping
		obs.upgrade.view = upgradeView(db, up.From, up.FromImage, true)
		return r.stopForUpgrade(ctx, db, obs)
	}
	if r.Clock.Since(up.StartedAt.Time) > switchoverTimeout(db) {
		r.failUpgrade(db, obs, true, fmt.Sprintf("%s did not become the primary within %s (the primary, %s, hands over only to a "+
			"streaming replica less than 16 MiB behind); nothing was stopped", up.Primary, switchoverTimeout(db), primary))
		return nil
	}
	r.upgradeWaits(obs, "switching over from %s to %s, which the StatefulSet stops last", primary, up.Primary)
	obs.recheck(switchoverTimeout(db))
	return r.askSwitchover(ctx, r.lease, up.Primary)
}

// stopForUpgrade waits until every server has stopped.
func (r *majorUpgrade) stopForUpgrade(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation) error {
	up := obs.upgrade.status
	pods, err := r.serverPods(ctx, db)
	if err != nil {
		return err
	}
	if n := len(pods); n > 0 {
		r.upgradeWaits(obs, "stopping the servers cleanly, %s last: %d still running: %s", up.Primary, n, stillRunning(pods))
		return nil
	}
	up.Phase = databasev1alpha1.MajorUpgradeUpgrading
	return r.runUpgradeJob(ctx, db, obs)
}

func (r *majorUpgrade) upgradeJob(ctx context.Context, db *databasev1alpha1.MyDatabase) (*batchv1.Job, error) {
	job := &batchv1.Job{}
	err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: specs.UpgradeJobName(db)}, job)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, objectError("get", job, specs.UpgradeJobName(db), err)
	case !metav1.IsControlledBy(job, db):
		return nil, nil
	}
	return job, nil
}

// runUpgradeJob creates the upgrade Job and follows it. A Job of an
// earlier attempt (another generation) is deleted first: it may hold a
// failure of then, and its pod template the images of then.
func (r *majorUpgrade) runUpgradeJob(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation) error {
	up := obs.upgrade.status
	job, err := r.upgradeJob(ctx, db)
	if err != nil {
		return err
	}
	if job != nil && job.Annotations[databasev1alpha1.AnnotationUpgradeAttempt] != strconv.FormatInt(up.Generation, 10) {
		r.upgradeWaits(obs, "deleting the upgrade Job %s of an earlier attempt", job.Name)
		if !job.DeletionTimestamp.IsZero() {
			return nil
		}
		return r.deleteExact(ctx, job)
	}
	if job == nil {
		// Created once: a Job's pod template is immutable, and the spec
		// may change while it runs.
		job = &batchv1.Job{}
		if err := r.applyChild(ctx, obs, specs.UpgradeJob(db, up, r.Platform), job); err != nil {
			return err
		}
		r.upgradeWaits(obs, "running pg_upgrade on %s's volume (Job %s)", up.Primary, job.Name)
		return nil
	}
	switch {
	case jobCondition(job, batchv1.JobComplete):
		timeline, err := r.upgradedTimeline(ctx, db, job)
		if err != nil {
			return err
		}
		up.Phase, up.Timeline = databasev1alpha1.MajorUpgradeRecloning, timeline
		if r.lease != nil {
			up.LeaseTransitions = ptr.To(ptr.Deref(r.lease.Spec.LeaseTransitions, 0))
		}
		obs.upgrade.currentVersion = up.To
		r.event(db, corev1.EventTypeNormal, "MajorUpgradeDataUpgraded", "The data of %s is on PostgreSQL %s", up.Primary, up.To)
		return r.recloneReplicas(ctx, db, obs)
	case jobCondition(job, batchv1.JobFailed):
		untouched, reason, err := r.jobOutcome(ctx, db, job)
		if err != nil {
			return err
		}
		r.failUpgrade(db, obs, untouched, reason)
		return nil
	}
	r.upgradeWaits(obs, "running pg_upgrade on %s's volume (Job %s)%s", up.Primary, job.Name, r.jobPodWaiting(ctx, db, job))
	return nil
}

func jobCondition(job *batchv1.Job, typ batchv1.JobConditionType) bool {
	for _, c := range job.Status.Conditions {
		if c.Type == typ && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func (r *majorUpgrade) jobPods(ctx context.Context, db *databasev1alpha1.MyDatabase, job *batchv1.Job) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	labels := specs.Labels(db, databasev1alpha1.ComponentUpgrade)
	labels[batchv1.JobNameLabel], labels[batchv1.ControllerUidLabel] = job.Name, string(job.UID)
	if err := r.listOwn(ctx, pods, db, labels); err != nil {
		return nil, objectError("list", &corev1.Pod{}, "", err)
	}
	return pods.Items, nil
}

// jobPodWaiting says why the Job's pod does not run yet, if it says.
func (r *majorUpgrade) jobPodWaiting(ctx context.Context, db *databasev1alpha1.MyDatabase, job *batchv1.Job) string {
	pods, err := r.jobPods(ctx, db, job)
	if err != nil {
		return ""
	}
	for _, pod := range pods {
		for _, cs := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
			if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "PodInitializing" && w.Reason != "ContainerCreating" {
				return fmt.Sprintf("; pod %s, container %s: %s %s", pod.Name, cs.Name, w.Reason, quote(w.Message))
			}
		}
	}
	return ""
}

// jobOutcome reads why the upgrade Job failed from its newest pod that ran
// the upgrade container: its exit code says whether the old data is
// untouched, its termination message why. A pod whose upgrade container
// never ran (its old image's init container failed) touched nothing; one
// that was killed may have been anywhere, so the data counts as touched.
func (r *majorUpgrade) jobOutcome(ctx context.Context, db *databasev1alpha1.MyDatabase, job *batchv1.Job) (bool, string, error) {
	pods, err := r.jobPods(ctx, db, job)
	if err != nil {
		return false, "", err
	}
	var newest *corev1.ContainerStateTerminated
	var newestAt time.Time
	reason := ""
	for i := range pods {
		for _, cs := range pods[i].Status.InitContainerStatuses {
			if t := cs.State.Terminated; t != nil && t.ExitCode != 0 && reason == "" {
				reason = fmt.Sprintf("init container %s of pod %s exited with %d: %s", cs.Name, pods[i].Name, t.ExitCode, strings.TrimSpace(t.Message))
			}
		}
		for _, cs := range pods[i].Status.ContainerStatuses {
			if t := cs.State.Terminated; cs.Name == specs.UpgradeContainerName && t != nil && (newest == nil || t.FinishedAt.After(newestAt)) {
				newest, newestAt = t, t.FinishedAt.Time
			}
		}
	}
	switch {
	case newest != nil && newest.ExitCode == contract.UpgradeExitOldDataUntouched:
		return true, strings.TrimSpace(newest.Message), nil
	case newest != nil:
		return false, fmt.Sprintf("the upgrade container exited with %d (%s): %s", newest.ExitCode, newest.Reason, strings.TrimSpace(newest.Message)), nil
	case reason != "":
		return true, reason, nil
	}
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobFailed {
			return false, fmt.Sprintf("Job %s failed (%s: %s) and no pod of it says why", job.Name, c.Reason, c.Message), nil
		}
	}
	return false, fmt.Sprintf("Job %s failed", job.Name), nil
}

// upgradedTimeline is the timeline the Job's pod says the upgraded data
// starts on (its termination message), 0 when none says.
func (r *majorUpgrade) upgradedTimeline(ctx context.Context, db *databasev1alpha1.MyDatabase, job *batchv1.Job) (int64, error) {
	pods, err := r.jobPods(ctx, db, job)
	if err != nil {
		return 0, err
	}
	for i := range pods {
		for _, cs := range pods[i].Status.ContainerStatuses {
			if t := cs.State.Terminated; cs.Name == specs.UpgradeContainerName && t != nil && t.ExitCode == 0 {
				if n, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(t.Message), contract.UpgradeTimelinePrefix), 10, 64); err == nil {
					return n, nil
				}
			}
		}
	}
	return 0, nil
}

// failUpgrade ends the upgrade in failure. With the old data untouched the
// servers run the old image again; otherwise they stay stopped.
func (r *majorUpgrade) failUpgrade(db *databasev1alpha1.MyDatabase, obs *observation, untouched bool, reason string) {
	up := obs.upgrade.status
	up.Phase, up.OldDataUntouched, up.Message = databasev1alpha1.MajorUpgradeFailed, untouched, quote(reason)
	up.FinishedAt = new(metav1.NewTime(r.Clock.Now()))
	up.Generation = db.Generation
	r.event(db, corev1.EventTypeWarning, "MajorUpgradeFailed", "Upgrading PostgreSQL from %s to %s failed: %s", up.From, up.To, up.Message)
	r.stayFailed(db, obs)
}

// stayFailed reports a failed upgrade until a new generation retries it.
func (r *majorUpgrade) stayFailed(db *databasev1alpha1.MyDatabase, obs *observation) {
	up := obs.upgrade.status
	if up.OldDataUntouched {
		obs.upgrade.view = upgradeView(db, up.From, up.FromImage, false)
		obs.stalled = &blocker{Reason: databasev1alpha1.ReasonMajorUpgradeFailed, Message: fmt.Sprintf(
			"upgrading PostgreSQL from %s to %s failed before the point of no return, so the data is untouched and the servers run %s again: %s. "+
				"Fix the cause, then retry by setting spec.version to another later version (such as a minor of %d), or to %s and, "+
				"once Ready, to %s again; setting it to %s alone calls the upgrade off",
			up.From, up.To, up.From, up.Message, specs.Major(up.To), up.From, up.To, up.From)}
		return
	}
	obs.upgrade.view = upgradeView(db, up.From, up.FromImage, true)
	obs.stalled = &blocker{Reason: databasev1alpha1.ReasonMajorUpgradeFailed, Message: fmt.Sprintf(
		"upgrading PostgreSQL from %s to %s failed, possibly past the point of no return, so the servers stay stopped: %s. "+
			"A new generation of the spec that asks for %s runs the upgrade again, which finishes it or says where it stands; "+
			"recovering by hand is described in docs/upgrade.md", up.From, up.To, up.Message, up.To)}
}

// recloneReplicas deletes the claims of every server but the upgraded
// primary (their data is on the old major; each replica clones the
// primary afresh), then lets the StatefulSet run the new image.
func (r *majorUpgrade) recloneReplicas(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation) error {
	up := obs.upgrade.status
	obs.upgrade.view = upgradeView(db, up.To, up.ToImage, true)
	claims := &corev1.PersistentVolumeClaimList{}
	selector := specs.InstanceLabels(db)
	selector[databasev1alpha1.LabelOwnerUID] = string(db.UID)
	if err := r.listOwn(ctx, claims, db, selector); err != nil {
		return objectError("list", &corev1.PersistentVolumeClaim{}, "", err)
	}
	keep := specs.DataVolumeName + "-" + up.Primary
	var left []string
	for i := range claims.Items {
		pvc := &claims.Items[i]
		if pvc.Name == keep || !strings.HasPrefix(pvc.Name, specs.DataVolumeName+"-"+specs.StatefulSetName(db)+"-") {
			continue
		}
		left = append(left, pvc.Name)
		if pvc.DeletionTimestamp.IsZero() {
			if err := r.deleteExact(ctx, pvc); err != nil {
				return err
			}
		}
	}
	if len(left) > 0 {
		r.upgradeWaits(obs, "deleting the replicas' volumes, on PostgreSQL %s: %s", up.From, strings.Join(left, ", "))
		return nil
	}
	up.Phase, up.Message = databasev1alpha1.MajorUpgradeSucceeded, fmt.Sprintf("the data is on PostgreSQL %s; the replicas clone the primary", up.To)
	up.FinishedAt = new(metav1.NewTime(r.Clock.Now()))
	obs.upgrade.view = nil
	r.event(db, corev1.EventTypeNormal, "MajorUpgradeSucceeded", "Upgraded PostgreSQL from %s to %s", up.From, up.To)
	job, err := r.upgradeJob(ctx, db)
	if err != nil || job == nil {
		return err
	}
	return r.deleteExact(ctx, job)
}

package mydatabase

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
)

// A switchover is carried out by the instance managers (internal/instance,
// switchover.go): the operator only asks, by naming the target in the
// primary Lease (AnnotationSwitchoverTo), and follows the Lease until the
// target holds it. status.targetPrimary and status.switchover say where it
// stands; events mark its start and end. Two things start one: a new
// spec.switchover.requestedAt, and a rolling update whose last outdated
// pod is the primary (rollout.go).

// switchoverTimeout is how long a switchover may take before the operator
// gives up and withdraws it: the primary hands over only once the target
// streams less than 16 MiB behind, which a replica under heavy write load
// or just restarted may need a while for.
func switchoverTimeout(db *databasev1alpha1.MyDatabase) time.Duration {
	return max(30*time.Second, 6*time.Duration(specs.LeaseDurationSeconds(db))*time.Second)
}

// switchoverState is the switchover part of the status a pass computes.
type switchoverState struct {
	target string // status.targetPrimary
	status *databasev1alpha1.SwitchoverStatus
}

// switchover is the component of planned switchovers.
type switchover struct {
	*kit
	*scope
	upgrade input[upgradeResult] // a switchover waits for an upgrade
	// hibernation asks for a switchover to ordinal 0 before the servers
	// stop, and none runs once they stop.
	hibernation input[hibernationResult]
	out         *result[switchoverResult]
}

// switchoverResult is what switchover hands over to rollout and
// managerUpdate.
type switchoverResult struct {
	// idle: no switchover runs, and one may start (none does during an
	// upgrade or once a hibernation has stopped the servers).
	idle bool
}

// reconcile follows a switchover in progress to its end, or starts the
// one a hibernation or spec.switchover asks for.
func (r *switchover) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	out := r.out.produce()
	hibernation := r.hibernation.get()
	if r.upgrade.get().active || hibernation.stopped {
		return nil // a major upgrade moves the primary itself (upgrade.go); stopped servers cannot
	}
	obs.switchover = &switchoverState{target: db.Status.TargetPrimary, status: db.Status.Switchover.DeepCopy()}
	sw := obs.switchover
	defer func() { out.idle = sw.target == "" }()
	now := r.Clock.Now()
	if sw.target != "" {
		// The target holds the Lease first, then promotes and says so in
		// its report: only then is it the primary.
		handedOver := r.holder() == sw.target
		promoted := false
		if rep := podReports(r.pods)[sw.target]; rep != nil {
			promoted = rep.Role == databasev1alpha1.RolePrimary && rep.Ready
		}
		switch {
		case handedOver && promoted:
			r.finishSwitchover(ctx, db, obs, databasev1alpha1.SwitchoverSucceeded, fmt.Sprintf("%s is the primary", sw.target))
		case r.holder() != "" && !handedOver && sw.status != nil && sw.status.From != "" && r.holder() != sw.status.From:
			// A failover elected another instance meanwhile; its first
			// take of the Lease dropped the request. Handing over again
			// would move the primary a second time: the request is
			// withdrawn, and the person decides.
			r.finishSwitchover(ctx, db, obs, databasev1alpha1.SwitchoverFailed, fmt.Sprintf(
				"a failover made %s the primary before %s took over from %s: the switchover is withdrawn; request it again "+
					"(a new spec.switchover.requestedAt) if %s should still be the primary", r.holder(), sw.target, sw.status.From, sw.target))
		case sw.status == nil || sw.status.StartedAt == nil || now.Sub(sw.status.StartedAt.Time) >= switchoverTimeout(db):
			message := fmt.Sprintf("%s did not take over within %s, %s stays the primary: the primary hands over only to a replica "+
				"that streams from it less than 16 MiB behind; its instance manager's log says why it did not",
				sw.target, switchoverTimeout(db), r.primaryPod())
			if handedOver {
				message = fmt.Sprintf("%s holds the primary Lease but has not reported as the primary within %s: "+
					"its instance manager's log says why", sw.target, switchoverTimeout(db))
			}
			r.finishSwitchover(ctx, db, obs, databasev1alpha1.SwitchoverFailed, message)
		case handedOver:
			// Its report, when it changes, wakes a pass.
			sw.status.Message = fmt.Sprintf("%s holds the primary Lease and is being promoted", sw.target)
			obs.recheck(sw.status.StartedAt.Add(switchoverTimeout(db)).Sub(now))
			return nil
		default:
			obs.recheck(sw.status.StartedAt.Add(switchoverTimeout(db)).Sub(now))
			return r.askSwitchover(ctx, r.lease, sw.target)
		}
		return r.askSwitchover(ctx, r.lease, "")
	}
	if to := hibernation.switchoverTo; to != "" && to != r.holder() {
		if target, why := pickTarget(r.scope, to); why == "" {
			_, err := startSwitchover(ctx, r.kit, r.scope, obs, target, databasev1alpha1.SwitchoverHibernation)
			return err
		}
		return nil // the hibernation says why in status
	}
	req := db.Spec.Switchover
	if req == nil || (sw.status != nil && sw.status.RequestedAt != nil && sw.status.RequestedAt.Equal(&req.RequestedAt)) {
		return r.askSwitchover(ctx, r.lease, "") // nothing asked: withdraw what a lost pass may have left
	}
	target, why := pickTarget(r.scope, req.To)
	if why != "" {
		sw.status = &databasev1alpha1.SwitchoverStatus{RequestedAt: req.RequestedAt.DeepCopy(), Reason: databasev1alpha1.SwitchoverRequested,
			From: r.primaryPod(), To: req.To, Phase: databasev1alpha1.SwitchoverFailed, Message: why,
			StartedAt: new(metav1.NewTime(now)), FinishedAt: new(metav1.NewTime(now))}
		r.event(db, corev1.EventTypeWarning, "SwitchoverFailed", "Switchover refused: %s", why)
		return nil
	}
	_, err := startSwitchover(ctx, r.kit, r.scope, obs, target, databasev1alpha1.SwitchoverRequested)
	return err
}

// startSwitchover asks the primary to hand over to target, and records it
// in the switchover part of the observation, which the switchover component
// made this pass. The switchover component starts one for spec.switchover
// and a hibernation, the rollout component (after it) for a rolling
// update. It tells whether it asked: not when target is the primary
// already.
func startSwitchover(ctx context.Context, k *kit, s *scope, obs *observation, target, reason string) (bool, error) {
	db, sw := s.db, obs.switchover
	now := metav1.NewTime(k.Clock.Now())
	st := &databasev1alpha1.SwitchoverStatus{Reason: reason, From: s.primaryPod(), To: target, StartedAt: &now}
	if sw.status != nil {
		st.RequestedAt = sw.status.RequestedAt
	}
	if reason == databasev1alpha1.SwitchoverRequested {
		st.RequestedAt = db.Spec.Switchover.RequestedAt.DeepCopy()
	}
	sw.status = st
	if target == s.primaryPod() {
		st.Phase, st.Message, st.FinishedAt = databasev1alpha1.SwitchoverSucceeded, target+" is the primary already", &now
		return false, nil
	}
	if err := k.askSwitchover(ctx, s.lease, target); err != nil {
		return false, err
	}
	st.Phase, st.Message = databasev1alpha1.SwitchoverRunning, fmt.Sprintf("asked %s to hand over to %s", st.From, target)
	sw.target = target
	obs.recheck(switchoverTimeout(db))
	k.event(db, corev1.EventTypeNormal, "SwitchoverStarted", "Switching over from %s to %s (%s)", st.From, target, reason)
	return true, nil
}

// finishSwitchover ends the switchover in progress.
func (r *switchover) finishSwitchover(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation, phase databasev1alpha1.SwitchoverPhase, message string) {
	sw := obs.switchover
	if sw.status == nil {
		sw.status = &databasev1alpha1.SwitchoverStatus{To: sw.target}
	}
	sw.status.Phase, sw.status.Message, sw.status.FinishedAt = phase, message, new(metav1.NewTime(r.Clock.Now()))
	sw.target = ""
	if phase == databasev1alpha1.SwitchoverSucceeded {
		held := ""
		if r.lease != nil {
			held = r.pausedPoolers(ctx, sw.status, contract.ParsePoolersPaused(r.lease.Annotations[contract.AnnotationPoolersPaused]))
			sw.status.Message += held
		}
		r.event(db, corev1.EventTypeNormal, "SwitchedOver", "Switched over from %s to %s%s", sw.status.From, sw.status.To, held)
	} else {
		r.event(db, corev1.EventTypeWarning, "SwitchoverFailed", "Switchover failed: %s", message)
	}
}

// pausedPoolers names in st the poolers whose pods paused for the
// switchover (paused: pods by pooler ID, as the primary counted them), and
// returns what to add to its message: each pooler's pods, by name where
// one of the database's poolers has the ID (the rest, of pooler managers
// before IDs or of a pooler deleted since, as a count).
func (r *switchover) pausedPoolers(ctx context.Context, st *databasev1alpha1.SwitchoverStatus, paused map[string]int) string {
	st.Poolers = nil
	if len(paused) == 0 {
		return ""
	}
	poolers := &databasev1alpha1.MyDatabasePoolerList{}
	if err := r.List(ctx, poolers, client.InNamespace(r.db.Namespace)); err != nil {
		log(ctx).Error(err, "listing the poolers that paused for the switchover; counting their pods alone")
	}
	for _, p := range poolers.Items {
		id := contract.PoolerID(string(p.UID))
		if n := paused[id]; n > 0 && p.Spec.Database == r.db.Name {
			st.Poolers = append(st.Poolers, databasev1alpha1.SwitchoverPooler{Name: p.Name, PausedPods: int32(n)})
			delete(paused, id)
		}
	}
	slices.SortFunc(st.Poolers, func(a, b databasev1alpha1.SwitchoverPooler) int { return strings.Compare(a.Name, b.Name) })
	said := make([]string, 0, len(st.Poolers)+1)
	for _, p := range st.Poolers {
		said = append(said, fmt.Sprintf("%d of %s", p.PausedPods, p.Name))
	}
	if rest := sumOf(paused); rest > 0 && len(said) > 0 {
		said = append(said, fmt.Sprintf("%d more", rest))
	} else if rest > 0 {
		said = append(said, fmt.Sprint(rest))
	}
	return fmt.Sprintf("; the poolers held their clients' transactions through it (PgBouncer pods paused: %s)", strings.Join(said, ", "))
}

func sumOf(counts map[string]int) int {
	sum := 0
	for _, n := range counts {
		sum += n
	}
	return sum
}

// askSwitchover makes the Lease name target (none when empty), the
// instance managers' channel: a merge patch of the one annotation, which
// the holder's next renewal takes in its stride.
func (r *kit) askSwitchover(ctx context.Context, lease *coordinationv1.Lease, target string) error {
	if lease == nil || lease.Annotations[contract.AnnotationSwitchoverTo] == target {
		return nil
	}
	var value any
	if target != "" {
		value = target
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]any{contract.AnnotationSwitchoverTo: value}}})
	if err != nil {
		return err
	}
	err = r.Patch(ctx, lease, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(FieldOwner))
	if apierrors.IsNotFound(err) {
		return nil
	}
	return objectError("patch", lease, lease.Name, err)
}

// pickTarget chooses the instance a switchover makes the primary: the one
// named, if it is a ready replica, else the ready replica with the most
// WAL. It returns why there is none.
func pickTarget(s *scope, named string) (string, string) {
	primary := s.primaryPod()
	if r := reportOf(s.pods, primary); r != nil && r.Replica != nil {
		return "", fmt.Sprintf("%s is the designated primary of a replica MyDatabase: it takes no writes, so a switchover has nothing to hand over; "+
			"delete its pod to move the role (another instance is elected designated primary)", primary)
	}
	instances := instanceStatuses(s.pods, primary)
	var names []string
	best, bestLSN := "", uint64(0)
	for _, in := range instances {
		names = append(names, in.Name)
		if named != "" && in.Name != named {
			continue
		}
		if named == primary && in.Name == primary {
			return primary, ""
		}
		lsn, err := contract.LSN(in.LSN)
		if !in.Ready || in.Role != databasev1alpha1.RoleReplica || err != nil {
			if named != "" {
				return "", fmt.Sprintf("%s is not a ready replica (role %q, ready %t): only a streaming replica can take over", named, in.Role, in.Ready)
			}
			continue
		}
		if best == "" || lsn > bestLSN {
			best, bestLSN = in.Name, lsn
		}
	}
	switch {
	case best != "":
		return best, ""
	case named != "" && !slices.Contains(names, named):
		return "", fmt.Sprintf("%s is not an instance of this MyDatabase that reports its state (instances: %s)", named, strings.Join(names, ", "))
	}
	return "", "no replica is ready to take over"
}

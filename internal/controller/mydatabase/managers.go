package mydatabase

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
)

// In-place instance manager updates. The pod template names the
// operator's image for the init container that installs the instance
// manager, so a new operator version would change the template, and the
// rollout would restart every server. Instead, with
// spec.instanceManagerUpdate InPlace (the default):
//
//   - the servers component keeps the image the live template names while
//     nothing else in the template changes (AnnotationPodTemplate, on the
//     template and every pod), so the StatefulSet gets no new revision and
//     no pod is restarted;
//   - this component streams the operator's own instance manager into each
//     pod whose instance manager reports another version
//     (contract.ReplaceCommand), one pod at a time, replicas first, only
//     while every server is ready, no rollout or switchover runs and no
//     base backup is being taken; the instance manager re-executes itself
//     as it and keeps PostgreSQL running (internal/instance, reexec.go).
//
// A pod created later from the kept template starts the older instance
// manager and is brought up to date the same way; the next change of the
// template for another reason takes the new image. Pods whose instance
// manager cannot be replaced in place (it reports no version: made by an
// operator before this one) are rolled, as with Restart.

// +kubebuilder:rbac:groups=core,resources=pods/exec,verbs=create

// ManagerReplacer replaces a pod's running instance manager by the
// operator's own.
type ManagerReplacer interface {
	// Digest is the operator's instance manager's version (the SHA-256 of
	// its binary).
	Digest() string
	// Replace runs contract.ReplaceCommand in the pod's database container
	// with the binary on its standard input, and returns once the new
	// instance manager runs.
	Replace(ctx context.Context, pod *corev1.Pod) error
}

// replaceRetry is how long a pod whose replacement failed is left alone.
const replaceRetry = 5 * time.Minute

// managerUpdate is the component of in-place instance manager updates.
type managerUpdate struct {
	*kit
	*scope
	servers    input[serversResult] // the applied StatefulSet
	switchover input[switchoverResult]
	rollout    input[rolloutResult] // a switchover the rollout started
}

// reconcile replaces the next outdated instance manager, if the servers
// are settled.
func (r *managerUpdate) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	sts := r.servers.get().applied
	if r.Managers == nil || !inPlace(db) || !settled(db, sts, r.switchover.get().idle && !r.rollout.get().switchover) {
		return nil
	}
	want := r.Managers.Digest()
	revision := sts.Status.UpdateRevision
	var outdated []*corev1.Pod
	for i := range r.pods {
		pod := &r.pods[i]
		if !pod.DeletionTimestamp.IsZero() || !specs.PodReady(pod) || pod.Labels[appsv1.ControllerRevisionHashLabelKey] != revision {
			return nil // the rollout goes first, and nothing while a server is down
		}
		rep, err := contract.Parse(pod.Annotations[contract.AnnotationInstance])
		if err == nil && rep.Backup != nil && rep.Backup.Phase == string(databasev1alpha1.BackupRunning) {
			return nil // an instance manager re-executes only once its backup ends
		}
		switch {
		case err != nil || rep.Manager == "":
		case rep.Manager == want:
			r.replacements.forget(pod.UID)
		case !r.replacements.replaced(pod.UID, want):
			outdated = append(outdated, pod)
		}
	}
	if len(outdated) == 0 || int32(len(r.pods)) != specs.Replicas(db) {
		return nil
	}
	// Replicas first, the highest ordinal first; the primary last.
	primary := r.primaryPod()
	slices.Reverse(outdated)
	slices.SortStableFunc(outdated, func(a, b *corev1.Pod) int {
		return boolOrder(a.Name == primary) - boolOrder(b.Name == primary)
	})
	pod := outdated[0]
	if !r.replacements.due(pod.UID, r.Clock.Now()) {
		obs.recheck(replaceRetry)
		return nil
	}
	from := managerVersion(pod)
	start := time.Now()
	log(ctx).Info("Replacing an instance manager in place", "pod", pod.Name, "from", short(from), "to", short(want))
	err := r.Managers.Replace(ctx, pod)
	log(ctx).Info("Replacing an instance manager in place: done", "pod", pod.Name, "took", time.Since(start).String(), "error", err)
	if err != nil {
		r.replacements.failed(pod.UID, r.Clock.Now())
		r.event(db, corev1.EventTypeWarning, "InstanceManagerReplaceFailed",
			"Replacing the instance manager of %s in place (%s to %s) failed, tried again in %s: %v", pod.Name, short(from), short(want), replaceRetry, err)
		obs.recheck(replaceRetry)
		return nil
	}
	r.replacements.succeeded(pod.UID, want)
	r.event(db, corev1.EventTypeNormal, "InstanceManagerReplaced",
		"Replaced the instance manager of %s in place (%s to %s); PostgreSQL kept running", pod.Name, short(from), short(want))
	return nil
}

func boolOrder(b bool) int {
	if b {
		return 1
	}
	return 0
}

// inPlace tells whether db's instance managers are replaced in place.
func inPlace(db *databasev1alpha1.MyDatabase) bool {
	return db.Spec.InstanceManagerUpdate != databasev1alpha1.InstanceManagerUpdateRestart
}

// settled tells whether the servers run as the spec asks and no switchover
// runs or waits (idle, switchoverResult): a rolling update or a
// replacement may take its next step.
func settled(db *databasev1alpha1.MyDatabase, sts *appsv1.StatefulSet, idle bool) bool {
	return sts != nil && sts.Status.ObservedGeneration >= sts.Generation && sts.Status.UpdateRevision != "" &&
		ptr.Deref(sts.Spec.Replicas, 0) == specs.Replicas(db) && // servers stopping (an upgrade, a hibernation)
		idle
}

// managerVersion is the version a pod's instance manager reports, "" for
// none (no report, or one that cannot be replaced in place).
func managerVersion(pod *corev1.Pod) string {
	r, err := contract.Parse(pod.Annotations[contract.AnnotationInstance])
	if err != nil {
		return ""
	}
	return r.Manager
}

// keptInstanceManagerImage is the instance manager image the StatefulSet
// keeps: the live template's, when the template would change in nothing
// else and every instance manager that reports can be replaced in place;
// "" for the operator's own. While the StatefulSet is being replaced
// (alignVolumes) its pods stand for its template.
func (r *servers) keptInstanceManagerImage(want *databasev1alpha1.MyDatabase) string {
	if r.Managers == nil || !inPlace(want) {
		return ""
	}
	var live *corev1.PodTemplateSpec
	switch {
	case r.sts != nil:
		live = &r.sts.Spec.Template
	case len(r.pods) > 0:
		live = &corev1.PodTemplateSpec{ObjectMeta: r.pods[0].ObjectMeta, Spec: r.pods[0].Spec}
	default:
		return ""
	}
	// The operator's own image already (every pass once converged): the
	// digest, a second build of the template, is not needed.
	image := specs.InstanceManagerImage(&live.Spec)
	if image == "" || image == r.Platform.Image() ||
		live.Annotations[databasev1alpha1.AnnotationPodTemplate] != specs.PodTemplateDigest(want) {
		return ""
	}
	for i := range r.pods {
		if _, reported := r.pods[i].Annotations[contract.AnnotationInstance]; reported && managerVersion(&r.pods[i]) == "" {
			return ""
		}
	}
	return image
}

// replacements remembers, per pod, the last replacement: when it failed,
// or the version it brought, which the pod's report in the cache may not
// show yet (a replacement asked again would cost another transfer).
type replacements struct {
	mu       sync.Mutex
	failedAt map[types.UID]time.Time
	done     map[types.UID]string
}

// due tells whether pod may be replaced now: not within replaceRetry of
// a failure.
func (f *replacements) due(pod types.UID, now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	at, ok := f.failedAt[pod]
	return !ok || now.Sub(at) >= replaceRetry
}

// replaced tells whether pod was brought to version digest.
func (f *replacements) replaced(pod types.UID, digest string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.done[pod] == digest
}

func (f *replacements) failed(pod types.UID, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failedAt == nil {
		f.failedAt = map[types.UID]time.Time{}
	}
	f.failedAt[pod] = now
	delete(f.done, pod)
}

func (f *replacements) succeeded(pod types.UID, digest string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done == nil {
		f.done = map[types.UID]string{}
	}
	f.done[pod] = digest
	delete(f.failedAt, pod)
}

// forget drops what is known of pod, once its report says it all.
func (f *replacements) forget(pod types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.failedAt, pod)
	delete(f.done, pod)
}

// execReplacer replaces instance managers through the pods' exec
// subresource: the API server and the kubelet authenticate and authorise
// the operator, and nothing in the pod listens for it.
type execReplacer struct {
	config *rest.Config
	client rest.Interface
	binary string
	digest string
}

// NewManagerReplacer replaces instance managers by the binary at path (the
// one the operator's image holds at /instance); nil, with the reason, when
// it cannot be read.
func NewManagerReplacer(config *rest.Config, client rest.Interface, path string) (ManagerReplacer, error) {
	digest, err := contract.Digest(path)
	if err != nil {
		return nil, fmt.Errorf("the instance manager to replace running ones with: %w", err)
	}
	return &execReplacer{config: config, client: client, binary: path, digest: digest}, nil
}

func (e *execReplacer) Digest() string { return e.digest }

func (e *execReplacer) Replace(ctx context.Context, pod *corev1.Pod) error {
	in, err := os.Open(e.binary)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	req := e.client.Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: specs.ContainerName,
			Command: contract.ReplaceCommand(specs.InstanceManagerPath, e.digest), Stdin: true, Stdout: true, Stderr: true},
			scheme.ParameterCodec)
	// SPDY, not client-go's WebSocket executor, whose heartbeat goroutine
	// can outlive the stream and log a failed ping every few seconds.
	exec, err := remotecommand.NewSPDYExecutor(e.config, "POST", req.URL())
	if err != nil {
		return err
	}
	// The replacement takes a second or two; the reconcile of the
	// MyDatabase waits for it, so not long.
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: in, Stdout: &out, Stderr: &out}); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

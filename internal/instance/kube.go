package instance

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	watchapi "k8s.io/apimachinery/pkg/watch"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
)

// kube is what the instance manager asks of the API server: its Lease,
// its own pod, and its peers' reports.
type kube struct {
	pods    corev1client.PodInterface
	secrets corev1client.SecretInterface // the password Secrets (rotate.go)
	leases  coordinationv1client.LeaseInterface
	// watches and podWatches have no timeout: a watch lasts minutes.
	watches    coordinationv1client.LeaseInterface
	podWatches corev1client.PodInterface
	c          Config
	// timeout bounds every request, so that a hung connection cannot hold
	// the HA loop past a renew deadline.
	timeout time.Duration
}

func newKube(c Config, timeout time.Duration) (*kube, error) {
	var cfg *rest.Config
	var err error
	if c.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("API server configuration: %w", err)
	}
	cfg.UserAgent = "mydatabase-instance/" + c.PodName
	cfg.Timeout = timeout
	// The HA loop paces itself; client-side throttling would only add
	// delay to a renewal.
	cfg.QPS, cfg.Burst = -1, 0
	core, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	coord, err := coordinationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	long := rest.CopyConfig(cfg)
	long.Timeout = 0
	watches, err := coordinationv1client.NewForConfig(long)
	if err != nil {
		return nil, err
	}
	podWatches, err := corev1client.NewForConfig(long)
	if err != nil {
		return nil, err
	}
	return &kube{pods: core.Pods(c.Namespace), secrets: core.Secrets(c.Namespace), leases: coord.Leases(c.Namespace),
		watches: watches.Leases(c.Namespace), podWatches: podWatches.Pods(c.Namespace), c: c, timeout: timeout}, nil
}

// watchLease sends every version of the Lease it sees, the newest only
// when the reader lags, until ctx ends: renewals date the Lease's expiry
// exactly, and a new holder (a switchover's target, the candidates after a
// primary gave the Lease up) acts at once rather than at its next tick.
func (k *kube) watchLease(ctx context.Context, seen chan *coordinationv1.Lease) {
	watchNamed(ctx, k.watches.Watch, k.c.LeaseName, k.timeout, func(lease *coordinationv1.Lease) *coordinationv1.Lease { return lease }, seen)
}

// watchOwnAnnotation sends the value of this pod's annotation key (empty
// when it has none) whenever the pod changes, until ctx ends; only the
// newest value when the reader lags.
func (k *kube) watchOwnAnnotation(ctx context.Context, key string, values chan string) {
	watchNamed(ctx, k.podWatches.Watch, k.c.PodName, k.timeout, func(pod *corev1.Pod) string { return pod.Annotations[key] }, values)
}

// watchNamed watches the object name with watch, again whenever the watch
// ends (after a pause of retry when it cannot start), until ctx ends, and
// sends what pick makes of each version it sees: the newest only, when
// the reader lags.
func watchNamed[T runtime.Object, V any](ctx context.Context, watch func(context.Context, metav1.ListOptions) (watchapi.Interface, error),
	name string, retry time.Duration, pick func(T) V, out chan V) {
	for ctx.Err() == nil {
		w, err := watch(ctx, metav1.ListOptions{
			FieldSelector:  fields.OneTermEqualSelector("metadata.name", name).String(),
			TimeoutSeconds: new(int64(300)),
		})
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(retry):
			}
			continue
		}
		for ev := range w.ResultChan() {
			obj, ok := ev.Object.(T)
			if !ok {
				continue
			}
			select { // drop a version not read yet: this one is newer
			case <-out:
			default:
			}
			out <- pick(obj)
		}
		w.Stop()
	}
}

// publish writes the report on this pod, and its role label, in one
// patch: primary only while it runs a ready primary, so that a stopped or
// fenced former primary leaves the read-write Service at once.
func (k *kube) publish(ctx context.Context, r contract.Report) error {
	role := databasev1alpha1.RoleReplica
	if r.Role == databasev1alpha1.RolePrimary && r.Ready {
		role = databasev1alpha1.RolePrimary
	}
	meta := map[string]any{
		"annotations": map[string]string{contract.AnnotationInstance: r.String()},
		"labels":      map[string]string{databasev1alpha1.LabelRole: role},
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	_, err = k.pods.Patch(ctx, k.c.PodName, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager})
	return err
}

// getLease reads the primary Lease (apiServer).
func (k *kube) getLease(ctx context.Context) (*coordinationv1.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	return k.leases.Get(ctx, k.c.LeaseName, metav1.GetOptions{})
}

// updateLease writes the primary Lease, conditional on its resourceVersion
// (apiServer).
func (k *kube) updateLease(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	return k.leases.Update(ctx, lease, metav1.UpdateOptions{FieldManager: fieldManager})
}

// peer is another instance of the same MyDatabase.
type peer struct {
	name   string
	report *contract.Report // nil when it has not reported or cannot be read
}

// peers lists the other instances and their reports.
func (k *kube) peers(ctx context.Context) ([]peer, error) {
	ctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	list, err := k.pods.List(ctx, metav1.ListOptions{LabelSelector: k.c.PodSelector})
	if err != nil {
		return nil, err
	}
	// Only the pods of this StatefulSet: another MyDatabase's pod may
	// carry this one's labels (contract.PodOrdinal), and a candidacy it
	// published would count in this one's elections.
	set := contract.PodSet(k.c.PodName)
	var out []peer
	for i := range list.Items {
		p := &list.Items[i]
		if _, ok := contract.PodOrdinal(set, p.Name); !ok || p.Name == k.c.PodName {
			continue
		}
		out = append(out, peer{name: p.Name, report: podReport(p)})
	}
	return out, nil
}

// report reads the report of the named pod.
func (k *kube) report(ctx context.Context, pod string) (*contract.Report, error) {
	ctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	p, err := k.pods.Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return podReport(p), nil
}

func podReport(p *corev1.Pod) *contract.Report {
	v, ok := p.Annotations[contract.AnnotationInstance]
	if !ok {
		return nil
	}
	r, err := contract.Parse(v)
	if err != nil {
		return nil
	}
	return &r
}

// fieldManager names the instance manager's writes.
const fieldManager = "mydatabase-instance"

// Command dev-provisioner is a dynamic volume provisioner for the local
// simulated (KWOK) cluster of `make dev` and `make test-e2e`. It is a
// development tool: never run it against a real cluster.
//
// A KWOK cluster has no storage at all, so the PersistentVolumeClaims of a
// MyDatabase would stay Pending forever. This process, running on the
// developer's machine next to the cluster, makes them bind:
//
//   - it creates (once) a default StorageClass whose provisioner is this
//     process, with reclaimPolicy Delete, WaitForFirstConsumer binding and
//     allowVolumeExpansion;
//   - for every claim of that class it creates a local PersistentVolume
//     backed by a directory under --root, pinned to the node the scheduler
//     chose (the data lives on one node, like a local disk);
//   - when such a volume is released (its claim deleted) it removes the
//     directory and the PersistentVolume object;
//   - when a claim bound to such a volume asks for more than it has, it
//     expands it as a CSI resizer and a kubelet would (resize.go).
//
// Why a provisioner rather than a pool of pre-made PersistentVolumes: the
// operator's Delete policy and scale-down delete claims, and a pool's
// Released volumes would never be reclaimed (and would drain the pool), so
// tests could not check that deleted data really goes away. A provisioner
// also sizes every volume as the claim asks, like real clusters do.
//
// Why local volumes rather than hostPath: a kubelet applies a pod's fsGroup
// to a local volume (group ownership and setgid, as on a real disk), and
// never to a hostPath one. With hostPath, a non-root pod such as
// PostgreSQL's (uid 999) could not write the directory this process creates
// as root; making it 0777, as local-path provisioners do, would give every
// user of the node the data. On the real-pod node (hack/real-node.sh) the
// kubelet runs on this machine, so --root is its local disk.
//
// It is built on sigs.k8s.io/sig-storage-lib-external-provisioner, the
// library behind the Kubernetes SIG Storage external provisioners; it uses
// the same k8s.io modules as the operator.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
)

const defaultProvisionerName = "dev.myoperator.example.com/hostpath"

// programName is its user agent and the managed-by label of its StorageClass.
const programName = "dev-provisioner"

func main() {
	var (
		kubeconfig = flag.String("kubeconfig", os.Getenv("KUBECONFIG"),
			"Path to the kubeconfig of the cluster (default $KUBECONFIG).")
		name = flag.String("provisioner-name", defaultProvisionerName,
			"Provisioner name, as in StorageClass.provisioner.")
		root = flag.String("root", "",
			"Directory under which the volumes' directories are created (required).")
		storageClass = flag.String("storage-class", "standard",
			"Name of the default StorageClass to create for this provisioner; empty to create none.")
		qps   = flag.Float64("kube-api-qps", 50, "Client-side limit of API requests per second.")
		burst = flag.Int("kube-api-burst", 100, "Client-side burst of API requests.")
	)
	klog.InitFlags(nil)
	flag.Parse()
	if *root == "" {
		fmt.Fprintln(os.Stderr, "dev-provisioner: --root is required")
		os.Exit(2)
	}
	if err := run(*kubeconfig, *name, *root, *storageClass, float32(*qps), *burst); err != nil {
		klog.ErrorS(err, "dev-provisioner failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
}

func run(kubeconfig, name, root, storageClass string, qps float32, burst int) error {
	root, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("creating the volume root %s: %w", root, err)
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig}, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig %q: %w", kubeconfig, err)
	}
	cfg.UserAgent = programName
	cfg.QPS, cfg.Burst = qps, burst
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if storageClass != "" {
		if err := ensureStorageClass(ctx, client, storageClass, name); err != nil {
			return err
		}
	}

	p := &localProvisioner{root: root}
	pc := controller.NewProvisionController(ctx, client, name, p,
		// One process per cluster, started and stopped by its script: no
		// leader election (it would also need a namespace to hold a lease).
		controller.LeaderElection(false),
		// Retry quickly: a simulated cluster has nothing slow to wait for.
		controller.ExponentialBackOffOnError(false),
		controller.FailedProvisionThreshold(0),
		controller.FailedDeleteThreshold(0),
		controller.ResyncPeriod(30*time.Second),
	)
	klog.InfoS("Starting dev-provisioner", "provisioner", name, "root", root,
		"storageClass", storageClass, "host", cfg.Host)
	resized := make(chan error, 1)
	go func() { resized <- runResizer(ctx, client, name, 30*time.Second) }()
	pc.Run(ctx)
	stop() // the provisioner ended: so does the resizer
	if err := <-resized; err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("the volume resizer: %w", err)
	}
	klog.InfoS("Stopped dev-provisioner")
	return nil
}

// ensureStorageClass creates the default StorageClass of this provisioner
// unless one of that name exists, and lets one it made earlier expand
// volumes (a cluster of `make dev` started before the resizer existed). It
// retries while the API server starts.
func ensureStorageClass(ctx context.Context, client kubernetes.Interface, name, provisioner string) error {
	sc := &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Annotations: map[string]string{
				"storageclass.kubernetes.io/is-default-class": "true",
			},
			Labels: map[string]string{"app.kubernetes.io/managed-by": programName},
		},
		Provisioner:       provisioner,
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
		// The resizer (resize.go) expands the volumes.
		AllowVolumeExpansion: new(true),
	}
	return wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{})
		switch {
		case err == nil:
			klog.InfoS("Created default StorageClass", "name", name)
			return true, nil
		case apierrors.IsAlreadyExists(err):
			if err := allowExpansion(ctx, client, sc); err != nil {
				klog.InfoS("Retrying", "err", err)
				return false, nil
			}
			return true, nil
		default:
			klog.InfoS("Waiting for the API server to create the StorageClass", "err", err)
			return false, nil
		}
	})
}

// localProvisioner backs each volume with a directory under root. On a KWOK
// node no container ever mounts it; the directory only makes the volume's
// life cycle visible on disk. On the real-pod node the kubelet mounts it.
type localProvisioner struct {
	root string
}

var _ controller.Provisioner = &localProvisioner{}

func (p *localProvisioner) Provision(_ context.Context, opts controller.ProvisionOptions) (
	*corev1.PersistentVolume, controller.ProvisioningState, error) {
	if opts.PVC.Spec.Selector != nil {
		return nil, controller.ProvisioningFinished, errors.New("claims with a selector are not supported")
	}
	if opts.SelectedNodeName == "" {
		// A local volume must name its node: only WaitForFirstConsumer
		// binding tells which one.
		return nil, controller.ProvisioningFinished, fmt.Errorf(
			"storage class %s must use volumeBindingMode WaitForFirstConsumer", opts.StorageClass.Name)
	}
	path := filepath.Join(p.root, opts.PVName)
	// Owned by root and 0755 until a pod mounts it: the kubelet then gives
	// it the pod's fsGroup.
	if err := os.MkdirAll(path, 0o755); err != nil {
		return nil, controller.ProvisioningFinished, err
	}
	reclaim := corev1.PersistentVolumeReclaimDelete
	if opts.StorageClass.ReclaimPolicy != nil {
		reclaim = *opts.StorageClass.ReclaimPolicy
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: opts.PVName},
		Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeReclaimPolicy: reclaim,
			AccessModes:                   opts.PVC.Spec.AccessModes,
			VolumeMode:                    opts.PVC.Spec.VolumeMode,
			MountOptions:                  opts.StorageClass.MountOptions,
			Capacity: corev1.ResourceList{
				corev1.ResourceStorage: opts.PVC.Spec.Resources.Requests[corev1.ResourceStorage],
			},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				Local: &corev1.LocalVolumeSource{Path: path},
			},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{opts.SelectedNodeName},
				}}}},
			}},
		},
	}
	klog.InfoS("Provisioned volume", "pv", opts.PVName, "pvc", klog.KObj(opts.PVC),
		"node", opts.SelectedNodeName, "path", path)
	return pv, controller.ProvisioningFinished, nil
}

func (p *localProvisioner) Delete(_ context.Context, pv *corev1.PersistentVolume) error {
	if pv.Spec.Local == nil {
		return &controller.IgnoredError{Reason: "not a local volume"}
	}
	path := filepath.Clean(pv.Spec.Local.Path)
	if filepath.Dir(path) != p.root || !strings.HasPrefix(filepath.Base(path), "pvc-") {
		return &controller.IgnoredError{Reason: fmt.Sprintf("path %s is not a volume under %s", path, p.root)}
	}
	if err := os.RemoveAll(path); err != nil {
		return err
	}
	klog.InfoS("Deleted volume", "pv", pv.Name, "path", path)
	return nil
}

// allowExpansion sets allowVolumeExpansion on the class of that name if this
// provisioner made it and it lacks it; a class of anyone else is left alone.
func allowExpansion(ctx context.Context, client kubernetes.Interface, want *storagev1.StorageClass) error {
	live, err := client.StorageV1().StorageClasses().Get(ctx, want.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if live.Provisioner != want.Provisioner || live.Labels["app.kubernetes.io/managed-by"] != programName ||
		ptr.Deref(live.AllowVolumeExpansion, false) {
		return nil
	}
	live.AllowVolumeExpansion = new(true)
	if _, err := client.StorageV1().StorageClasses().Update(ctx, live, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("letting StorageClass %s expand volumes: %w", live.Name, err)
	}
	klog.InfoS("StorageClass now allows volume expansion", "name", live.Name)
	return nil
}

package main

import (
	"cmp"
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	// Import all Kubernetes client auth plugins (e.g. Azure, GCP, OIDC, etc.)
	// to ensure that exec-entrypoint and run can make use of them.
	_ "k8s.io/client-go/plugin/pkg/client/auth"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/controller/mydatabase"
	"example.com/myoperator/internal/controller/mydatabasebackup"
	"example.com/myoperator/internal/controller/mydatabasepooler"
	"example.com/myoperator/internal/leader"
	"example.com/myoperator/internal/memlimit"
	"example.com/myoperator/internal/metrics"
	"example.com/myoperator/internal/specs"
	// +kubebuilder:scaffold:imports
)

var (
	scheme   = runtime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))

	utilruntime.Must(databasev1alpha1.AddToScheme(scheme))
	// +kubebuilder:scaffold:scheme
}

// nolint:gocyclo
func main() {
	var metricsAddr string
	var metricsCertPath, metricsCertName, metricsCertKey string
	var enableLeaderElection bool
	var probeAddr string
	var secureMetrics bool
	var enableHTTP2 bool
	var tlsOpts []func(*tls.Config)
	var workers int
	var qps float64
	var burst int
	flag.IntVar(&workers, "workers", 8, "How many MyDatabases are reconciled in parallel (see docs/benchmarks.md).")
	flag.Float64Var(&qps, "kube-api-qps", 100,
		"Client-side limit of API requests per second, per kind (see docs/benchmarks.md).")
	flag.IntVar(&burst, "kube-api-burst", 200, "Client-side burst of API requests, per kind.")
	var compression bool
	flag.BoolVar(&compression, "kube-api-compression", false,
		"Let the API server gzip its large answers. Off by default: next to the API server, "+
			"gzip costs it and the operator CPU for bandwidth a cluster network does not lack (see docs/benchmarks.md). "+
			"Turn it on when the operator runs far from the API server.")
	var instanceImage, instanceBinary string
	flag.StringVar(&instanceBinary, "instance-manager-binary", "",
		"The instance manager that replaces older ones in running pods, without restarting PostgreSQL "+
			"(spec.instanceManagerUpdate InPlace). Empty: the file instance beside this executable, as in the operator's image; "+
			"without it, a new operator version restarts the pods.")
	flag.StringVar(&instanceImage, "instance-manager-image",
		envOr("INSTANCE_MANAGER_IMAGE", specs.DefaultInstanceManagerImage),
		"Image holding the instance manager (/instance) that every database pod's init container copies: "+
			"this operator's own image. Defaults to $INSTANCE_MANAGER_IMAGE, which config/manager sets to the operator's image.")
	var poolerImage string
	flag.StringVar(&poolerImage, "pooler-image", envOr("POOLER_IMAGE", specs.DefaultPoolerImage),
		"PgBouncer image of a MyDatabasePooler that names none (spec.image); pgbouncer must be on its PATH. Defaults to $POOLER_IMAGE.")
	var watchNamespace string
	flag.StringVar(&watchNamespace, "watch-namespace", os.Getenv("WATCH_NAMESPACE"),
		"Comma-separated namespaces whose MyDatabases this operator manages; empty: all namespaces. "+
			"Defaults to $WATCH_NAMESPACE (config/namespaced sets it to the operator's own namespace).")
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "The address the metrics endpoint binds to. "+
		"Use :8443 for HTTPS or :8080 for HTTP, or leave as 0 to disable the metrics service.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "The address the probe endpoint binds to.")
	flag.BoolVar(&enableLeaderElection, "leader-elect", false,
		"Enable leader election for controller manager. "+
			"Enabling this will ensure there is only one active controller manager.")
	var leaseDuration, renewDeadline, retryPeriod time.Duration
	var leaderElectNamespace string
	flag.DurationVar(&leaseDuration, "leader-elect-lease-duration", 15*time.Second,
		"How long after the leader's last renewal another replica may take over.")
	flag.DurationVar(&renewDeadline, "leader-elect-renew-deadline", 10*time.Second,
		"How long the leader may go without renewing before it stops writing and exits; less than the lease duration.")
	flag.DurationVar(&retryPeriod, "leader-elect-retry-period", 2*time.Second,
		"How often the leader renews the lease, and the other replicas try to acquire it.")
	flag.StringVar(&leaderElectNamespace, "leader-elect-namespace", "",
		"Namespace of the leader election Lease; empty: the operator's own namespace, in a cluster.")
	flag.BoolVar(&secureMetrics, "metrics-secure", true,
		"If set, the metrics endpoint is served securely via HTTPS. Use --metrics-secure=false to use HTTP instead.")
	flag.StringVar(&metricsCertPath, "metrics-cert-path", "",
		"The directory that contains the metrics server certificate.")
	flag.StringVar(&metricsCertName, "metrics-cert-name", "tls.crt", "The name of the metrics server certificate file.")
	flag.StringVar(&metricsCertKey, "metrics-cert-key", "tls.key", "The name of the metrics server key file.")
	flag.BoolVar(&enableHTTP2, "enable-http2", false,
		"If set, HTTP/2 will be enabled for the metrics server")
	// JSON at info and above, as a cluster's log pipeline wants it;
	// --zap-devel (make run passes it) logs for a person at a terminal.
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))

	// if the enable-http2 flag is false (the default), http/2 should be disabled
	// due to its vulnerabilities. More specifically, disabling http/2 will
	// prevent from being vulnerable to the HTTP/2 Stream Cancellation and
	// Rapid Reset CVEs. For more information see:
	// - https://github.com/advisories/GHSA-qppj-fm5r-hxr3
	// - https://github.com/advisories/GHSA-4374-p667-p6c8
	disableHTTP2 := func(c *tls.Config) {
		setupLog.Info("Disabling HTTP/2")
		c.NextProtos = []string{"http/1.1"}
	}

	if !enableHTTP2 {
		tlsOpts = append(tlsOpts, disableHTTP2)
	}

	// Metrics endpoint is enabled in 'config/default/kustomization.yaml'. The Metrics options configure the server.
	// More info:
	// - https://pkg.go.dev/sigs.k8s.io/controller-runtime@v0.25.0/pkg/metrics/server
	// - https://book.kubebuilder.io/reference/metrics.html
	metricsServerOptions := metricsserver.Options{
		BindAddress:   metricsAddr,
		SecureServing: secureMetrics,
		TLSOpts:       tlsOpts,
	}

	if secureMetrics {
		// FilterProvider is used to protect the metrics endpoint with authn/authz.
		// These configurations ensure that only authorized users and service accounts
		// can access the metrics endpoint. The RBAC are configured in 'config/rbac/kustomization.yaml'. More info:
		// https://pkg.go.dev/sigs.k8s.io/controller-runtime@v0.25.0/pkg/metrics/filters#WithAuthenticationAndAuthorization
		metricsServerOptions.FilterProvider = filters.WithAuthenticationAndAuthorization
	}

	// Without --metrics-cert-path, controller-runtime serves metrics with a
	// self-signed certificate: fine for a first install, not for production.
	if len(metricsCertPath) > 0 {
		setupLog.Info("Initializing metrics certificate watcher using provided certificates",
			"metrics-cert-path", metricsCertPath, "metrics-cert-name", metricsCertName, "metrics-cert-key", metricsCertKey)

		metricsServerOptions.CertDir = metricsCertPath
		metricsServerOptions.CertName = metricsCertName
		metricsServerOptions.KeyName = metricsCertKey
	}

	namespaces := splitNamespaces(watchNamespace)
	if soft := memlimit.SoftMemoryLimit(memlimit.CgroupMemoryFiles); soft > 0 {
		setupLog.Info("Go soft memory limit at 90% of the container's", "bytes", soft)
	}
	setupLog.Info("Watching", "namespaces", cmp.Or(strings.Join(namespaces, ","), "all"))

	if enableLeaderElection && (renewDeadline >= leaseDuration || retryPeriod >= renewDeadline) {
		setupLog.Error(nil, "Leader election needs --leader-elect-retry-period < "+
			"--leader-elect-renew-deadline < --leader-elect-lease-duration",
			"retryPeriod", retryPeriod, "renewDeadline", renewDeadline, "leaseDuration", leaseDuration)
		os.Exit(1)
	}

	cfg := ctrl.GetConfigOrDie()
	cfg.QPS, cfg.Burst = float32(qps), burst
	cfg.DisableCompression = cfg.DisableCompression || !compression // a kubeconfig's disable-compression still holds
	poolers, err := requireCRD(cfg)
	if err != nil {
		setupLog.Error(err, "Cannot start")
		os.Exit(1)
	}
	if !poolers {
		setupLog.Info("The MyDatabasePooler CRD is not installed: poolers are not managed. Apply it (make install, " +
			"or charts/myoperator/crds/: helm upgrade does not), then restart the operator")
	}

	const leaderElectionID = "myoperator.database.example.com"
	var leaseLock resourcelock.Interface // nil without leader election
	if enableLeaderElection {
		lease, err := leader.NewLease(cfg, leaderElectNamespace, leaderElectionID, renewDeadline)
		if err != nil {
			setupLog.Error(err, "Cannot set up leader election")
			os.Exit(1)
		}
		leaseLock = lease
		setupLog.Info("Leader election", "lease", lease.Describe(), "identity", lease.Identity())
		// Fence every write of the manager, the event broadcaster's too; the
		// lease's own client, built above, stays unfenced.
		cfg.Wrap(lease.WrapTransport)
	}

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsServerOptions,
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         enableLeaderElection,
		LeaderElectionID:       leaderElectionID,
		// Fences writes too: see internal/leader.
		LeaderElectionResourceLockInterface: leaseLock,
		LeaseDuration:                       &leaseDuration,
		RenewDeadline:                       &renewDeadline,
		RetryPeriod:                         &retryPeriod,
		// The process exits as soon as the manager stops, so releasing the
		// lease on the way out is safe and lets a successor start at once.
		LeaderElectionReleaseOnCancel: true,
		Cache:                         mydatabase.CacheOptions(cfg, namespaces...),
	})
	if err != nil {
		setupLog.Error(err, "Failed to start manager")
		os.Exit(1)
	}

	managers, err := managerReplacer(cfg, instanceBinary)
	if err != nil {
		setupLog.Info("Instance managers are not replaced in place: a new operator version restarts the database pods", "reason", err.Error())
	}
	platform := specs.Platform{InstanceManagerImage: instanceImage, PoolerImageDefault: poolerImage}
	if err := (&mydatabase.Reconciler{
		Client:      mgr.GetClient(),
		APIReader:   mgr.GetAPIReader(),
		Recorder:    mgr.GetEventRecorder("mydatabase-controller"),
		NewPassword: specs.RandomPassword,
		Clock:       clock.RealClock{},
		SecretSync:  mydatabase.DefaultSecretSync,
		Metrics:     metrics.New(crmetrics.Registry),
		Platform:    platform,
		Managers:    managers,
		Poolers:     poolers,
	}).SetupWithManager(mgr, workers); err != nil {
		setupLog.Error(err, "Failed to create controller", "controller", "mydatabase")
		os.Exit(1)
	}
	if err := (&mydatabasebackup.Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("mydatabasebackup-controller"),
		Clock:     clock.RealClock{},
		Platform:  platform,
	}).SetupWithManager(mgr); err != nil {
		setupLog.Error(err, "Failed to create controller", "controller", "mydatabasebackup")
		os.Exit(1)
	}
	if poolers {
		if err := (&mydatabasepooler.Reconciler{
			Client:    mgr.GetClient(),
			APIReader: mgr.GetAPIReader(),
			Recorder:  mgr.GetEventRecorder("mydatabasepooler-controller"),
			Clock:     clock.RealClock{},
			Platform:  platform,
		}).SetupWithManager(mgr); err != nil {
			setupLog.Error(err, "Failed to create controller", "controller", "mydatabasepooler")
			os.Exit(1)
		}
	}
	// +kubebuilder:scaffold:builder

	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		setupLog.Error(err, "Failed to set up health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		setupLog.Error(err, "Failed to set up ready check")
		os.Exit(1)
	}

	setupLog.Info("Starting manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		setupLog.Error(err, "Failed to run manager")
		os.Exit(1)
	}
}

// requireCRD fails with an actionable message when the MyDatabase CRD is not
// installed, instead of the controller timing out on "no matches for kind".
// It reports whether the MyDatabasePooler CRD is installed too: an operator
// upgraded before its CRDs (helm upgrade leaves them as they were) runs
// without poolers rather than not at all.
func requireCRD(cfg *rest.Config) (poolers bool, err error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return false, err
	}
	gv := databasev1alpha1.GroupVersion.String()
	resources, err := dc.ServerResourcesForGroupVersion(gv)
	if apierrors.IsNotFound(err) {
		return false, fmt.Errorf("the MyDatabase CRD (%s, kind MyDatabase) is not installed in the cluster at %s: "+
			"run 'make install' (or apply dist/install.yaml), then start the operator again", gv, cfg.Host)
	}
	if err != nil {
		return false, fmt.Errorf("checking for the MyDatabase CRD at %s: %w", cfg.Host, err)
	}
	return slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Kind == "MyDatabasePooler" }), nil
}

// splitNamespaces parses --watch-namespace: names separated by commas,
// blanks and repeats ignored.
func splitNamespaces(list string) []string {
	var out []string
	for ns := range strings.SplitSeq(list, ",") {
		if ns = strings.TrimSpace(ns); ns != "" && !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	return out
}

// envOr returns the environment variable name, or def when it is unset or
// empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// managerReplacer replaces running instance managers by the binary at
// path, by default the instance manager beside this executable.
func managerReplacer(cfg *rest.Config, path string) (mydatabase.ManagerReplacer, error) {
	if path == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		path = filepath.Join(filepath.Dir(self), "instance")
	}
	clients, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return mydatabase.NewManagerReplacer(cfg, clients.CoreV1().RESTClient(), path)
}

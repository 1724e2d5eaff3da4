package reliability

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/prometheus/client_golang/prometheus"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/controller/mydatabase"
	"example.com/myoperator/internal/metrics"
	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
)

func generatedRole(t *testing.T) *rbacv1.ClusterRole {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(raw, role); err != nil {
		t.Fatal(err)
	}
	return role
}

// Scenario 11: the generated RBAC names every verb and resource.
func TestGeneratedRoleHasNoWildcards(t *testing.T) {
	for _, rule := range generatedRole(t).Rules {
		for _, list := range [][]string{rule.Verbs, rule.Resources, rule.APIGroups} {
			for _, v := range list {
				if v == "*" {
					t.Errorf("wildcard in rule %+v", rule)
				}
			}
		}
	}
}

// Scenario 11: the operator, running as a ServiceAccount bound only to the
// generated ClusterRole, goes through the whole lifecycle: its cache's
// list/watch, every write, events, and the deletion policy.
func TestLifecycleWithOnlyTheGeneratedRBAC(t *testing.T) {
	ns := namespace(t)
	role := generatedRole(t)
	role.Name = "myoperator-" + ns
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "myoperator"}}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: sa.Name}},
	}
	createAll(t, role, sa, binding)
	runLifecycle(t, ns, asServiceAccount(sa))
}

func createAll(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, obj := range objs {
		if err := env.Client.Create(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
	}
}

func asServiceAccount(sa *corev1.ServiceAccount) *rest.Config {
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: fmt.Sprintf("system:serviceaccount:%s:%s", sa.Namespace, sa.Name)}
	return cfg
}

// managerSetup adjusts the operator startManager runs for one test.
type managerSetup struct {
	logger     logr.Logger                       // zero: controller-runtime's default
	wrapClient func(client.Client) client.Client // stands between the reconciler and the API
}

// startManager runs the operator as cmd/main.go wires it (cached client,
// every watch) with cfg's connection and identity, until the test ends.
func startManager(t *testing.T, cfg *rest.Config, cacheOpts cache.Options, setup managerSetup) {
	t.Helper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:     env.Scheme,
		Cache:      cacheOpts,
		Logger:     setup.logger,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: new(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := mgr.GetClient()
	if setup.wrapClient != nil {
		c = setup.wrapClient(c)
	}
	r := &mydatabase.Reconciler{
		Client: c, APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("mydatabase-controller"),
		NewPassword: specs.RandomPassword, Clock: clock.RealClock{}, Metrics: metrics.New(prometheus.NewRegistry()),
	}
	if err := r.SetupWithManager(mgr, 2); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}

// runLifecycle runs an operator with cfg's identity and creates, scales and
// deletes (policy Delete) a MyDatabase in ns; with namespaces, its cache
// watches only those.
func runLifecycle(t *testing.T, ns string, cfg *rest.Config, namespaces ...string) {
	t.Helper()
	ctx := context.Background()
	startManager(t, cfg, mydatabase.CacheOptions(cfg, namespaces...), managerSetup{})

	db := newDB(ns, func(db *databasev1alpha1.MyDatabase) { db.Spec.DeletionPolicy = databasev1alpha1.DeletionPolicyDelete })
	key := client.ObjectKeyFromObject(db)
	waitUntil(t, "children and status", func() error {
		for name, obj := range map[string]client.Object{"pg": &appsv1.StatefulSet{}, "pg-rw": &corev1.Service{}, "pg-credentials": &corev1.Secret{}} {
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
				return err
			}
		}
		if err := env.Client.Get(ctx, key, db); err != nil {
			return err
		}
		return actedOn(db)
	})

	db.Spec.Replicas = ptr.To[int32](3)
	db.Spec.NetworkPolicy.Enabled = true
	if err := env.Client.Update(ctx, db); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the read-only Service, disruption budget and network policy", func() error {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pg-ro"}, &corev1.Service{}); err != nil {
			return err
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pg"}, &networkingv1.NetworkPolicy{}); err != nil {
			return err
		}
		return env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pg"}, &policyv1.PodDisruptionBudget{})
	})
	pvc := dataVolume(t, db)

	if err := env.Client.Delete(ctx, db); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the deletion", func() error {
		if !gone(key) {
			return fmt.Errorf("MyDatabase still there")
		}
		got := &corev1.PersistentVolumeClaim{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pvc), got); err == nil && got.DeletionTimestamp.IsZero() {
			return fmt.Errorf("data volume not deleted")
		} else if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return nil
	})
}

func waitUntil(t *testing.T, what string, check func() error) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, what, check)
}

package mydatabasepooler

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"example.com/myoperator/internal/controller/mydatabase"
	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
)

// The reconciler runs alone in a real manager against a real
// kube-apiserver (envtest), on the operator's cache: no MyDatabase
// controller makes the CA, and no Deployment controller reports pods, so
// the tests play both.

var (
	testConfig *rest.Config
	k8s        client.Client // the test's own client, uncached
)

// testPlatform is the operator's images in the tests.
var testPlatform = specs.Platform{InstanceManagerImage: "operator:test", PoolerImageDefault: "pgbouncer:test"}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	env, err := testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	testConfig, k8s = env.Config, env.Client
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:     env.Scheme,
		Cache:      mydatabase.CacheOptions(env.Config),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: new(true)},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := (&Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("mydatabasepooler-controller"),
		Clock: clock.RealClock{}, Platform: testPlatform, StallRetry: time.Second}).SetupWithManager(mgr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	defer func() { cancel(); <-done }()
	return m.Run()
}

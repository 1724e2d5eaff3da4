package postgres

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/controller/mydatabase"
	"example.com/myoperator/internal/controller/mydatabasebackup"
	"example.com/myoperator/internal/controller/mydatabasepooler"
	"example.com/myoperator/internal/metrics"
	"example.com/myoperator/internal/specs"
)

// operator is the operator's controller, wired as cmd/main.go wires it,
// running in this process against the harness's API server, beside the
// instance managers. envtest runs no StatefulSet controller: the harness
// makes the pods, and the operator sees a StatefulSet that never reports,
// so it restarts no pod; it labels them, reports them in status, and
// carries out what the spec asks of the instance managers (switchovers).
type operator struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// startOperator starts the operator; MYDB_OPERATOR_LOG names a file for
// its log (none by default).
func (c *cluster) startOperator(t *testing.T) *operator {
	t.Helper()
	if path := os.Getenv("MYDB_OPERATOR_LOG"); path != "" {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		ctrl.SetLogger(zap.New(zap.WriteTo(f), zap.UseDevMode(true)))
	} else {
		ctrl.SetLogger(logr.Discard())
	}
	mgr, err := ctrl.NewManager(c.api.Config, ctrl.Options{
		Scheme: c.api.Scheme,
		// Its own namespace only: clusters may share an API server.
		Cache:                  mydatabase.CacheOptions(c.api.Config, c.db.Namespace),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// The same controller name is registered again on every start.
		Controller: config.Controller{SkipNameValidation: new(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &mydatabase.Reconciler{
		Client:      mgr.GetClient(),
		APIReader:   mgr.GetAPIReader(),
		Recorder:    mgr.GetEventRecorder("mydatabase-controller"),
		NewPassword: specs.RandomPassword,
		Clock:       clock.RealClock{},
		Metrics:     metrics.New(prometheus.NewRegistry()),
		Poolers:     true,
	}
	if err := r.SetupWithManager(mgr, 2); err != nil {
		t.Fatal(err)
	}
	if err := (&mydatabasepooler.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Recorder: mgr.GetEventRecorder("mydatabasepooler-controller"), Clock: clock.RealClock{}}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if err := (&mydatabasebackup.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("mydatabasebackup-controller"),
		Clock: clock.RealClock{}}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	op := &operator{cancel: cancel, done: make(chan error, 1)}
	go func() { op.done <- mgr.Start(ctx) }()
	// Stopped with the cluster, not with the subtest that (re)started it.
	c.t.Cleanup(op.stop)
	return op
}

// stop stops the operator and waits for it.
func (op *operator) stop() {
	op.once.Do(func() {
		op.cancel()
		<-op.done
	})
}

// database reads the MyDatabase.
func (c *cluster) database(t *testing.T) *databasev1alpha1.MyDatabase {
	t.Helper()
	db := &databasev1alpha1.MyDatabase{}
	if err := c.api.Client.Get(context.Background(), client.ObjectKeyFromObject(c.db), db); err != nil {
		t.Fatal(err)
	}
	return db
}

// updateDatabase changes the MyDatabase's spec as kubectl edit does: on
// the object as it is now, again if the operator wrote its status in
// between (a conflict).
func (c *cluster) updateDatabase(t *testing.T, change func(*databasev1alpha1.MyDatabase)) {
	t.Helper()
	tries := 0
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		tries++
		db := c.database(t)
		change(db)
		return c.api.Client.Update(context.Background(), db)
	})
	if tries > 1 {
		t.Logf("the MyDatabase changed under the update: %d tries", tries)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// requestSwitchover asks for a switchover to target in spec.switchover,
// as a person does, and waits until the operator reports it done.
func (c *cluster) requestSwitchover(t *testing.T, target *pod) {
	t.Helper()
	// As a person would: only once the status shows the target as a ready
	// replica (a request for one that is not is refused, once).
	eventually(t, time.Minute, target.name+" a ready replica in status.instances", func() (bool, string) {
		for _, in := range c.database(t).Status.Instances {
			if in.Name == target.name {
				return in.Ready && in.Role == databasev1alpha1.RoleReplica, fmt.Sprintf("%+v", in)
			}
		}
		return false, "not listed"
	})
	asked := metav1.NewTime(time.Now().Truncate(time.Second))
	c.updateDatabase(t, func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Switchover = &databasev1alpha1.SwitchoverSpec{To: target.name, RequestedAt: asked}
	})
	eventually(t, time.Minute, "status.switchover Succeeded to "+target.name, func() (bool, string) {
		sw := c.database(t).Status.Switchover
		return sw != nil && sw.RequestedAt != nil && sw.RequestedAt.Equal(&asked) &&
			sw.Phase == databasev1alpha1.SwitchoverSucceeded && sw.To == target.name, fmt.Sprintf("%+v", sw)
	})
}

// eventSaid waits for an event of reason about obj.
func (c *cluster) eventSaid(t *testing.T, obj client.Object, reason string) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("a %s event about %s", reason, obj.GetName()), func() (bool, string) {
		events := &eventsv1.EventList{}
		if err := c.api.Client.List(context.Background(), events, client.InNamespace(obj.GetNamespace())); err != nil {
			return false, err.Error()
		}
		for _, e := range events.Items {
			if e.Regarding.Name == obj.GetName() && e.Reason == reason {
				return true, ""
			}
		}
		return false, fmt.Sprintf("none of %d", len(events.Items))
	})
}

// primaryReported waits until status.currentPrimary is want and, if
// changed, a PrimaryChanged event says so.
func (c *cluster) primaryReported(t *testing.T, want *pod, changed bool) {
	t.Helper()
	eventually(t, time.Minute, "status.currentPrimary "+want.name, func() (bool, string) {
		db := c.database(t)
		events := &eventsv1.EventList{}
		if err := c.api.Client.List(context.Background(), events, client.InNamespace(c.db.Namespace)); err != nil {
			return false, err.Error()
		}
		noted := !changed
		for _, e := range events.Items {
			noted = noted || (e.Reason == "PrimaryChanged" && strings.Contains(e.Note, "now "+want.name))
		}
		return db.Status.CurrentPrimary == want.name && noted, fmt.Sprintf("currentPrimary %s, event %t", db.Status.CurrentPrimary, noted)
	})
}

package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/controller/mydatabase"
	"example.com/myoperator/internal/pki"
	"example.com/myoperator/internal/specs"
)

// newDB is the MyDatabase every benchmark creates: one server, everything
// else defaulted by the API server.
// newDB is a MyDatabase of the benchmarks: PostgreSQL 17 with replicas
// servers (0: the CRD's default, one).
func newDB(ns, name string, replicas int32) *databasev1alpha1.MyDatabase {
	db := &databasev1alpha1.MyDatabase{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       databasev1alpha1.MyDatabaseSpec{Version: "17"},
	}
	if replicas > 0 {
		db.Spec.Replicas = &replicas
	}
	return db
}

func dbName(i int) string { return fmt.Sprintf("db-%05d", i) }

// forEach runs do(i) for i in [0, n) on workers goroutines and returns the
// first error.
func forEach(ctx context.Context, n, workers int, do func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := do(ctx, i); err != nil {
					cancel(err)
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}

// createDBs creates n MyDatabases with workers goroutines: what users do in
// the operator's runs.
func createDBs(ctx context.Context, c client.Client, ns string, n, workers int, replicas int32) error {
	return forEach(ctx, n, workers, func(ctx context.Context, i int) error {
		return retry(ctx, func() error { return c.Create(ctx, newDB(ns, dbName(i), replicas)) })
	})
}

// rawConverge is the baseline: workers goroutines, each taking one
// MyDatabase at a time through the writes the operator makes for it, from
// the same builders and in the same order, with nothing else: create it,
// add the finalizer, create the four Secrets (passwords, CA and server
// certificate, issued as the operator does), apply the ConfigMap, the
// Services (three with replicas), the instance managers' access objects and
// Lease, the StatefulSet (and with replicas the PodDisruptionBudget), patch
// the status.
func rawConverge(ctx context.Context, c client.Client, ns string, n, workers int, replicas int32) error {
	return forEach(ctx, n, workers, func(ctx context.Context, i int) error {
		db := newDB(ns, dbName(i), replicas)
		if err := retry(ctx, func() error { return c.Create(ctx, db) }); err != nil {
			return err
		}
		return rawChildren(ctx, c, db)
	})
}

func rawChildren(ctx context.Context, c client.Client, db *databasev1alpha1.MyDatabase) error {
	patch := client.MergeFromWithOptions(db.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(db, databasev1alpha1.Finalizer)
	if err := c.Patch(ctx, db, patch); err != nil {
		return err
	}
	ca, err := pki.NewCA(specs.CACommonName(db), time.Now())
	if err != nil {
		return err
	}
	server, err := pki.NewServer(ca, specs.ServerCommonName(db), specs.ServerDNSNames(db), time.Now())
	if err != nil {
		return err
	}
	replication, err := pki.NewClient(ca, contract.ReplicationRole, time.Now())
	if err != nil {
		return err
	}
	password, err := specs.RandomPassword()
	if err != nil {
		return err
	}
	credentials := specs.CredentialsSecret(db, password)
	credentials.Data[specs.CACertKey] = ca.Cert // with the CA clients verify with
	for _, s := range []*corev1.Secret{specs.CASecret(db, ca), specs.ReplicationCertSecret(db, replication, ca.Cert),
		specs.ServerCertSecret(db, server, ca.Cert), credentials} {
		if err := c.Create(ctx, s, client.FieldOwner(mydatabase.FieldOwner)); err != nil {
			return err
		}
	}
	children := []runtime.ApplyConfiguration{specs.ConfigMap(db), specs.HeadlessService(db), specs.ReadWriteService(db)}
	if specs.Replicas(db) > 1 {
		children = append(children, specs.ReadOnlyService(db))
	}
	children = append(children, specs.InstanceServiceAccount(db), specs.InstanceRole(db), specs.InstanceRoleBinding(db),
		specs.Lease(db, "", false), specs.StatefulSet(db, specs.Platform{}))
	if specs.Replicas(db) > 1 {
		children = append(children, specs.PodDisruptionBudget(db))
	}
	for _, ac := range children {
		if err := c.Apply(ctx, ac, client.FieldOwner(mydatabase.FieldOwner), client.ForceOwnership); err != nil {
			return err
		}
	}
	before := db.DeepCopy()
	provisioningStatus(db, time.Now())
	return c.Status().Patch(ctx, db, client.MergeFrom(before))
}

// provisioningStatus is the status the operator writes for a MyDatabase
// whose children exist and whose server is not ready yet.
func provisioningStatus(db *databasev1alpha1.MyDatabase, now time.Time) {
	st := &db.Status
	st.Phase = databasev1alpha1.PhaseProvisioning
	st.CurrentPrimary = specs.PrimaryPod(db)
	st.Selector = specs.Selector(db)
	st.CredentialsSecret = specs.CredentialsSecretName(db)
	st.Endpoint = fmt.Sprintf("%s:%d", specs.ReadWriteHost(db), specs.ServicePort(db))
	st.Ready = fmt.Sprintf("0/%d", specs.Replicas(db))
	msg := fmt.Sprintf("0/%d servers ready", specs.Replicas(db))
	for _, typ := range []string{databasev1alpha1.ConditionReconciling, databasev1alpha1.ConditionReady} {
		status := metav1.ConditionFalse
		if typ == databasev1alpha1.ConditionReconciling {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status,
			Reason: databasev1alpha1.ReasonProvisioning, Message: msg, ObservedGeneration: db.Generation,
			LastTransitionTime: metav1.NewTime(now)})
	}
}

// retry retries transient failures (the API server under load may answer
// 429 or time out) a few times.
func retry(ctx context.Context, do func() error) error {
	var err error
	for attempt := range 5 {
		if err = do(); err == nil || ctx.Err() != nil {
			return err
		}
		time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
	}
	return err
}

package mydatabasepooler

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/pki"
	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
)

func eventually(t testing.TB, what string, check func() error) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, what, check)
}

func get(ns, name string, obj client.Object) error {
	return k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj)
}

// condition waits until the pooler's condition typ is status with reason,
// for its current generation, and returns the pooler.
func condition(t *testing.T, ns, name, typ string, status metav1.ConditionStatus, reason string) *databasev1alpha1.MyDatabasePooler {
	t.Helper()
	p := &databasev1alpha1.MyDatabasePooler{}
	eventually(t, fmt.Sprintf("%s %s/%s", typ, status, reason), func() error {
		if err := get(ns, name, p); err != nil {
			return err
		}
		c := meta.FindStatusCondition(p.Status.Conditions, typ)
		if c == nil || c.Status != status || c.Reason != reason || c.ObservedGeneration != p.Generation {
			return fmt.Errorf("conditions %+v", p.Status.Conditions)
		}
		return nil
	})
	return p
}

// databaseCA plays the MyDatabase controller: the CA Secret and the
// server certificate Secret it makes.
func databaseCA(t *testing.T, db *databasev1alpha1.MyDatabase) pki.KeyPair {
	t.Helper()
	ca, err := pki.NewCA(specs.CACommonName(db), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	server, err := pki.NewServer(ca, specs.ServerCommonName(db), specs.ServerDNSNames(db), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*corev1.Secret{specs.CASecret(db, ca), specs.ServerCertSecret(db, server, ca.Cert)} {
		if err := k8s.Create(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	return ca
}

func newPooler(ns, name, database string) *databasev1alpha1.MyDatabasePooler {
	return &databasev1alpha1.MyDatabasePooler{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: databasev1alpha1.MyDatabasePoolerSpec{Database: database}}
}

// TestPoolerLifecycle follows a pooler from before its database exists to
// after it is gone: what it waits for, the children it makes, drift, a
// settings change, scaling down, and its database's deletion.
func TestPoolerLifecycle(t *testing.T) {
	ctx := context.Background()
	ns := testenv.Namespace(t, k8s)
	p := newPooler(ns, "shop-pool", "shop")
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}

	got := condition(t, ns, p.Name, databasev1alpha1.ConditionStalled, metav1.ConditionTrue, databasev1alpha1.ReasonDatabaseNotFound)
	if msg := meta.FindStatusCondition(got.Status.Conditions, databasev1alpha1.ConditionReady).Message; !strings.Contains(msg, `no MyDatabase "shop"`) {
		t.Errorf("Ready's message %q", msg)
	}
	if got.Spec.Type != databasev1alpha1.PoolerReadWrite || got.Spec.PoolMode != databasev1alpha1.PoolModeSession || ptr.Deref(got.Spec.Instances, 0) != 2 {
		t.Errorf("defaults: %+v", got.Spec)
	}

	db := testenv.CreateDatabase(t, k8s, testenv.NewDatabase(ns, "shop"))
	condition(t, ns, p.Name, databasev1alpha1.ConditionStalled, metav1.ConditionTrue, databasev1alpha1.ReasonDatabaseCANotFound)
	ca := databaseCA(t, db)
	got = condition(t, ns, p.Name, databasev1alpha1.ConditionReconciling, metav1.ConditionTrue, databasev1alpha1.ReasonPodsNotReady)
	if meta.FindStatusCondition(got.Status.Conditions, databasev1alpha1.ConditionStalled) != nil {
		t.Errorf("Stalled stays: %+v", got.Status.Conditions)
	}

	t.Run("its children", func(t *testing.T) {
		cm := &corev1.ConfigMap{}
		if err := get(ns, specs.PoolerConfigMapName(p), cm); err != nil {
			t.Fatal(err)
		}
		var c contract.Pooler
		if err := json.Unmarshal([]byte(cm.Data[contract.PoolerConfigKey]), &c); err != nil {
			t.Fatal(err)
		}
		if c.Host != "shop-rw."+ns+".svc" || c.Port != 5432 || c.ClientTLS != "prefer" || c.Settings["pool_mode"] != "session" || len(c.Settings) != 1 {
			t.Errorf("pooler.json %+v", c)
		}
		svc := &corev1.Service{}
		if err := get(ns, p.Name, svc); err != nil {
			t.Fatal(err)
		}
		if svc.Spec.Type != corev1.ServiceTypeClusterIP || svc.Spec.Ports[0].Port != 5432 || svc.Spec.Selector[databasev1alpha1.LabelComponent] != specs.ComponentPooler {
			t.Errorf("Service %+v", svc.Spec)
		}
		dep := &appsv1.Deployment{}
		if err := get(ns, p.Name, dep); err != nil {
			t.Fatal(err)
		}
		pod := dep.Spec.Template.Spec
		if *dep.Spec.Replicas != 2 || pod.InitContainers[0].Image != "operator:test" || pod.Containers[0].Image != "pgbouncer:test" ||
			strings.Join(pod.Containers[0].Command, " ") != specs.InstanceManagerPath+" pooler" ||
			!*pod.Containers[0].SecurityContext.ReadOnlyRootFilesystem || !*pod.SecurityContext.RunAsNonRoot {
			t.Errorf("Deployment %+v", dep.Spec)
		}
		if !metav1.IsControlledBy(dep, got) {
			t.Errorf("the Deployment's owners %+v", dep.OwnerReferences)
		}
		if err := get(ns, p.Name, &policyv1.PodDisruptionBudget{}); err != nil {
			t.Errorf("PodDisruptionBudget: %v", err)
		}
		s := &corev1.Secret{}
		if err := get(ns, specs.PoolerSecretName(p), s); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		if c := pki.CheckServer(s.Data["tls.crt"], s.Data["tls.key"], ca.Cert, specs.PoolerDNSNames(p), now); len(c.Problems) > 0 {
			t.Errorf("the pooler's server certificate: %v", c.Problems)
		}
		if c := pki.CheckClient(s.Data[contract.PoolerClientCertKey], s.Data[contract.PoolerClientKeyKey], ca.Cert, contract.PoolerRole, now); len(c.Problems) > 0 {
			t.Errorf("the pooler's client certificate: %v", c.Problems)
		}
		if string(s.Data["ca.crt"]) != string(ca.Cert) || string(s.Data[contract.PoolerServerCAKey]) != string(ca.Cert) {
			t.Error("the Secret's CAs are not the MyDatabase's")
		}
	})

	t.Run("ready once the pods are available and the primary can log clients in", func(t *testing.T) {
		dep := &appsv1.Deployment{}
		if err := get(ns, p.Name, dep); err != nil {
			t.Fatal(err)
		}
		dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}
		if err := k8s.Status().Update(ctx, dep); err != nil {
			t.Fatal(err)
		}
		condition(t, ns, p.Name, databasev1alpha1.ConditionReconciling, metav1.ConditionTrue, databasev1alpha1.ReasonLookupPending)
		// What the MyDatabase reconciler writes once the primary reports
		// the lookup made (not running here): the watch brings it.
		live := &databasev1alpha1.MyDatabase{}
		if err := get(ns, db.Name, live); err != nil {
			t.Fatal(err)
		}
		meta.SetStatusCondition(&live.Status.Conditions, metav1.Condition{Type: databasev1alpha1.ConditionPoolerLookupApplied,
			Status: metav1.ConditionTrue, Reason: databasev1alpha1.ReasonPoolerLookupApplied, Message: "made"})
		if err := k8s.Status().Update(ctx, live); err != nil {
			t.Fatal(err)
		}
		got := condition(t, ns, p.Name, databasev1alpha1.ConditionReady, metav1.ConditionTrue, databasev1alpha1.ReasonAvailable)
		if got.Status.ReadyInstances != 2 || got.Status.Endpoint != "shop-pool."+ns+".svc:5432" || got.Status.SecretName != "shop-pool-tls" ||
			meta.FindStatusCondition(got.Status.Conditions, databasev1alpha1.ConditionReconciling) != nil {
			t.Errorf("status %+v", got.Status)
		}
	})

	t.Run("drift is put back", func(t *testing.T) {
		dep := &appsv1.Deployment{}
		if err := get(ns, p.Name, dep); err != nil {
			t.Fatal(err)
		}
		dep.Spec.Replicas = ptr.To(int32(5))
		if err := k8s.Update(ctx, dep); err != nil {
			t.Fatal(err)
		}
		eventually(t, "replicas back to 2", func() error {
			if err := get(ns, p.Name, dep); err != nil {
				return err
			}
			if *dep.Spec.Replicas != 2 {
				return fmt.Errorf("replicas %d", *dep.Spec.Replicas)
			}
			return nil
		})
	})

	t.Run("a setting reaches the ConfigMap, not the pods' template; the pods are nudged", func(t *testing.T) {
		dep := &appsv1.Deployment{}
		if err := get(ns, p.Name, dep); err != nil {
			t.Fatal(err)
		}
		template := dep.Generation
		// A pod of the pooler, as the Deployment's ReplicaSet makes it.
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.Name + "-abc", Labels: dep.Spec.Template.Labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "pgbouncer", Image: "pgbouncer:test"}}}}
		if err := k8s.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		update(t, ns, p.Name, func(p *databasev1alpha1.MyDatabasePooler) {
			p.Spec.PoolMode = databasev1alpha1.PoolModeTransaction
			p.Spec.PgBouncer.DefaultPoolSize = ptr.To(int32(7))
		})
		eventually(t, "the ConfigMap says so", func() error {
			cm := &corev1.ConfigMap{}
			if err := get(ns, specs.PoolerConfigMapName(p), cm); err != nil {
				return err
			}
			var c contract.Pooler
			if err := json.Unmarshal([]byte(cm.Data[contract.PoolerConfigKey]), &c); err != nil {
				return err
			}
			if c.Settings["pool_mode"] != "transaction" || c.Settings["default_pool_size"] != "7" {
				return fmt.Errorf("settings %v", c.Settings)
			}
			return nil
		})
		if err := get(ns, p.Name, dep); err != nil {
			t.Fatal(err)
		}
		if dep.Generation != template {
			t.Errorf("the Deployment changed (generation %d, was %d): its pods would restart", dep.Generation, template)
		}
		// The pod carries the hash of the new configuration: the kubelet
		// refreshes the ConfigMap's volume on the change of the pod.
		eventually(t, "the pod annotated with the configuration's hash", func() error {
			cm := &corev1.ConfigMap{}
			if err := get(ns, specs.PoolerConfigMapName(p), cm); err != nil {
				return err
			}
			sum := sha256.Sum256([]byte(cm.Data[contract.PoolerConfigKey]))
			if err := get(ns, pod.Name, pod); err != nil {
				return err
			}
			if got, want := pod.Annotations[databasev1alpha1.AnnotationPoolerConfig], hex.EncodeToString(sum[:8]); got != want {
				return fmt.Errorf("annotation %q, want %q", got, want)
			}
			return nil
		})
	})

	t.Run("one instance has no disruption budget", func(t *testing.T) {
		update(t, ns, p.Name, func(p *databasev1alpha1.MyDatabasePooler) { p.Spec.Instances = ptr.To(int32(1)) })
		eventually(t, "the PodDisruptionBudget deleted", func() error {
			if err := get(ns, p.Name, &policyv1.PodDisruptionBudget{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("still there (%v)", err)
			}
			return nil
		})
	})

	t.Run("a deleted database stalls it, its pods stay", func(t *testing.T) {
		if err := k8s.Delete(ctx, db); err != nil {
			t.Fatal(err)
		}
		condition(t, ns, p.Name, databasev1alpha1.ConditionStalled, metav1.ConditionTrue, databasev1alpha1.ReasonDatabaseNotFound)
		if err := get(ns, p.Name, &appsv1.Deployment{}); err != nil {
			t.Errorf("the Deployment: %v", err)
		}
	})
}

// update changes the pooler, retrying on a conflict.
func update(t *testing.T, ns, name string, change func(*databasev1alpha1.MyDatabasePooler)) {
	t.Helper()
	eventually(t, "update "+name, func() error {
		p := &databasev1alpha1.MyDatabasePooler{}
		if err := get(ns, name, p); err != nil {
			return err
		}
		change(p)
		return k8s.Update(context.Background(), p)
	})
}

// TestPoolerAdmission: what the CRD refuses.
func TestPoolerAdmission(t *testing.T) {
	ctx := context.Background()
	ns := testenv.Namespace(t, k8s)
	refused := func(p *databasev1alpha1.MyDatabasePooler, want string) {
		t.Helper()
		err := k8s.Create(ctx, p)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want a refusal saying %q", p.Name, err, want)
		}
	}
	small := newPooler(ns, "small", "shop")
	small.Spec.PgBouncer = databasev1alpha1.PgBouncerSettings{DefaultPoolSize: ptr.To(int32(5)), MinPoolSize: ptr.To(int32(6))}
	refused(small, "minPoolSize must not exceed defaultPoolSize")
	implicit := newPooler(ns, "implicit", "shop")
	implicit.Spec.PgBouncer.MinPoolSize = ptr.To(int32(21))
	refused(implicit, "minPoolSize must not exceed defaultPoolSize")
	mode := newPooler(ns, "mode", "shop")
	mode.Spec.PoolMode = "statement"
	refused(mode, "spec.poolMode")
	noDB := newPooler(ns, "nodb", "")
	refused(noDB, "spec.database")

	p := newPooler(ns, "moves", "shop")
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	var err error
	eventually(t, "an update of spec.database answered", func() error {
		if err = get(ns, p.Name, p); err != nil {
			return err
		}
		p.Spec.Database = "other"
		if err = k8s.Update(ctx, p); apierrors.IsConflict(err) {
			return err // the controller wrote the status in between
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "spec.database is immutable") {
		t.Errorf("changing spec.database: %v", err)
	}
}

// TestPoolerPodMonitor: with its MyDatabase's spec.monitoring.podMonitor,
// a pooler gets a PodMonitor of its pods once the Prometheus Operator's
// CRD exists (before, it goes on without one), and loses it when the
// MyDatabase no longer asks.
func TestPoolerPodMonitor(t *testing.T) {
	ctx := context.Background()
	ns := testenv.Namespace(t, k8s)
	db := testenv.CreateDatabase(t, k8s, testenv.NewDatabase(ns, "mon", func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Monitoring.PodMonitor = true
	}))
	databaseCA(t, db)
	p := newPooler(ns, "mon-pool", "mon")
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	condition(t, ns, p.Name, databasev1alpha1.ConditionReconciling, metav1.ConditionTrue, databasev1alpha1.ReasonPodsNotReady)

	if _, err := envtest.InstallCRDs(testConfig, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join("..", "mydatabase", "testdata", "podmonitor-crd.yaml")}}); err != nil {
		t.Fatal(err)
	}
	pm := &unstructured.Unstructured{}
	pm.SetGroupVersionKind(specs.PodMonitorGVK)
	eventually(t, "the pooler's PodMonitor", func() error {
		// No watch tells of a CRD: a change of the pooler brings a pass.
		update(t, ns, p.Name, func(p *databasev1alpha1.MyDatabasePooler) {
			p.Spec.PodAnnotations = map[string]string{"touch": time.Now().String()}
		})
		return get(ns, p.Name, pm)
	})
	live := &databasev1alpha1.MyDatabasePooler{}
	if err := get(ns, p.Name, live); err != nil {
		t.Fatal(err)
	}
	if ref := metav1.GetControllerOf(pm); ref == nil || ref.UID != live.UID {
		t.Errorf("the PodMonitor's controller %+v, want the pooler", ref)
	}
	selector, _, _ := unstructured.NestedStringMap(pm.Object, "spec", "selector", "matchLabels")
	if selector[databasev1alpha1.LabelComponent] != specs.ComponentPooler || selector[databasev1alpha1.LabelInstance] != p.Name {
		t.Errorf("the PodMonitor selects %v", selector)
	}

	current := &databasev1alpha1.MyDatabase{}
	if err := get(ns, db.Name, current); err != nil {
		t.Fatal(err)
	}
	current.Spec.Monitoring.PodMonitor = false
	if err := k8s.Update(ctx, current); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the PodMonitor deleted", func() error {
		if err := get(ns, p.Name, pm); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
}

// TestPoolerSwitchoverReport: a read-write pooler in transaction mode
// reports each switchover of its MyDatabase that ends after it was made,
// with how many of its pods paused as the MyDatabase's status names them
// (the test plays the MyDatabase's reconciler), in status.lastSwitchover
// and an event; a session-mode pooler, which does not pause, reports none.
func TestPoolerSwitchoverReport(t *testing.T) {
	ctx := context.Background()
	ns := testenv.Namespace(t, k8s)
	db := testenv.CreateDatabase(t, k8s, testenv.NewDatabase(ns, "shop"))
	databaseCA(t, db)
	rw, session := newPooler(ns, "shop-rw", "shop"), newPooler(ns, "shop-session", "shop")
	rw.Spec.PoolMode = databasev1alpha1.PoolModeTransaction
	for _, p := range []*databasev1alpha1.MyDatabasePooler{rw, session} {
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		condition(t, ns, p.Name, databasev1alpha1.ConditionReconciling, metav1.ConditionTrue, databasev1alpha1.ReasonPodsNotReady)
	}

	// Each switchover ends a second after the last (the API keeps seconds).
	ended := time.Now().Truncate(time.Second)
	switchedOver := func(from, to string, poolers []databasev1alpha1.SwitchoverPooler) *metav1.Time {
		t.Helper()
		live := &databasev1alpha1.MyDatabase{}
		if err := get(ns, db.Name, live); err != nil {
			t.Fatal(err)
		}
		ended = ended.Add(time.Second)
		finished := metav1.NewTime(ended)
		live.Status.Switchover = &databasev1alpha1.SwitchoverStatus{From: from, To: to, Phase: databasev1alpha1.SwitchoverSucceeded,
			FinishedAt: &finished, Poolers: poolers}
		if err := k8s.Status().Update(ctx, live); err != nil {
			t.Fatal(err)
		}
		return &finished
	}
	reported := func(want databasev1alpha1.PoolerSwitchoverStatus, says, eventType, reason string) {
		t.Helper()
		eventually(t, "status.lastSwitchover "+want.To, func() error {
			p := &databasev1alpha1.MyDatabasePooler{}
			if err := get(ns, rw.Name, p); err != nil {
				return err
			}
			got := p.Status.LastSwitchover
			if got == nil || got.From != want.From || got.To != want.To || got.PausedPods != want.PausedPods ||
				!got.FinishedAt.Equal(want.FinishedAt) || !strings.Contains(got.Message, says) {
				return fmt.Errorf("lastSwitchover %+v", got)
			}
			return nil
		})
		eventually(t, "the event "+reason, func() error {
			events := &eventsv1.EventList{}
			if err := k8s.List(ctx, events, client.InNamespace(ns)); err != nil {
				return err
			}
			for _, e := range events.Items {
				if e.Regarding.Name == rw.Name && e.Reason == reason && e.Type == eventType && strings.Contains(e.Note, says) {
					return nil
				}
			}
			return fmt.Errorf("none of %d events", len(events.Items))
		})
	}

	finished := switchedOver("shop-0", "shop-1", []databasev1alpha1.SwitchoverPooler{{Name: rw.Name, PausedPods: 2}, {Name: "other", PausedPods: 1}})
	reported(databasev1alpha1.PoolerSwitchoverStatus{From: "shop-0", To: "shop-1", FinishedAt: finished, PausedPods: 2},
		"2 of 2 PgBouncer pods paused before shop-0 stopped", corev1.EventTypeNormal, "PausedThroughSwitchover")

	finished = switchedOver("shop-1", "shop-2", nil)
	reported(databasev1alpha1.PoolerSwitchoverStatus{From: "shop-1", To: "shop-2", FinishedAt: finished},
		"the primary counted no pod of this pooler paused", corev1.EventTypeWarning, "NotPausedThroughSwitchover")

	p := &databasev1alpha1.MyDatabasePooler{}
	if err := get(ns, session.Name, p); err != nil {
		t.Fatal(err)
	}
	if p.Status.LastSwitchover != nil {
		t.Errorf("a session-mode pooler, which does not pause, reports %+v", p.Status.LastSwitchover)
	}
}

// TestPoolerFollowsCARotation: the pooler's Secret follows each phase of
// a rotation of its MyDatabase's CA, brought by the watch of the CA
// Secret alone: Trusting gives it both CAs and keeps its certificates,
// Reissuing issues them again from the new CA, and the end leaves the new
// CA alone without issuing again. Its ca.crt verifies its certificates at
// every phase.
func TestPoolerFollowsCARotation(t *testing.T) {
	ctx := context.Background()
	ns := testenv.Namespace(t, k8s)
	db := testenv.CreateDatabase(t, k8s, testenv.NewDatabase(ns, "rot"))
	old := databaseCA(t, db)
	p := newPooler(ns, "rot-pool", "rot")
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	poolerSecret := func() map[string][]byte {
		s := &corev1.Secret{}
		if err := get(ns, specs.PoolerSecretName(p), s); err != nil {
			return nil
		}
		return s.Data
	}
	eventually(t, "the pooler's Secret", func() error {
		if poolerSecret() == nil {
			return errors.New("none yet")
		}
		return nil
	})
	before := poolerSecret()
	next, err := pki.NewCA(specs.CACommonName(db), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// phase plays the MyDatabase controller: the CA Secret's data, and the
	// servers' bundle in the server certificate Secret.
	phase := func(data map[string][]byte) {
		t.Helper()
		for _, name := range []string{specs.CASecretName(db), specs.IssuedServerCertSecretName(db)} {
			s := &corev1.Secret{}
			if err := get(ns, name, s); err != nil {
				t.Fatal(err)
			}
			if name == specs.CASecretName(db) {
				s.Data = data
			} else {
				s.Data[specs.CACertKey] = data[specs.CACertKey]
			}
			if err := k8s.Update(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	// follows waits for the pooler's Secret to carry bundle and
	// certificates from issuer, checking at each look that its ca.crt
	// verifies the certificates it holds.
	follows := func(bundle, issuer []byte) map[string][]byte {
		t.Helper()
		var d map[string][]byte
		eventually(t, "the pooler's Secret following the CA", func() error {
			d = poolerSecret()
			now := time.Now()
			for _, ca := range [][]byte{d[specs.CACertKey], issuer} {
				if c := pki.CheckServer(d["tls.crt"], d["tls.key"], ca, specs.PoolerDNSNames(p), now); len(c.Problems) > 0 {
					if bytes.Equal(ca, issuer) {
						return fmt.Errorf("its server certificate is not from the CA that issues: %v", c.Problems)
					}
					t.Fatalf("its ca.crt does not verify its server certificate: %v", c.Problems)
				}
				if c := pki.CheckClient(d[contract.PoolerClientCertKey], d[contract.PoolerClientKeyKey], ca, contract.PoolerRole, now); len(c.Problems) > 0 {
					return fmt.Errorf("its client certificate: %v", c.Problems)
				}
			}
			if !bytes.Equal(d[specs.CACertKey], bundle) || !bytes.Equal(d[contract.PoolerServerCAKey], bundle) {
				return errors.New("its CAs are not the bundle")
			}
			return nil
		})
		return d
	}
	idle := map[string][]byte{specs.CACertKey: old.Cert, specs.CAKeyKey: old.Key}
	trusting := specs.TrustingCAData(idle, next)
	phase(trusting)
	d := follows(trusting[specs.CACertKey], old.Cert)
	if !bytes.Equal(d["tls.crt"], before["tls.crt"]) || !bytes.Equal(d[contract.PoolerClientCertKey], before[contract.PoolerClientCertKey]) {
		t.Error("Trusting issued the pooler's certificates again")
	}
	reissuing := specs.ReissuingCAData(trusting)
	phase(reissuing)
	reissued := follows(reissuing[specs.CACertKey], next.Cert)
	rotated := specs.RotatedCAData(reissuing)
	phase(rotated)
	d = follows(next.Cert, next.Cert)
	if !bytes.Equal(d["tls.crt"], reissued["tls.crt"]) {
		t.Error("the end of the rotation issued the pooler's certificates again")
	}
}

package mydatabase

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
)

// markReady plays the StatefulSet controller: every desired pod exists, is
// ready and runs the current template.
func markReady(t testing.TB, db *databasev1alpha1.MyDatabase) {
	t.Helper()
	eventually(t, "the StatefulSet to be marked ready", func() error {
		sts := &appsv1.StatefulSet{}
		if err := get(db.Namespace, db.Name, sts); err != nil {
			return err
		}
		n := *sts.Spec.Replicas
		sts.Status = appsv1.StatefulSetStatus{
			ObservedGeneration: sts.Generation, Replicas: n, ReadyReplicas: n, AvailableReplicas: n,
			UpdatedReplicas: n, CurrentReplicas: n, CurrentRevision: "r1", UpdateRevision: "r1",
		}
		return k8s.Status().Update(context.Background(), sts)
	})
}

func condition(db *databasev1alpha1.MyDatabase, typ string) *metav1.Condition {
	return meta.FindStatusCondition(db.Status.Conditions, typ)
}

// waitFor re-reads the MyDatabase until check passes.
func waitFor(t testing.TB, db *databasev1alpha1.MyDatabase, what string, check func(*databasev1alpha1.MyDatabase) error) {
	t.Helper()
	eventually(t, what, func() error {
		if err := get(db.Namespace, db.Name, db); err != nil {
			return err
		}
		return check(db)
	})
}

// phaseIs waits for the phase, computed for the current generation: the
// status's observedGeneration once the operator has fully acted on it,
// the Reconciling condition's while it is still at work.
func phaseIs(phase databasev1alpha1.Phase) func(*databasev1alpha1.MyDatabase) error {
	return func(db *databasev1alpha1.MyDatabase) error {
		observed := db.Status.ObservedGeneration
		if rec := condition(db, databasev1alpha1.ConditionReconciling); rec != nil {
			observed = rec.ObservedGeneration
		}
		if db.Status.Phase != phase || observed != db.Generation {
			return fmt.Errorf("phase %q at observedGeneration %d (generation %d), want %q",
				db.Status.Phase, observed, db.Generation, phase)
		}
		return nil
	}
}

func exists(ns, name string, obj client.Object) func() error {
	return func() error { return get(ns, name, obj) }
}

func gone(ns, name string, obj client.Object) func() error {
	return func() error {
		err := get(ns, name, obj)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil && !obj.GetDeletionTimestamp().IsZero() {
			return nil // deleted, held by a finalizer no controller runs here
		}
		return fmt.Errorf("%T %s still exists (err %v)", obj, name, err)
	}
}

func TestCreateBuildsEveryChild(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "orders"))

	sts := &appsv1.StatefulSet{}
	eventually(t, "the StatefulSet", exists(ns, "orders", sts))
	for name, obj := range map[string]client.Object{
		"orders-headless": &corev1.Service{}, "orders-rw": &corev1.Service{}, "orders-config": &corev1.ConfigMap{},
	} {
		eventually(t, name, exists(ns, name, obj))
		assertOwnedChild(t, db, obj)
	}
	assertOwnedChild(t, db, sts)
	if err := get(ns, "orders-ro", &corev1.Service{}); !apierrors.IsNotFound(err) {
		t.Errorf("read-only Service with one server: got %v, want NotFound", err)
	}
	if err := get(ns, "orders", &policyv1.PodDisruptionBudget{}); !apierrors.IsNotFound(err) {
		t.Errorf("PodDisruptionBudget with one server: got %v, want NotFound", err)
	}

	// Under Retain (the default) the Secrets carry no owner reference: the
	// garbage collector can never take them, even if the finalizer is removed
	// by hand while the operator is down.
	for _, name := range []string{"orders-credentials", "orders-ca", "orders-replication-tls", "orders-server-tls"} {
		secret := &corev1.Secret{}
		eventually(t, name, exists(ns, name, secret))
		if len(secret.OwnerReferences) != 0 {
			t.Errorf("Secret %s has owner references %v under Retain", name, secret.OwnerReferences)
		}
		if got := secret.Labels[databasev1alpha1.LabelOwnerUID]; got != string(db.UID) {
			t.Errorf("Secret %s owner-uid label = %q, want %q", name, got, db.UID)
		}
	}
	if n := len(secretData(t, ns, "orders-credentials")[specs.SecretPasswordKey]); n < 24 {
		t.Errorf("the password has %d characters, want at least 24", n)
	}
	creds := &corev1.Secret{}
	_ = get(ns, "orders-credentials", creds)
	for _, key := range []string{"username", "password", "database", "host", "port", "uri"} {
		if len(creds.Data[key]) == 0 {
			t.Errorf("credentials Secret lacks %q", key)
		}
	}
	if got, want := string(creds.Data["host"]), "orders-rw."+ns+".svc"; got != want {
		t.Errorf("host = %q, want %q", got, want)
	}

	waitFor(t, db, "status Provisioning", phaseIs(databasev1alpha1.PhaseProvisioning))
	if got := condition(db, databasev1alpha1.ConditionReconciling); got == nil || got.Status != metav1.ConditionTrue {
		t.Errorf("Reconciling = %v, want True while provisioning", got)
	}
	if got := condition(db, databasev1alpha1.ConditionReady); got == nil || got.Status != metav1.ConditionFalse {
		t.Errorf("Ready = %v, want False while provisioning", got)
	}
	wantStatus := map[string]string{
		"selector":          "app.kubernetes.io/component=database,app.kubernetes.io/instance=orders,app.kubernetes.io/managed-by=myoperator,app.kubernetes.io/name=postgres",
		"endpoint":          "orders-rw." + ns + ".svc:5432",
		"credentialsSecret": "orders-credentials",
		"ready":             "0/1",
	}
	got := map[string]string{"selector": db.Status.Selector, "endpoint": db.Status.Endpoint,
		"credentialsSecret": db.Status.CredentialsSecret, "ready": db.Status.Ready}
	for k, v := range wantStatus {
		if got[k] != v {
			t.Errorf("status.%s = %q, want %q", k, got[k], v)
		}
	}
	if !strings.Contains(strings.Join(db.Finalizers, ","), databasev1alpha1.Finalizer) {
		t.Errorf("finalizers = %v, want %s", db.Finalizers, databasev1alpha1.Finalizer)
	}

	// One event names every child created, in the order they were made.
	want := "Created Secret orders-ca, Secret orders-replication-tls, Secret orders-server-tls, Secret orders-credentials, ConfigMap orders-config, " +
		"Service orders-headless, Service orders-rw, ServiceAccount orders-instance, Role orders-instance, " +
		"RoleBinding orders-instance, Lease orders-primary, StatefulSet orders"
	eventually(t, "one Created event", func() error {
		events := &eventsv1.EventList{}
		if err := k8s.List(context.Background(), events, client.InNamespace(ns)); err != nil {
			return err
		}
		var created []string
		for _, e := range events.Items {
			if e.Reason == "Created" {
				created = append(created, e.Note)
			}
		}
		if len(created) != 1 || created[0] != want {
			return fmt.Errorf("Created events %q, want one: %q", created, want)
		}
		return nil
	})
}

func assertOwnedChild(t *testing.T, db *databasev1alpha1.MyDatabase, obj client.Object) {
	t.Helper()
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.UID != db.UID || ref.Kind != "MyDatabase" {
		t.Errorf("%s: controller reference %v, want MyDatabase %s", obj.GetName(), ref, db.UID)
	}
	for k, v := range map[string]string{
		databasev1alpha1.LabelInstance: db.Name, databasev1alpha1.LabelManagedBy: databasev1alpha1.ManagedBy,
		databasev1alpha1.LabelName: "postgres", databasev1alpha1.LabelOwnerUID: string(db.UID),
	} {
		if obj.GetLabels()[k] != v {
			t.Errorf("%s: label %s = %q, want %q", obj.GetName(), k, obj.GetLabels()[k], v)
		}
	}
	if obj.GetLabels()[databasev1alpha1.LabelComponent] == "" {
		t.Errorf("%s: no %s label", obj.GetName(), databasev1alpha1.LabelComponent)
	}
}

func TestReadyAndUnderstoodByKstatus(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "shop"))
	eventually(t, "the StatefulSet", exists(ns, "shop", &appsv1.StatefulSet{}))
	markReady(t, db)
	waitFor(t, db, "Ready", phaseIs(databasev1alpha1.PhaseReady))

	ready := condition(db, databasev1alpha1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionTrue || ready.Reason != databasev1alpha1.ReasonAvailable {
		t.Fatalf("Ready condition = %+v", ready)
	}
	if c := condition(db, databasev1alpha1.ConditionReconciling); c != nil {
		t.Errorf("Reconciling present when Ready: %+v", c)
	}
	if db.Status.CurrentVersion != "17" || db.Status.Ready != "1/1" || db.Status.ReadyReplicas != 1 {
		t.Errorf("status = %+v", db.Status)
	}
	// kstatus is how kubectl wait, Flux and Argo CD read readiness.
	if got := kstatusOf(t, db); got != status.CurrentStatus {
		t.Errorf("kstatus = %s, want Current", got)
	}
}

// convergedDB creates a MyDatabase of 3 servers in namespace ns and waits
// until it is Ready and the watch events of its last writes have drained.
func convergedDB(t testing.TB, ns, name string) *databasev1alpha1.MyDatabase {
	t.Helper()
	db := create(t, newDB(ns, name, func(db *databasev1alpha1.MyDatabase) { db.Spec.Replicas = ptr.To[int32](3) }))
	eventually(t, "the StatefulSet", exists(ns, name, &appsv1.StatefulSet{}))
	markReady(t, db)
	waitFor(t, db, "Ready", phaseIs(databasev1alpha1.PhaseReady))
	time.Sleep(time.Second)
	return db
}

func TestConvergedReconcileWritesNothing(t *testing.T) {
	ns := namespace(t)
	db := convergedDB(t, ns, "quiet")
	before := writes.WritesIn(ns)
	if before["apply StatefulSet"] == 0 {
		t.Fatalf("no StatefulSet apply counted in namespace %s: %v", ns, before)
	}
	for range 3 {
		reconcileOnce(t, db)
	}
	if after := writes.WritesIn(ns); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("a converged MyDatabase was written to:\nbefore %v\nafter  %v", before, after)
	}
}

// The reconciler remembers a status it wrote only until shortly after the
// cache shows it: the last write of a converged MyDatabase wakes no pass,
// so it is the cache's update event that ends it, or the cache already
// showing it when the write is remembered. Without both, this fails.
func TestWrittenStatusIsForgottenOnceCached(t *testing.T) {
	db := convergedDB(t, namespace(t), "forgotten")
	eventually(t, "the last status write forgotten", func() error {
		reconciler.written.mu.Lock()
		defer reconciler.written.mu.Unlock()
		if last, ok := reconciler.written.m[client.ObjectKeyFromObject(db)]; ok {
			return fmt.Errorf("the write that made resourceVersion %s is still remembered", last.version)
		}
		return nil
	})
}

func TestSpecChangesReachChildren(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "grow"))
	sts := &appsv1.StatefulSet{}
	eventually(t, "the StatefulSet", exists(ns, "grow", sts))
	oldHash := sts.Spec.Template.Annotations[databasev1alpha1.AnnotationConfigHash]
	if a := sts.Spec.Template.Spec.Affinity; a == nil || a.PodAntiAffinity == nil {
		t.Errorf("affinity %+v, want the default anti-affinity", a)
	}

	update(t, db, func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Replicas = ptr.To[int32](3)
		db.Spec.Version = "17.6"
		db.Spec.Parameters = map[string]string{"max_connections": "250"}
		db.Spec.Affinity = &corev1.Affinity{}
	})
	eventually(t, "the StatefulSet to follow", func() error {
		if err := get(ns, "grow", sts); err != nil {
			return err
		}
		c := sts.Spec.Template.Spec.Containers[0]
		switch {
		case *sts.Spec.Replicas != 3:
			return fmt.Errorf("replicas %d", *sts.Spec.Replicas)
		case c.Image != "postgres:17.6":
			return fmt.Errorf("image %s", c.Image)
		case sts.Spec.Template.Annotations[databasev1alpha1.AnnotationConfigHash] == oldHash:
			return fmt.Errorf("config hash unchanged")
		case sts.Spec.Template.Spec.Affinity != nil && sts.Spec.Template.Spec.Affinity.PodAntiAffinity != nil:
			return fmt.Errorf("anti-affinity %+v kept, the spec asks for none", sts.Spec.Template.Spec.Affinity.PodAntiAffinity)
		}
		return nil
	})
	cm := &corev1.ConfigMap{}
	eventually(t, "the parameters in the ConfigMap", func() error {
		if err := get(ns, "grow-config", cm); err != nil {
			return err
		}
		if !strings.Contains(cm.Data[contract.PostgresConfFile], "max_connections = '250'") {
			return fmt.Errorf("postgresql.conf:\n%s", cm.Data[contract.PostgresConfFile])
		}
		return nil
	})
	eventually(t, "the read-only Service", exists(ns, "grow-ro", &corev1.Service{}))
	eventually(t, "the PodDisruptionBudget", exists(ns, "grow", &policyv1.PodDisruptionBudget{}))
	waitFor(t, db, "read endpoint", func(db *databasev1alpha1.MyDatabase) error {
		if db.Status.ReadEndpoint != "grow-ro."+ns+".svc:5432" {
			return fmt.Errorf("readEndpoint %q", db.Status.ReadEndpoint)
		}
		return nil
	})

	update(t, db, func(db *databasev1alpha1.MyDatabase) { db.Spec.Replicas = ptr.To[int32](1) })
	eventually(t, "the read-only Service to go", gone(ns, "grow-ro", &corev1.Service{}))
	eventually(t, "the PodDisruptionBudget to go", gone(ns, "grow", &policyv1.PodDisruptionBudget{}))
}

func TestDriftIsUndone(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "drift"))
	sts := &appsv1.StatefulSet{}
	eventually(t, "the StatefulSet", exists(ns, "drift", sts))
	rw := &corev1.Service{}
	eventually(t, "the read-write Service", exists(ns, "drift-rw", rw))

	if err := k8s.Delete(context.Background(), rw); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the read-write Service to come back", func() error {
		fresh := &corev1.Service{}
		if err := get(ns, "drift-rw", fresh); err != nil {
			return err
		}
		if fresh.UID == rw.UID {
			return fmt.Errorf("still the old Service")
		}
		return nil
	})

	patch := client.MergeFrom(sts.DeepCopy())
	sts.Spec.Replicas = ptr.To[int32](5)
	if err := k8s.Patch(context.Background(), sts, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, "replicas to be restored", func() error {
		if err := get(ns, "drift", sts); err != nil {
			return err
		}
		if *sts.Spec.Replicas != 1 {
			return fmt.Errorf("replicas %d", *sts.Spec.Replicas)
		}
		return nil
	})
	_ = db
}

// A converged pass marks the cached copy of a child it found agreeing
// (apply.Marks), and the next pass over that version skips the drift
// check; a hand edit makes a new version, which is checked, and undone.
func TestDriftOnAMarkedChildIsUndone(t *testing.T) {
	ns := namespace(t)
	db := convergedDB(t, ns, "marked")
	reconcileOnce(t, db)
	raw, err := json.Marshal(specs.ConfigMap(db))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	cm := &corev1.ConfigMap{}
	if err := get(ns, specs.ConfigMapName(db), cm); err != nil {
		t.Fatal(err)
	}
	if a := reconciler.marks.Of(cm); a == nil || !a.Agrees(binary.BigEndian.Uint64(sum[:8])) {
		t.Fatalf("the cached ConfigMap %s/%s (%v) is not marked agreeing after a converged pass", ns, cm.Name, a)
	}
	patch := client.MergeFrom(cm.DeepCopy())
	for k := range cm.Data {
		cm.Data[k] = "edited by hand"
	}
	if err := k8s.Patch(context.Background(), cm, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the ConfigMap restored", func() error {
		if err := get(ns, specs.ConfigMapName(db), cm); err != nil {
			return err
		}
		if !equality.Semantic.DeepEqual(cm.Data, specs.ConfigData(db)) {
			return fmt.Errorf("data still edited")
		}
		return nil
	})
}

func TestPausedWritesNoChild(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "frozen"))
	sts := &appsv1.StatefulSet{}
	eventually(t, "the StatefulSet", exists(ns, "frozen", sts))
	update(t, db, func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Paused = true
		db.Spec.Replicas = ptr.To[int32](3)
	})
	waitFor(t, db, "Paused", phaseIs(databasev1alpha1.PhasePaused))
	reconcileOnce(t, db)
	if err := get(ns, "frozen", sts); err != nil || *sts.Spec.Replicas != 1 {
		t.Errorf("paused StatefulSet replicas = %d (err %v), want 1", *sts.Spec.Replicas, err)
	}
	if c := condition(db, databasev1alpha1.ConditionReady); c == nil || c.Reason != databasev1alpha1.ReasonPaused {
		t.Errorf("Ready = %+v, want reason Paused", c)
	}

	update(t, db, func(db *databasev1alpha1.MyDatabase) { db.Spec.Paused = false })
	eventually(t, "the scale after unpausing", func() error {
		if err := get(ns, "frozen", sts); err != nil {
			return err
		}
		if *sts.Spec.Replicas != 3 {
			return fmt.Errorf("replicas %d", *sts.Spec.Replicas)
		}
		return nil
	})
}

// A repair no client can see (the ConfigMap edited by hand) is undone
// while Ready stays True with its lastTransitionTime: no Ready event, no
// flip.
func TestInvisibleRepairKeepsReady(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "steady"))
	eventually(t, "the StatefulSet", exists(ns, "steady", &appsv1.StatefulSet{}))
	markReady(t, db)
	waitFor(t, db, "Ready", phaseIs(databasev1alpha1.PhaseReady))
	since := condition(db, databasev1alpha1.ConditionReady).LastTransitionTime
	version := db.ResourceVersion

	cm := &corev1.ConfigMap{}
	if err := get(ns, "steady-config", cm); err != nil {
		t.Fatal(err)
	}
	want := cm.Data[contract.PostgresConfFile]
	patch := client.MergeFrom(cm.DeepCopy())
	cm.Data[contract.PostgresConfFile] = "# edited by hand\n"
	if err := k8s.Patch(context.Background(), cm, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the ConfigMap repaired", func() error {
		if err := get(ns, "steady-config", cm); err != nil {
			return err
		}
		if cm.Data[contract.PostgresConfFile] != want {
			return fmt.Errorf("postgresql.conf still %q", cm.Data[contract.PostgresConfFile])
		}
		return nil
	})
	reconcileOnce(t, db)
	if err := get(ns, "steady", db); err != nil {
		t.Fatal(err)
	}
	ready := condition(db, databasev1alpha1.ConditionReady)
	if ready.Status != metav1.ConditionTrue || !ready.LastTransitionTime.Equal(&since) {
		t.Errorf("Ready after the repair: %+v, want True since %s", ready, since)
	}
	if db.ResourceVersion != version {
		t.Errorf("the repair wrote the MyDatabase (resourceVersion %s -> %s): %+v", version, db.ResourceVersion, db.Status)
	}
}

// Deleting is reported while the finalizers of others keep the
// MyDatabase after ours has run.
func TestDeletingIsReportedWhileOthersHold(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "held", func(db *databasev1alpha1.MyDatabase) {
		db.Finalizers = []string{"example.com/hold"}
	}))
	eventually(t, "the StatefulSet", exists(ns, "held", &appsv1.StatefulSet{}))
	if err := k8s.Delete(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	waitFor(t, db, "Deleting", func(db *databasev1alpha1.MyDatabase) error {
		ready := condition(db, databasev1alpha1.ConditionReady)
		if db.Status.Phase != databasev1alpha1.PhaseDeleting || ready == nil || ready.Reason != databasev1alpha1.ReasonDeleting {
			return fmt.Errorf("phase %s, Ready %+v", db.Status.Phase, ready)
		}
		if controllerutil.ContainsFinalizer(db, databasev1alpha1.Finalizer) {
			return fmt.Errorf("our finalizer is still there")
		}
		return nil
	})
	update(t, db, func(db *databasev1alpha1.MyDatabase) { db.Finalizers = nil })
	eventually(t, "the MyDatabase gone", func() error {
		if err := get(ns, "held", db); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
}

//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

const (
	retain = databasev1alpha1.DeletionPolicyRetain
	del    = databasev1alpha1.DeletionPolicyDelete

	provisionerName = "dev.myoperator.example.com/hostpath"

	pod0 = "x-0"
	pvc0 = "data-x-0"
	pvc1 = "data-x-1"
)

// 1. A new MyDatabase gets its pods Running and Ready, then reports Ready
// with its endpoints; `kubectl wait --for=condition=Ready` returns.
func TestCreateBecomesReady(t *testing.T) {
	ns := newNamespace(t, "create", nil)
	start := time.Now()
	applyDB(t, ns, 1, retain)
	kubectl(t, "", "wait", "--for=condition=Ready", "mydatabase/x", "-n", ns, "--timeout=120s")
	t.Logf("kubectl wait --for=condition=Ready returned %s after the apply", time.Since(start).Round(100*time.Millisecond))

	db := waitReady(t, ns, 1, 30*time.Second)
	st := db.Status
	if want := "x-rw." + ns + ".svc:5432"; st.Endpoint != want {
		t.Errorf("status.endpoint = %q, want %q", st.Endpoint, want)
	}
	if st.ReadEndpoint != "" {
		t.Errorf("status.readEndpoint = %q, want none with a single server", st.ReadEndpoint)
	}
	if st.Phase != databasev1alpha1.PhaseReady || st.CredentialsSecret != "x-credentials" || st.Ready != "1/1" {
		t.Errorf("status: phase %q, credentialsSecret %q, ready %q; want Ready, x-credentials, 1/1",
			st.Phase, st.CredentialsSecret, st.Ready)
	}

	eventually(t, 30*time.Second, "x-0 labelled primary and behind x-rw", func() (bool, string) {
		pods := podsOf(t, ns, "x")
		eps := readyEndpoints(t, ns, "x-rw")
		return len(pods) == 1 && pods[0].Labels[labelRole] == "primary" && slices.Equal(eps, []string{pod0}),
			fmt.Sprintf("role %q, x-rw endpoints %v", pods[0].Labels[labelRole], eps)
	})

	pvc := &corev1.PersistentVolumeClaim{}
	if !exists(t, ns, pvc0, pvc) || pvc.Status.Phase != corev1.ClaimBound {
		t.Fatalf("PVC data-x-0: %+v, want Bound", pvc.Status)
	}
	pv := &corev1.PersistentVolume{}
	if !exists(t, "", pvc.Spec.VolumeName, pv) {
		t.Fatalf("PV %s of data-x-0 does not exist", pvc.Spec.VolumeName)
	}
	if got := pv.Annotations["pv.kubernetes.io/provisioned-by"]; got != provisionerName {
		t.Errorf("PV %s provisioned by %q, want %q", pv.Name, got, provisionerName)
	}

	secret := &corev1.Secret{}
	if !exists(t, ns, "x-credentials", secret) {
		t.Fatal("Secret x-credentials does not exist")
	}
	for _, k := range []string{"username", "password", "database", "host", "port", "uri"} {
		if len(secret.Data[k]) == 0 {
			t.Errorf("Secret x-credentials has no %q", k)
		}
	}
}

// 2. Scaling through the scale subresource: pods, the read-only Service's
// EndpointSlices and the PodDisruptionBudget follow; under Retain the
// replicas' PVCs stay after a scale-down and are reused by a scale-up.
func TestScaleFollows(t *testing.T) {
	ns := newNamespace(t, "scale", nil)
	applyDB(t, ns, 1, retain)
	waitReady(t, ns, 1, 60*time.Second)

	kubectl(t, "", "scale", "mydatabase/x", "--replicas=3", "-n", ns)
	db := waitReady(t, ns, 3, 120*time.Second)
	if want := "x-ro." + ns + ".svc:5432"; db.Status.ReadEndpoint != want {
		t.Errorf("status.readEndpoint = %q, want %q", db.Status.ReadEndpoint, want)
	}
	eventually(t, 30*time.Second, "roles: x-0 primary, x-1 and x-2 replicas", func() (bool, string) {
		roles := map[string]string{}
		for _, p := range podsOf(t, ns, "x") {
			roles[p.Name] = p.Labels[labelRole]
		}
		return maps.Equal(roles, map[string]string{pod0: "primary", "x-1": "replica", "x-2": "replica"}), fmt.Sprint(roles)
	})
	eventually(t, 30*time.Second, "x-ro's EndpointSlices list x-1 and x-2, x-rw's x-0", func() (bool, string) {
		ro, rw := readyEndpoints(t, ns, "x-ro"), readyEndpoints(t, ns, "x-rw")
		return slices.Equal(ro, []string{"x-1", "x-2"}) && slices.Equal(rw, []string{pod0}),
			fmt.Sprintf("x-ro %v, x-rw %v", ro, rw)
	})
	eventually(t, 30*time.Second, "PodDisruptionBudget x covers the 3 pods, maxUnavailable 1", func() (bool, string) {
		pdb := &policyv1.PodDisruptionBudget{}
		if !exists(t, ns, "x", pdb) {
			return false, "no PodDisruptionBudget x"
		}
		ok := pdb.Spec.MaxUnavailable != nil && pdb.Spec.MaxUnavailable.IntValue() == 1 &&
			pdb.Status.ExpectedPods == 3 && pdb.Status.CurrentHealthy == 3 && pdb.Status.DisruptionsAllowed == 1
		return ok, fmt.Sprintf("maxUnavailable %v, status %+v", pdb.Spec.MaxUnavailable, pdb.Status)
	})
	uids := map[string]types.UID{}
	for i := range 3 {
		pvc := &corev1.PersistentVolumeClaim{}
		name := fmt.Sprintf("data-x-%d", i)
		if !exists(t, ns, name, pvc) || pvc.Status.Phase != corev1.ClaimBound {
			t.Fatalf("PVC %s: %+v, want Bound", name, pvc.Status)
		}
		uids[name] = pvc.UID
	}

	kubectl(t, "", "scale", "mydatabase/x", "--replicas=1", "-n", ns)
	db = waitReady(t, ns, 1, 120*time.Second)
	if db.Status.ReadEndpoint != "" {
		t.Errorf("status.readEndpoint = %q after scaling to 1, want none", db.Status.ReadEndpoint)
	}
	eventually(t, 30*time.Second, "x-ro, its EndpointSlices and the PodDisruptionBudget gone", func() (bool, string) {
		svc, pdb := exists(t, ns, "x-ro", &corev1.Service{}), exists(t, ns, "x", &policyv1.PodDisruptionBudget{})
		eps := readyEndpoints(t, ns, "x-ro")
		return !svc && !pdb && len(eps) == 0, fmt.Sprintf("x-ro exists %v, PDB exists %v, x-ro endpoints %v", svc, pdb, eps)
	})
	// Retain: scale-down keeps the replicas' volumes (the StatefulSet's
	// whenScaled policy is Retain), still bound, for a later scale-up.
	for _, name := range []string{pvc1, "data-x-2"} {
		pvc := &corev1.PersistentVolumeClaim{}
		if !exists(t, ns, name, pvc) || pvc.UID != uids[name] || pvc.DeletionTimestamp != nil {
			t.Errorf("PVC %s was not retained on scale-down (uid %q, was %s; deleting: %v)",
				name, pvc.UID, uids[name], pvc.DeletionTimestamp != nil)
		}
	}

	kubectl(t, "", "scale", "mydatabase/x", "--replicas=2", "-n", ns)
	waitReady(t, ns, 2, 120*time.Second)
	pvc := &corev1.PersistentVolumeClaim{}
	if !exists(t, ns, pvc1, pvc) || pvc.UID != uids[pvc1] {
		t.Errorf("scaling up again did not reuse the retained PVC data-x-1 (uid %s, was %s)", pvc.UID, uids[pvc1])
	}
}

// 3. Drift: a deleted read-write Service and a StatefulSet scaled by hand
// are both put back.
func TestDriftIsRepaired(t *testing.T) {
	ns := newNamespace(t, "drift", nil)
	applyDB(t, ns, 1, retain)
	waitReady(t, ns, 1, 60*time.Second)

	old := &corev1.Service{}
	if !exists(t, ns, "x-rw", old) {
		t.Fatal("Service x-rw does not exist")
	}
	kubectl(t, "", "delete", "service", "x-rw", "-n", ns)
	eventually(t, 30*time.Second, "Service x-rw re-created, selecting x-0 again", func() (bool, string) {
		svc := &corev1.Service{}
		if !exists(t, ns, "x-rw", svc) || svc.UID == old.UID {
			return false, "not re-created yet"
		}
		eps := readyEndpoints(t, ns, "x-rw")
		return maps.Equal(svc.Spec.Selector, old.Spec.Selector) && slices.Equal(eps, []string{pod0}),
			fmt.Sprintf("selector %v (was %v), endpoints %v", svc.Spec.Selector, old.Spec.Selector, eps)
	})

	kubectl(t, "", "scale", "statefulset/x", "--replicas=3", "-n", ns)
	eventually(t, 30*time.Second, "StatefulSet x back to 1 replica", func() (bool, string) {
		sts := &appsv1.StatefulSet{}
		if !exists(t, ns, "x", sts) {
			return false, "no StatefulSet"
		}
		return *sts.Spec.Replicas == 1, fmt.Sprintf("spec.replicas %d", *sts.Spec.Replicas)
	})
	db := waitReady(t, ns, 1, 60*time.Second)

	// A repair no client can see keeps Ready True, lastTransitionTime and
	// all: the ConfigMap edited by hand is put back.
	since := readySince(t, db)
	cm := &corev1.ConfigMap{}
	if !exists(t, ns, "x-config", cm) {
		t.Fatal("ConfigMap x-config does not exist")
	}
	kubectl(t, "", "patch", "configmap", "x-config", "-n", ns, "--type=merge", "-p", `{"data":{"postgresql.conf":"# edited by hand\n"}}`)
	eventually(t, 30*time.Second, "ConfigMap x-config repaired", func() (bool, string) {
		now := &corev1.ConfigMap{}
		return exists(t, ns, "x-config", now) && maps.Equal(now.Data, cm.Data), "still edited"
	})
	db = waitReady(t, ns, 1, 60*time.Second)
	if got := readySince(t, db); !got.Equal(&since) {
		t.Errorf("Ready's lastTransitionTime moved from %s to %s across a repair no client can see", since, got)
	}

	if sts := (&appsv1.StatefulSet{}); !exists(t, ns, "x", sts) || *sts.Spec.Replicas != 1 {
		t.Errorf("StatefulSet x has %d replicas after the MyDatabase is Ready again, want 1", *sts.Spec.Replicas)
	}
	if *db.Spec.Replicas != 1 {
		t.Errorf("spec.replicas of the MyDatabase changed to %d", *db.Spec.Replicas)
	}
}

func readySince(t *testing.T, db *databasev1alpha1.MyDatabase) metav1.Time {
	t.Helper()
	c := meta.FindStatusCondition(db.Status.Conditions, databasev1alpha1.ConditionReady)
	if c == nil {
		t.Fatal("no Ready condition")
	}
	return c.LastTransitionTime
}

// A ResourceQuota that forbids the data volume: the StatefulSet controller
// cannot create the claim, and says so only in its events. The MyDatabase
// is Stalled with QuotaExceeded naming the claim, a single Warning event
// over a minute of retries, and lifting the quota makes it Ready with no
// further action.
func TestQuotaOnVolumesShowsInStatus(t *testing.T) {
	ns := newNamespace(t, "quota", nil)
	kubectl(t, "", "create", "quota", "no-volumes", "--hard=persistentvolumeclaims=0", "-n", ns)
	applyDB(t, ns, 1, del)
	var db *databasev1alpha1.MyDatabase
	eventually(t, 90*time.Second, "Stalled QuotaExceeded naming the claim", func() (bool, string) {
		db = &databasev1alpha1.MyDatabase{}
		if err := env.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: dbName}, db); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(db.Status.Conditions, databasev1alpha1.ConditionStalled)
		return c != nil && c.Reason == databasev1alpha1.ReasonQuotaExceeded && strings.Contains(c.Message, pvc0) &&
			db.Status.ObservedGeneration == db.Generation, conditions(db)
	})
	out := kubectl(t, "", "get", "mydatabase", dbName, "-n", ns)
	if !strings.Contains(out, "Stalled") {
		t.Errorf("kubectl get does not show Stalled:\n%s", out)
	}
	time.Sleep(time.Minute) // the retries whose events are counted
	warnings := kubectl(t, "", "get", "events", "-n", ns, "--field-selector",
		"involvedObject.kind=MyDatabase,type=Warning,reason="+databasev1alpha1.ReasonQuotaExceeded,
		"-o", "jsonpath={range .items[*]}{.reason}/{.series.count} {end}")
	if got := strings.Fields(warnings); !slices.Equal(got, []string{databasev1alpha1.ReasonQuotaExceeded + "/"}) {
		t.Errorf("Warning events over a minute of retries: %q, want exactly one, never repeated (no series)", warnings)
	}

	kubectl(t, "", "delete", "quota", "no-volumes", "-n", ns)
	waitReady(t, ns, 1, 3*time.Minute)
}

// 4. Deleting under Retain leaves exactly the PVCs and the two Secrets once
// the garbage collector has run; a MyDatabase of the same name adopts them:
// same volumes, same password, Ready again.
func TestDeleteRetainKeepsDataAndCredentials(t *testing.T) {
	ns := newNamespace(t, "retain", nil)
	applyDB(t, ns, 2, retain)
	first := waitReady(t, ns, 2, 120*time.Second)

	kept := map[string]types.UID{}
	for _, name := range []string{pvc0, pvc1} {
		pvc := &corev1.PersistentVolumeClaim{}
		if !exists(t, ns, name, pvc) {
			t.Fatalf("PVC %s does not exist", name)
		}
		kept["persistentvolumeclaims/"+name] = pvc.UID
	}
	secrets := map[string]*corev1.Secret{}
	for _, name := range []string{"x-credentials", "x-replication-tls", "x-ca", "x-server-tls"} {
		s := &corev1.Secret{}
		if !exists(t, ns, name, s) {
			t.Fatalf("Secret %s does not exist", name)
		}
		secrets[name] = s
		kept["secrets/"+name] = s.UID
	}

	kubectl(t, "", "delete", "mydatabase/x", "-n", ns, "--wait", "--timeout=60s")
	want := slices.Sorted(maps.Keys(kept))
	eventually(t, 90*time.Second, "only the PVCs and Secrets left once the garbage collector ran", func() (bool, string) {
		got := instanceObjects(t, ns, "x")
		return slices.Equal(got, want), fmt.Sprintf("labelled app.kubernetes.io/instance=x: %v", got)
	})
	// Nothing may still point at the deleted owner, or the garbage collector
	// would delete it a moment later: look again after a pause.
	time.Sleep(3 * time.Second)
	if got := instanceObjects(t, ns, "x"); !slices.Equal(got, want) {
		t.Fatalf("after the garbage collector: %v, want %v", got, want)
	}
	for key, uid := range kept {
		kind, name, _ := strings.Cut(key, "/")
		var obj interface {
			GetUID() types.UID
			GetOwnerReferences() []metav1.OwnerReference
		}
		if kind == "secrets" {
			s := &corev1.Secret{}
			exists(t, ns, name, s)
			obj = s
		} else {
			p := &corev1.PersistentVolumeClaim{}
			exists(t, ns, name, p)
			obj = p
		}
		if obj.GetUID() != uid {
			t.Errorf("%s was replaced (uid %s, was %s)", key, obj.GetUID(), uid)
		}
		for _, ref := range obj.GetOwnerReferences() {
			if ref.UID == first.UID {
				t.Errorf("%s still has an ownerReference to the deleted MyDatabase", key)
			}
		}
	}

	applyDB(t, ns, 2, retain)
	second := waitReady(t, ns, 2, 120*time.Second)
	if second.UID == first.UID {
		t.Fatal("the MyDatabase was not re-created")
	}
	for _, name := range []string{pvc0, pvc1} {
		pvc := &corev1.PersistentVolumeClaim{}
		if !exists(t, ns, name, pvc) || pvc.UID != kept["persistentvolumeclaims/"+name] {
			t.Errorf("PVC %s: uid %s, want the retained %s", name, pvc.UID, kept["persistentvolumeclaims/"+name])
		}
		if pvc.Labels[labelOwnerUID] != string(second.UID) {
			t.Errorf("PVC %s: owner-uid label %q, want the new MyDatabase's %s", name, pvc.Labels[labelOwnerUID], second.UID)
		}
	}
	for name, old := range secrets {
		s := &corev1.Secret{}
		if !exists(t, ns, name, s) {
			t.Fatalf("Secret %s is gone", name)
		}
		if s.UID != old.UID || !maps.EqualFunc(s.Data, old.Data, bytes.Equal) {
			t.Errorf("Secret %s was replaced or rewritten (uid %s, was %s; same data: %v)",
				name, s.UID, old.UID, maps.EqualFunc(s.Data, old.Data, bytes.Equal))
		}
		if s.Labels[labelOwnerUID] != string(second.UID) {
			t.Errorf("Secret %s: owner-uid label %q, want the new MyDatabase's %s", name, s.Labels[labelOwnerUID], second.UID)
		}
	}
}

// 5. Under Delete, scaling down deletes the replica's volume, and deleting
// the MyDatabase leaves nothing labelled with its name, PVCs included; the
// provisioner deletes their PersistentVolumes and directories.
func TestDeleteDeleteRemovesEverything(t *testing.T) {
	ns := newNamespace(t, "delete", nil)
	applyDB(t, ns, 2, del)
	waitReady(t, ns, 2, 120*time.Second)
	pvs := map[string]string{}
	for _, name := range []string{pvc0, pvc1} {
		pvc := &corev1.PersistentVolumeClaim{}
		if !exists(t, ns, name, pvc) || pvc.Spec.VolumeName == "" {
			t.Fatalf("PVC %s not bound", name)
		}
		pvs[name] = pvc.Spec.VolumeName
	}

	kubectl(t, "", "scale", "mydatabase/x", "--replicas=1", "-n", ns)
	waitReady(t, ns, 1, 120*time.Second)
	eventually(t, 60*time.Second, "PVC data-x-1 and its volume deleted on scale-down", func() (bool, string) {
		pvc := exists(t, ns, pvc1, &corev1.PersistentVolumeClaim{})
		pv := exists(t, "", pvs[pvc1], &corev1.PersistentVolume{})
		return !pvc && !pv, fmt.Sprintf("PVC exists %v, PV %s exists %v", pvc, pvs[pvc1], pv)
	})

	kubectl(t, "", "delete", "mydatabase/x", "-n", ns, "--wait", "--timeout=60s")
	eventually(t, 90*time.Second, "nothing labelled app.kubernetes.io/instance=x left", func() (bool, string) {
		got := instanceObjects(t, ns, "x")
		return len(got) == 0, fmt.Sprint(got)
	})
	eventually(t, 60*time.Second, "the PersistentVolumes deleted by the provisioner", func() (bool, string) {
		var left []string
		for _, pv := range pvs {
			if exists(t, "", pv, &corev1.PersistentVolume{}) {
				left = append(left, pv)
			}
		}
		return len(left) == 0, fmt.Sprintf("PVs left: %v", left)
	})
	for _, pv := range pvs {
		if _, err := os.Stat(filepath.Join(env.work, "volumes", pv)); !os.IsNotExist(err) {
			t.Errorf("the directory of volume %s is still there (%v)", pv, err)
		}
	}
}

// 6. A converged operator writes nothing for a minute, nor once restarted:
// the resourceVersions of the MyDatabase and of its children do not change.
func TestRestartWritesNothing(t *testing.T) {
	ns := newNamespace(t, "restart", nil)
	applyDB(t, ns, 2, retain)
	waitReady(t, ns, 2, 120*time.Second)

	// Converged: nothing changes for a few seconds in a row.
	var before map[string]string
	eventually(t, 60*time.Second, "resourceVersions stable for 3s", func() (bool, string) {
		a := snapshotRVs(t, ns)
		time.Sleep(3 * time.Second)
		before = snapshotRVs(t, ns)
		return maps.Equal(a, before), rvDiff(a, before)
	})
	for _, key := range []string{"MyDatabase/x", "StatefulSet/x", "Service/x-headless", "Service/x-rw", "Service/x-ro",
		"ConfigMap/x-config", "Secret/x-credentials", "Secret/x-replication-tls", "PodDisruptionBudget/x"} {
		if _, ok := before[key]; !ok {
			t.Fatalf("%s does not exist", key)
		}
	}

	idleSince := time.Now()
	time.Sleep(time.Minute)
	if idle := snapshotRVs(t, ns); !maps.Equal(before, idle) {
		t.Errorf("the operator wrote while idle for %s:\n%s", time.Since(idleSince).Round(time.Second), rvDiff(before, idle))
	}

	if err := env.restartOperator(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	eventually(t, 30*time.Second, "the restarted operator reconciled", func() (bool, string) {
		n, err := env.reconcileCount()
		return err == nil && n > 0, fmt.Sprintf("reconciles %d, err %v", n, err)
	})
	time.Sleep(10*time.Second - time.Since(restarted))
	after := snapshotRVs(t, ns)
	if !maps.Equal(before, after) {
		t.Errorf("the restarted operator wrote:\n%s", rvDiff(before, after))
		out, _ := kubectlRun("", "get", "mydatabase,statefulset,service,configmap,secret,poddisruptionbudget",
			"-n", ns, "-o", "yaml", "--show-managed-fields")
		t.Logf("objects with managedFields:\n%s", out)
	}
	n, _ := env.reconcileCount()
	t.Logf("the restarted operator ran %d reconciles in %s and wrote nothing", n, time.Since(restarted).Round(time.Second))
}

func rvDiff(a, b map[string]string) string {
	keys := slices.Collect(maps.Keys(a))
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var s []string
	for _, k := range keys {
		if a[k] != b[k] {
			s = append(s, fmt.Sprintf("  %s: resourceVersion %q -> %q", k, a[k], b[k]))
		}
	}
	return strings.Join(s, "\n")
}

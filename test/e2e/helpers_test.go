//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"example.com/myoperator/internal/specs"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/testenv"
)

// Labels and names the operator documents (README, internal/specs). The
// tests spell them out rather than importing the builders: they check the
// contract, not the implementation.
const (
	// dbName is the MyDatabase of every test, each in its own namespace;
	// its children are x-rw, x-ro, data-x-0, ...
	dbName = "x"

	labelInstance = "app.kubernetes.io/instance"
	labelOwnerUID = "database.example.com/owner-uid"
	labelRole     = "database.example.com/role"
)

var ctx = context.Background()

// kubectlRun runs kubectl (the cluster's version, first on PATH) against the
// test cluster (KUBECONFIG) and returns its combined output.
func kubectlRun(stdin string, args ...string) (string, error) {
	cmd := exec.Command("kubectl", args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// kubectl runs kubectl and fails the test if it fails.
func kubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, err := kubectlRun(stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// eventually polls cond until it returns true; on timeout it fails the test
// with what cond last reported.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	start := time.Now()
	last := ""
	for {
		ok, state := cond()
		if ok {
			t.Logf("%s (after %s)", what, time.Since(start).Round(100*time.Millisecond))
			return
		}
		if state != last {
			last = state
		}
		if time.Since(start) > timeout {
			t.Fatalf("timed out after %s waiting for: %s\nlast seen: %s", timeout, what, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// newNamespace creates a namespace for one test. At the end of the test it
// prints what the namespace held if the test failed, then deletes the
// MyDatabases in it (so the operator runs their deletion) and the namespace.
func newNamespace(t *testing.T, prefix string, labels map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: prefix + "-" + rand.Text()[:6], Labels: labels}}
	ns.Name = strings.ToLower(ns.Name)
	if err := env.c.Create(ctx, ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() {
		_, _ = kubectlRun("", "delete", "mydatabase", "--all", "-n", ns.Name, "--wait", "--timeout=60s")
		_, _ = kubectlRun("", "delete", "namespace", ns.Name, "--wait=false")
	})
	t.Cleanup(func() {
		if t.Failed() {
			env.dumpCluster(t.Logf, ns.Name)
		}
	})
	return ns.Name
}

// dumpCluster prints what the cluster holds in namespace ns (all test
// namespaces when ns is empty), its events, and the tails of the operator's
// and the provisioner's logs.
func (h *harness) dumpCluster(logf func(string, ...any), ns string) {
	nsArgs := []string{"-n", ns}
	if ns == "" {
		nsArgs = []string{"-A"}
	}
	get := func(args ...string) {
		args = append([]string{"get"}, args...)
		out, _ := kubectlRun("", args...)
		logf("$ kubectl %s\n%s", strings.Join(args, " "), out)
	}
	logf("===== what the cluster held (namespace %q) =====", ns)
	get(append([]string{"mydatabase,statefulset,pod,pvc,service,endpointslice,configmap,secret,poddisruptionbudget",
		"-o", "wide", "--show-labels"}, nsArgs...)...)
	get("persistentvolume,storageclass,node", "-o", "wide")
	get(append([]string{"mydatabase", "-o", "yaml"}, nsArgs...)...)
	get(append([]string{"events", "--sort-by=.lastTimestamp"}, nsArgs...)...)
	if h.operator != nil {
		logf("===== operator log (last 80 lines of %s) =====\n%s", h.operator.Log, testenv.Tail(h.operator.Log, 80))
	}
	if h.provisioner != nil {
		logf("===== provisioner log (last 20 lines) =====\n%s", testenv.Tail(h.provisioner.Log, 20))
	}
}

// dbManifest is a MyDatabase as a user writes it.
func dbManifest(name string, replicas int, policy databasev1alpha1.DeletionPolicy) string {
	return fmt.Sprintf(`apiVersion: database.example.com/v1alpha1
kind: MyDatabase
metadata:
  name: %s
spec:
  version: "17"
  replicas: %d
  storage:
    size: 1Gi
  deletionPolicy: %s
`, name, replicas, policy)
}

// applyDB applies the MyDatabase dbName in ns.
func applyDB(t *testing.T, ns string, replicas int, policy databasev1alpha1.DeletionPolicy) {
	t.Helper()
	kubectl(t, dbManifest(dbName, replicas, policy), "apply", "-n", ns, "-f", "-")
}

// waitReady waits until the MyDatabase dbName reports Ready for its
// current generation with the given number of ready servers, and the pods
// agree: exactly x-0..x-(replicas-1), each Running and Ready.
func waitReady(t *testing.T, ns string, replicas int32, timeout time.Duration) *databasev1alpha1.MyDatabase {
	t.Helper()
	name := dbName
	var db *databasev1alpha1.MyDatabase
	what := fmt.Sprintf("MyDatabase %s Ready with %d/%d servers", name, replicas, replicas)
	eventually(t, timeout, what, func() (bool, string) {
		db = &databasev1alpha1.MyDatabase{}
		if err := env.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, db); err != nil {
			return false, err.Error()
		}
		st := db.Status
		state := fmt.Sprintf("generation %d, observedGeneration %d, phase %s, ready %s, conditions %v",
			db.Generation, st.ObservedGeneration, st.Phase, st.Ready, conditions(db))
		if st.ObservedGeneration != db.Generation ||
			!meta.IsStatusConditionTrue(st.Conditions, databasev1alpha1.ConditionReady) ||
			st.ReadyReplicas != replicas || st.Replicas != replicas {
			return false, state
		}
		pods := podsOf(t, ns, name)
		want := make([]string, replicas)
		for i := range want {
			want[i] = fmt.Sprintf("%s-%d", name, i)
		}
		var got []string
		for _, p := range pods {
			if p.Status.Phase != corev1.PodRunning || !specs.PodReady(&p) || p.DeletionTimestamp != nil {
				return false, fmt.Sprintf("%s; pod %s is %s, ready=%v", state, p.Name, p.Status.Phase, specs.PodReady(&p))
			}
			got = append(got, p.Name)
		}
		if !slices.Equal(got, want) {
			return false, fmt.Sprintf("%s; pods %v, want %v", state, got, want)
		}
		return true, ""
	})
	return db
}

func conditions(db *databasev1alpha1.MyDatabase) string {
	s := make([]string, 0, len(db.Status.Conditions))
	for _, c := range db.Status.Conditions {
		s = append(s, fmt.Sprintf("%s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return strings.Join(s, "; ")
}

// podsOf lists the pods of the MyDatabase, sorted by name.
func podsOf(t *testing.T, ns, name string) []corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := env.c.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{labelInstance: name}); err != nil {
		t.Fatalf("listing pods: %v", err)
	}
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return pods.Items
}

// exists reports whether the object exists; obj is filled when it does.
func exists(t *testing.T, ns, name string, obj client.Object) bool {
	t.Helper()
	err := env.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatalf("getting %T %s/%s: %v", obj, ns, name, err)
	}
	return true
}

// readyEndpoints returns the sorted names of the pods a Service's
// EndpointSlices list as ready.
func readyEndpoints(t *testing.T, ns, service string) []string {
	t.Helper()
	sl := &discoveryv1.EndpointSliceList{}
	err := env.c.List(ctx, sl, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: service})
	if err != nil {
		t.Fatalf("listing EndpointSlices: %v", err)
	}
	var names []string
	for _, s := range sl.Items {
		for _, ep := range s.Endpoints {
			if ep.TargetRef != nil && (ep.Conditions.Ready == nil || *ep.Conditions.Ready) {
				names = append(names, ep.TargetRef.Name)
			}
		}
	}
	slices.Sort(names)
	return names
}

// instanceObjects lists, over every namespaced resource type the API server
// serves, the objects in ns labelled app.kubernetes.io/instance=name, as
// sorted "resource/name" strings.
func instanceObjects(t *testing.T, ns, name string) []string {
	t.Helper()
	lists, err := env.disc.ServerPreferredNamespacedResources()
	if err != nil && len(lists) == 0 {
		t.Fatalf("discovery: %v", err)
	}
	var found []string
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") || r.Name == "events" {
				continue
			}
			objs, err := env.dyn.Resource(gv.WithResource(r.Name)).Namespace(ns).List(ctx,
				metav1.ListOptions{LabelSelector: labelInstance + "=" + name})
			if err != nil {
				if apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err) {
					continue
				}
				t.Fatalf("listing %s: %v", r.Name, err)
			}
			for _, o := range objs.Items {
				found = append(found, r.Name+"/"+o.GetName())
			}
		}
	}
	slices.Sort(found)
	return found
}

// snapshotRVs returns the resourceVersion of the MyDatabase and of each of
// its children that exist, by "kind/name".
func snapshotRVs(t *testing.T, ns string) map[string]string {
	t.Helper()
	name := dbName
	rvs := map[string]string{}
	objs := map[string]client.Object{
		"MyDatabase/" + name:                        &databasev1alpha1.MyDatabase{},
		"StatefulSet/" + name:                       &appsv1.StatefulSet{},
		"Service/" + name + "-headless":             &corev1.Service{},
		"Service/" + name + "-rw":                   &corev1.Service{},
		"Service/" + name + "-ro":                   &corev1.Service{},
		"ConfigMap/" + name + "-config":             &corev1.ConfigMap{},
		"Secret/" + name + "-credentials":           &corev1.Secret{},
		"Secret/" + name + "-replication-tls":       &corev1.Secret{},
		"PodDisruptionBudget/" + name:               &policyv1.PodDisruptionBudget{},
		"PersistentVolumeClaim/data-" + name + "-0": &corev1.PersistentVolumeClaim{},
	}
	for key, obj := range objs {
		_, objName, _ := strings.Cut(key, "/")
		if exists(t, ns, objName, obj) {
			rvs[key] = obj.GetResourceVersion()
		}
	}
	return rvs
}

//go:build e2e

package e2e

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
)

// The Kubernetes side of a failover. KWOK pods run no process, so no
// instance manager takes the Lease or reports: the test stands in for them
// through the same channel (the Lease's holder, the role label and report
// annotation each instance manager writes on its own pod), and checks what
// the operator and the cluster make of it. Failover itself, on real
// servers, is TestHighAvailability in test/postgres.
func TestFailoverFollowsTheLease(t *testing.T) {
	ns := newNamespace(t, "failover", nil)
	applyDB(t, ns, 3, retain)
	waitReady(t, ns, 3, 120*time.Second)
	eventually(t, 30*time.Second, "x-rw routes to x-0 before any instance manager holds the Lease", func() (bool, string) {
		rw := readyEndpoints(t, ns, "x-rw")
		return slices.Equal(rw, []string{pod0}), fmt.Sprint(rw)
	})

	// The primary pod is lost; x-1's instance manager wins the election:
	// it takes the Lease, reports as primary and labels its own pod.
	kubectl(t, "", "delete", "pod", pod0, "-n", ns, "--wait=false")
	lease := &coordinationv1.Lease{}
	if !exists(t, ns, "x-primary", lease) {
		t.Fatal("Lease x-primary does not exist")
	}
	lease.Spec.HolderIdentity = new("x-1")
	lease.Spec.LeaseDurationSeconds = new(int32(5))
	if err := env.c.Update(ctx, lease); err != nil {
		t.Fatal(err)
	}
	standIn(t, ns, "x-1", `{"role":"primary","ready":true,"timeline":2,"lsn":"0/5000100","time":"2026-11-30T12:00:00Z"}`, "primary")
	standIn(t, ns, "x-2", `{"role":"replica","ready":true,"timeline":2,"lsn":"0/5000000","replayed":"0/5000000","time":"2026-11-30T12:00:00Z"}`, "replica")

	eventually(t, 60*time.Second, "x-rw routes to x-1, x-ro to x-0 (back) and x-2", func() (bool, string) {
		rw, ro := readyEndpoints(t, ns, "x-rw"), readyEndpoints(t, ns, "x-ro")
		return slices.Equal(rw, []string{"x-1"}) && slices.Equal(ro, []string{pod0, "x-2"}), fmt.Sprintf("x-rw %v, x-ro %v", rw, ro)
	})
	eventually(t, 30*time.Second, "roles: x-1 primary; x-0, back, a replica", func() (bool, string) {
		roles := map[string]string{}
		for _, p := range podsOf(t, ns, "x") {
			roles[p.Name] = p.Labels[labelRole]
		}
		return maps.Equal(roles, map[string]string{pod0: "replica", "x-1": "primary", "x-2": "replica"}), fmt.Sprint(roles)
	})
	eventually(t, 30*time.Second, "status: currentPrimary x-1, the reports in status.instances", func() (bool, string) {
		db := &databasev1alpha1.MyDatabase{}
		if !exists(t, ns, dbName, db) {
			return false, "no MyDatabase"
		}
		var got []string
		for _, i := range db.Status.Instances {
			got = append(got, fmt.Sprintf("%s %s lag %d", i.Name, i.Role, ptr.Deref(i.LagBytes, -1)))
		}
		want := []string{"x-1 primary lag -1", "x-2 replica lag 256"}
		return db.Status.CurrentPrimary == "x-1" && slices.Equal(got, want),
			fmt.Sprintf("currentPrimary %q, instances %v", db.Status.CurrentPrimary, got)
	})
	eventually(t, 30*time.Second, "a PrimaryChanged event", func() (bool, string) {
		list := &eventsv1.EventList{}
		if err := env.c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var reasons []string
		for _, e := range list.Items {
			if e.Reason == "PrimaryChanged" && strings.Contains(e.Note, "now x-1 (was x-0)") {
				return true, ""
			}
			reasons = append(reasons, e.Reason)
		}
		return false, fmt.Sprint(reasons)
	})
	waitReady(t, ns, 3, 120*time.Second)
}

// standIn writes what the instance manager of pod writes on its own pod:
// its report and its role label.
func standIn(t *testing.T, ns, pod, report, role string) {
	t.Helper()
	p := &corev1.Pod{}
	if !exists(t, ns, pod, p) {
		t.Fatalf("pod %s does not exist", pod)
	}
	patch := client.MergeFrom(p.DeepCopy())
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[contract.AnnotationInstance] = report
	p.Labels[labelRole] = role
	if err := env.c.Patch(ctx, p, patch); err != nil {
		t.Fatal(err)
	}
}

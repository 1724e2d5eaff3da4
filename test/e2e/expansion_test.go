//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// 9. Growing spec.storage.size expands every data volume in place: each
// claim asks for the new size and shows it in status.capacity (the
// provisioner plays the resizer and the kubelet), its volume has it, the
// StatefulSet is a new one whose template asks for it, and the pods, the
// claims and the volumes are the same ones; on the way the MyDatabase said
// StorageResizing, and it ends Ready.
func TestStorageGrowsInPlace(t *testing.T) {
	ns := newNamespace(t, "expand", nil)
	applyDB(t, ns, 2, retain)
	db := waitReady(t, ns, 2, 120*time.Second)

	oldSts := &appsv1.StatefulSet{}
	if !exists(t, ns, dbName, oldSts) {
		t.Fatal("StatefulSet x does not exist")
	}
	pods := map[string]types.UID{}
	for _, p := range podsOf(t, ns, dbName) {
		pods[p.Name] = p.UID
	}
	claims, volumes := map[string]types.UID{}, map[string]string{}
	for _, name := range []string{pvc0, pvc1} {
		pvc := &corev1.PersistentVolumeClaim{}
		if !exists(t, ns, name, pvc) || pvc.Spec.VolumeName == "" {
			t.Fatalf("PVC %s is not bound", name)
		}
		claims[name], volumes[name] = pvc.UID, pvc.Spec.VolumeName
	}

	reasons := watchReconcilingReasons(t, ns, db.ResourceVersion)
	kubectl(t, "", "patch", "mydatabase", dbName, "-n", ns, "--type=merge", "-p", `{"spec":{"storage":{"size":"2Gi"}}}`)

	eventually(t, 90*time.Second, "every claim and its volume at 2Gi", func() (bool, string) {
		var state []string
		for _, name := range []string{pvc0, pvc1} {
			pvc, pv := &corev1.PersistentVolumeClaim{}, &corev1.PersistentVolume{}
			if !exists(t, ns, name, pvc) || !exists(t, "", volumes[name], pv) {
				return false, name + " or its volume is missing"
			}
			request, capacity := pvc.Spec.Resources.Requests.Storage().String(), pvc.Status.Capacity.Storage().String()
			pending := slices.ContainsFunc(pvc.Status.Conditions, func(c corev1.PersistentVolumeClaimCondition) bool {
				return c.Type == corev1.PersistentVolumeClaimFileSystemResizePending
			})
			if request != "2Gi" || capacity != "2Gi" || pv.Spec.Capacity.Storage().String() != "2Gi" || pending {
				state = append(state, fmt.Sprintf("%s asks %s, has %s, FileSystemResizePending %v, volume %s",
					name, request, capacity, pending, pv.Spec.Capacity.Storage().String()))
			}
		}
		return len(state) == 0, strings.Join(state, "; ")
	})
	waitReady(t, ns, 2, 90*time.Second)

	sts := &appsv1.StatefulSet{}
	if !exists(t, ns, dbName, sts) || sts.UID == oldSts.UID {
		t.Errorf("StatefulSet x: uid %s, was %s: want a new one", sts.UID, oldSts.UID)
	}
	if got := sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().String(); got != "2Gi" {
		t.Errorf("StatefulSet x's volumeClaimTemplate asks for %s, want 2Gi", got)
	}
	for _, p := range podsOf(t, ns, dbName) {
		ref := metav1.GetControllerOf(&p)
		if p.UID != pods[p.Name] || ref == nil || ref.UID != sts.UID {
			t.Errorf("pod %s: uid %s, was %s; controller %v: want the same pod, adopted by the new StatefulSet %s",
				p.Name, p.UID, pods[p.Name], ref, sts.UID)
		}
	}
	for name, uid := range claims {
		pvc := &corev1.PersistentVolumeClaim{}
		if !exists(t, ns, name, pvc) || pvc.UID != uid || pvc.Spec.VolumeName != volumes[name] {
			t.Errorf("PVC %s: uid %s (was %s), volume %s (was %s): want the same claim and volume",
				name, pvc.UID, uid, pvc.Spec.VolumeName, volumes[name])
		}
	}
	if seen := reasons(); !slices.Contains(seen, databasev1alpha1.ReasonStorageResizing) {
		t.Errorf("the Reconciling reasons written during the expansion were %v, want %s among them", seen, databasev1alpha1.ReasonStorageResizing)
	}
}

// watchReconcilingReasons records the reason of every Reconciling
// condition written to the MyDatabase after resourceVersion rv; the
// function it returns stops the watch and returns them. Every status write
// is an event, so a state that lasted only between two polls is seen too.
func watchReconcilingReasons(t *testing.T, ns, rv string) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := env.dyn.Resource(databasev1alpha1.GroupVersion.WithResource("mydatabases")).Namespace(ns).Watch(ctx,
		metav1.ListOptions{FieldSelector: "metadata.name=" + dbName, ResourceVersion: rv})
	if err != nil {
		cancel()
		t.Fatalf("watching the MyDatabase: %v", err)
	}
	var (
		mu   sync.Mutex
		seen []string
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			db := &databasev1alpha1.MyDatabase{}
			if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, db) != nil {
				continue
			}
			if c := meta.FindStatusCondition(db.Status.Conditions, databasev1alpha1.ConditionReconciling); c != nil {
				mu.Lock()
				seen = append(seen, c.Reason)
				mu.Unlock()
			}
		}
	}()
	stop := func() []string {
		cancel()
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
	t.Cleanup(func() { stop() })
	return stop
}

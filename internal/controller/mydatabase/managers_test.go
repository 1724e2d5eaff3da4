package mydatabase

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
)

// fakeManagers plays the exec of contract.ReplaceCommand and the instance
// manager that re-executes: a replaced pod reports the new version.
type fakeManagers struct {
	mu       sync.Mutex
	replaced []string
	failing  map[string]bool
}

// newManager is the operator's instance manager in the tests.
var newManager = strings.Repeat("ab", 32)

func (f *fakeManagers) Digest() string { return newManager }

func (f *fakeManagers) Replace(ctx context.Context, pod *corev1.Pod) error {
	f.mu.Lock()
	f.replaced = append(f.replaced, pod.Name)
	failing := f.failing[pod.Name]
	f.mu.Unlock()
	if failing {
		return errors.New("the binary received does not run here")
	}
	return setManager(pod.Namespace, pod.Name, newManager)
}

// setManager makes a pod's report say instance manager digest.
func setManager(ns, name, digest string) error {
	pod := &corev1.Pod{}
	if err := get(ns, name, pod); err != nil {
		return err
	}
	r, err := contract.Parse(pod.Annotations[contract.AnnotationInstance])
	if err != nil {
		return err
	}
	r.Manager = digest
	pod.Annotations[contract.AnnotationInstance] = r.String()
	return k8s.Update(context.Background(), pod)
}

func (f *fakeManagers) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.replaced)
}

// reportManager plays an instance manager of version digest, and returns
// once the operator's cache has the report: an informer delivers a pod's
// update in no order with the MyDatabase's, so a test that changes the
// spec next would otherwise race it.
func reportManager(t *testing.T, db *databasev1alpha1.MyDatabase, name, digest string) {
	t.Helper()
	eventually(t, name+" reporting instance manager "+digest, func() error { return setManager(db.Namespace, name, digest) })
	eventually(t, "the operator's cache holding "+name+"'s report", func() error {
		pod := &corev1.Pod{}
		if err := reconciler.Client.Get(context.Background(), client.ObjectKey{Namespace: db.Namespace, Name: name}, pod); err != nil {
			return err
		}
		if r, err := contract.Parse(pod.Annotations[contract.AnnotationInstance]); err != nil || r.Manager != digest {
			return fmt.Errorf("it has %+v (%v)", r, err)
		}
		return nil
	})
}

// TestInstanceManagersReplacedInPlace: instance managers that report
// another version than the operator's are replaced one at a time, the
// replicas first and the primary last, with an event each; no pod is
// deleted and status.instances shows the new version. A replacement that
// fails is a Warning event, and not tried again at every pass.
func TestInstanceManagersReplacedInPlace(t *testing.T) {
	ns := namespace(t)
	db := readyPair(t, ns, "imu")
	uids := map[string]string{}
	for _, name := range []string{"imu-0", "imu-1"} {
		pod := &corev1.Pod{}
		if err := get(ns, name, pod); err != nil {
			t.Fatal(err)
		}
		uids[name] = string(pod.UID)
	}
	old := strings.Repeat("01", 32)
	managers.mu.Lock()
	managers.failing = map[string]bool{}
	managers.mu.Unlock()
	// Both report the old version before the operator looks (paused): the
	// primary (imu-0) waits for the replica, a canary for the new binary.
	update(t, db, func(db *databasev1alpha1.MyDatabase) { db.Spec.Paused = true })
	// Once a pass has said Paused, no pass acts: one ran from a cache
	// that had not seen the pause yet replaced imu-0's report (the
	// primary's, imu-1 already current) under the next lines.
	waitFor(t, db, "Paused", phaseIs(databasev1alpha1.PhasePaused))
	reportManager(t, db, "imu-0", old)
	reportManager(t, db, "imu-1", old)
	update(t, db, func(db *databasev1alpha1.MyDatabase) { db.Spec.Paused = false })
	waitFor(t, db, "both instance managers replaced", func(db *databasev1alpha1.MyDatabase) error {
		for _, in := range db.Status.Instances {
			if in.Manager != short(newManager) {
				return fmt.Errorf("%s runs instance manager %q", in.Name, in.Manager)
			}
		}
		if len(db.Status.Instances) != 2 {
			return fmt.Errorf("%d instances", len(db.Status.Instances))
		}
		return nil
	})
	var mine []string
	for _, name := range managers.calls() {
		if strings.HasPrefix(name, "imu-") {
			mine = append(mine, name)
		}
	}
	if want := []string{"imu-1", "imu-0"}; !slices.Equal(mine, want) {
		t.Errorf("replaced %v, want %v: the replica first, the primary last, each once", mine, want)
	}
	eventually(t, "an event for the primary", eventWith(ns, "InstanceManagerReplaced",
		fmt.Sprintf("Replaced the instance manager of imu-0 in place (%s to %s); PostgreSQL kept running", short(old), short(newManager))))
	for name, uid := range uids {
		pod := &corev1.Pod{}
		if err := get(ns, name, pod); err != nil || string(pod.UID) != uid || !pod.DeletionTimestamp.IsZero() {
			t.Errorf("%s was deleted or replaced (%v)", name, err)
		}
	}

	// A failure: one try, a Warning, no retry within replaceRetry (the
	// clock of the tests stands still).
	managers.mu.Lock()
	managers.failing["imu-1"] = true
	managers.mu.Unlock()
	reportManager(t, db, "imu-1", old)
	eventually(t, "a Warning for imu-1", eventWith(ns, "InstanceManagerReplaceFailed", "the binary received does not run here"))
	reportRole(t, db, "imu-0", databasev1alpha1.RolePrimary, "0/5000200") // passes go on
	reportManager(t, db, "imu-0", newManager)
	time.Sleep(time.Second)
	tries := 0
	for _, name := range managers.calls() {
		if name == "imu-1" {
			tries++
		}
	}
	if tries != 2 {
		t.Errorf("imu-1 replaced %d times: want once when it succeeded and once when it failed", tries)
	}
}

// TestKeptInstanceManagerImage: a new operator's image goes into the
// template only when something else changes there too, when an instance
// manager that reports cannot be replaced in place, or with Restart.
func TestKeptInstanceManagerImage(t *testing.T) {
	db := newDB("ns", "keep")
	db.Spec.Version = "17"
	template := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		databasev1alpha1.AnnotationPodTemplate: specs.PodTemplateDigest(db)}}}
	template.Spec.InitContainers = []corev1.Container{{Name: "instance-manager", Image: "operator:v1"}}
	live := &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Template: template}}
	ownImage := live.DeepCopy()
	ownImage.Spec.Template.Spec.InitContainers[0].Image = specs.DefaultInstanceManagerImage
	// A pod of that template, reporting.
	pod := func(report string) corev1.Pod {
		p := corev1.Pod{ObjectMeta: *template.ObjectMeta.DeepCopy(), Spec: template.Spec}
		p.Annotations[contract.AnnotationInstance] = report
		return p
	}
	capable, incapable := fmt.Sprintf(`{"ready":true,"manager":%q,"time":"2026-01-02T03:04:06Z"}`, newManager), `{"ready":true,"time":"2026-01-02T03:04:06Z"}`
	changed := db.DeepCopy()
	changed.Spec.Version = "17.2"
	restart := db.DeepCopy()
	restart.Spec.InstanceManagerUpdate = databasev1alpha1.InstanceManagerUpdateRestart
	for _, c := range []struct {
		name     string
		managers ManagerReplacer
		want     *databasev1alpha1.MyDatabase
		sts      *appsv1.StatefulSet
		pods     []corev1.Pod
		kept     string
	}{
		{"only the operator changed", &fakeManagers{}, db, live, []corev1.Pod{pod(capable), {}}, "operator:v1"},
		{"the StatefulSet being replaced: its pods stand for it", &fakeManagers{}, db, nil, []corev1.Pod{pod(capable)}, "operator:v1"},
		{"the template changed too", &fakeManagers{}, changed, live, []corev1.Pod{pod(capable)}, ""},
		{"an instance manager that cannot be replaced", &fakeManagers{}, db, live, []corev1.Pod{pod(capable), pod(incapable)}, ""},
		{"Restart", &fakeManagers{}, restart, live, []corev1.Pod{pod(capable)}, ""},
		{"no instance manager to replace with", nil, db, live, []corev1.Pod{pod(capable)}, ""},
		{"nothing yet", &fakeManagers{}, db, nil, nil, ""},
		{"the operator's own image already", &fakeManagers{}, db, ownImage, []corev1.Pod{pod(capable)}, ""},
	} {
		r := &servers{kit: &kit{Managers: c.managers}, scope: &scope{db: c.want, sts: c.sts, pods: c.pods}}
		if got := r.keptInstanceManagerImage(c.want); got != c.kept {
			t.Errorf("%s: kept %q, want %q", c.name, got, c.kept)
		}
	}
}

package mydatabase

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// TestPodMonitor: spec.monitoring.podMonitor before the cluster has the
// PodMonitor CRD reports MonitoringReady False (PodMonitorCRDMissing) and
// nothing else breaks; once the CRD is installed the PodMonitor appears,
// owned by the MyDatabase, scraping port metrics of its pods; a
// MyDatabase that does not ask has none and no condition; false deletes
// it and removes the condition.
func TestPodMonitor(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "mon", func(db *databasev1alpha1.MyDatabase) { db.Spec.Monitoring.PodMonitor = true }))
	other := create(t, newDB(ns, "quiet"))
	condition := func(name string, want *metav1.Condition) func() error {
		return func() error {
			got := &databasev1alpha1.MyDatabase{}
			if err := get(ns, name, got); err != nil {
				return err
			}
			c := meta.FindStatusCondition(got.Status.Conditions, databasev1alpha1.ConditionMonitoringReady)
			switch {
			case want == nil && c == nil:
				return nil
			case want == nil:
				return fmt.Errorf("condition %s %s, want none", c.Status, c.Reason)
			case c == nil:
				return errors.New("no MonitoringReady condition")
			case c.Status != want.Status || c.Reason != want.Reason:
				return fmt.Errorf("MonitoringReady %s %s (%s), want %s %s", c.Status, c.Reason, c.Message, want.Status, want.Reason)
			}
			return nil
		}
	}
	eventually(t, "MonitoringReady False without the CRD", condition("mon",
		&metav1.Condition{Status: metav1.ConditionFalse, Reason: databasev1alpha1.ReasonPodMonitorCRDMissing}))

	if _, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join("testdata", "podmonitor-crd.yaml")}}); err != nil {
		t.Fatal(err)
	}
	podMonitor := func(name string) (*unstructured.Unstructured, error) {
		pm := &unstructured.Unstructured{}
		pm.SetGroupVersionKind(specs.PodMonitorGVK)
		return pm, get(ns, name, pm)
	}
	eventually(t, "the PodMonitor once the CRD exists", func() error {
		pm, err := podMonitor("mon")
		if err != nil {
			return err
		}
		if ref := metav1.GetControllerOf(pm); ref == nil || ref.UID != db.UID {
			return fmt.Errorf("controller reference %v, want the MyDatabase's", ref)
		}
		// As built (internal/specs pins its content): the CRD's schema
		// prunes any field it does not know.
		raw, err := json.Marshal(specs.PodMonitor(db))
		if err != nil {
			return err
		}
		var want map[string]any
		if err := json.Unmarshal(raw, &want); err != nil {
			return err
		}
		if diff := cmp.Diff(want["spec"], pm.Object["spec"]); diff != "" {
			return fmt.Errorf("spec (-want +got):\n%s", diff)
		}
		return nil
	})
	eventually(t, "MonitoringReady True", condition("mon",
		&metav1.Condition{Status: metav1.ConditionTrue, Reason: databasev1alpha1.ReasonPodMonitorApplied}))
	if _, err := podMonitor("quiet"); err == nil {
		t.Errorf("a PodMonitor for %s, which did not ask for one", other.Name)
	}
	if err := condition("quiet", nil)(); err != nil {
		t.Errorf("%s: %v", other.Name, err)
	}

	update(t, db, func(db *databasev1alpha1.MyDatabase) { db.Spec.Monitoring.PodMonitor = false })
	pm := &unstructured.Unstructured{}
	pm.SetGroupVersionKind(specs.PodMonitorGVK)
	eventually(t, "the PodMonitor gone", gone(ns, "mon", pm))
	eventually(t, "MonitoringReady removed", condition("mon", nil))
}

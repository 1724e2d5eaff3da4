package specs

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/pki"
)

// Every key and every value that does not name one MyDatabase, on every
// child the builders make, is in SharedStrings: a label added later cannot
// silently cost memory per MyDatabase.
func TestSharedStringsCoverEveryChild(t *testing.T) {
	d := db(func(d *databasev1alpha1.MyDatabase) { d.Spec.Replicas = ptr.To[int32](3) })
	sts := typed[appsv1.StatefulSet](t, StatefulSet(d, Platform{}))
	cm := typed[corev1.ConfigMap](t, ConfigMap(d))
	metas := []metav1.ObjectMeta{
		cm.ObjectMeta, sts.ObjectMeta, sts.Spec.Template.ObjectMeta, sts.Spec.VolumeClaimTemplates[0].ObjectMeta,
		typed[corev1.Service](t, HeadlessService(d)).ObjectMeta,
		typed[corev1.Service](t, ReadWriteService(d)).ObjectMeta,
		typed[corev1.Service](t, ReadOnlyService(d)).ObjectMeta,
		typed[policyv1.PodDisruptionBudget](t, PodDisruptionBudget(d)).ObjectMeta,
		CredentialsSecret(d, "pw").ObjectMeta, ReplicationCertSecret(d, pki.KeyPair{}, nil).ObjectMeta,
	}
	shared := SharedStrings()
	perDatabase := map[string]bool{databasev1alpha1.LabelInstance: true, databasev1alpha1.LabelOwnerUID: true}
	for _, m := range metas {
		for k, v := range m.Labels {
			if !slices.Contains(shared, k) || (!perDatabase[k] && !slices.Contains(shared, v)) {
				t.Errorf("%s: label %s=%s is not in SharedStrings", m.Name, k, v)
			}
		}
		for k := range m.Annotations {
			if !slices.Contains(shared, k) {
				t.Errorf("%s: annotation key %s is not in SharedStrings", m.Name, k)
			}
		}
	}
}

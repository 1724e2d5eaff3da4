package specs

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// SharedStrings are the strings the children of every MyDatabase repeat
// verbatim in their metadata: label and annotation keys, the label values
// that do not depend on the MyDatabase, owner reference kinds, and the
// labels Kubernetes adds to StatefulSet pods. The operator's cache points
// equal strings of the children it keeps decoded at one copy of these
// (internal/leancache); a test keeps the list complete.
func SharedStrings() []string {
	return []string{
		databasev1alpha1.LabelName, databasev1alpha1.LabelInstance, databasev1alpha1.LabelComponent, databasev1alpha1.LabelManagedBy, databasev1alpha1.LabelOwnerUID, databasev1alpha1.LabelRole,
		databasev1alpha1.AnnotationSpecHash, databasev1alpha1.AnnotationConfigHash, databasev1alpha1.AnnotationPodTemplate, databasev1alpha1.AnnotationPasswordDigest,
		databasev1alpha1.ManagedBy, databasev1alpha1.RolePrimary, databasev1alpha1.RoleReplica, string(databasev1alpha1.EnginePostgres),
		ComponentDatabase, ComponentCredentials, ComponentConfig, ComponentService, ComponentTLS,
		"controller-revision-hash", "statefulset.kubernetes.io/pod-name", "apps.kubernetes.io/pod-index",
		databasev1alpha1.GroupVersion.String(), "MyDatabase", "apps/v1", "StatefulSet", // owner references
	}
}

// SamplePodSpecs are the pod templates of the StatefulSets of two
// MyDatabases that differ only in name, namespace and uid, with the CRD's
// defaults (those the StatefulSet reads; api/v1alpha1's markers): the
// strings found in both are the same in every pod the operator makes, and
// the operator's cache keeps one copy of each (internal/leancache).
func SamplePodSpecs() [2]*corev1ac.PodSpecApplyConfiguration {
	return [2]*corev1ac.PodSpecApplyConfiguration{
		StatefulSet(SampleDatabase("first"), Platform{}).Spec.Template.Spec,
		StatefulSet(SampleDatabase("second"), Platform{}).Spec.Template.Spec,
	}
}

// SampleDatabase is a MyDatabase named name with the CRD's defaults, in a
// namespace and with a uid of its own.
func SampleDatabase(name string) *databasev1alpha1.MyDatabase {
	return &databasev1alpha1.MyDatabase{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: name + "-ns", UID: types.UID(name + "-uid")},
		Spec: databasev1alpha1.MyDatabaseSpec{
			Engine: databasev1alpha1.EnginePostgres, Version: "17", Replicas: ptr.To[int32](1),
			DatabaseName: "app", User: "app", DeletionPolicy: databasev1alpha1.DeletionPolicyRetain,
			Service: databasev1alpha1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Port: 5432},
		},
	}
}

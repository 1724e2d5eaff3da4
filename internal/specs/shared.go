package specs

import (
	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// SharedStrings are the strings the children of every MyDatabase repeat
// verbatim in their metadata: label and annotation keys, the label values
// that do not depend on the MyDatabase, owner reference kinds, and the
// labels Kubernetes adds to StatefulSet pods. The operator's cache points
// equal strings of the children it keeps decoded at one copy of these
// (internal/manager/cache.go); a test keeps the list complete.
func SharedStrings() []string {
	return []string{
		databasev1alpha1.LabelName, databasev1alpha1.LabelInstance, databasev1alpha1.LabelComponent, databasev1alpha1.LabelManagedBy, databasev1alpha1.LabelOwnerUID, databasev1alpha1.LabelRole,
		databasev1alpha1.AnnotationSpecHash, databasev1alpha1.AnnotationConfigHash, databasev1alpha1.AnnotationPasswordDigest,
		databasev1alpha1.ManagedBy, databasev1alpha1.RolePrimary, databasev1alpha1.RoleReplica, string(databasev1alpha1.EnginePostgres),
		ComponentDatabase, ComponentCredentials, ComponentConfig, ComponentService, ComponentTLS,
		"controller-revision-hash", "statefulset.kubernetes.io/pod-name", "apps.kubernetes.io/pod-index",
		databasev1alpha1.GroupVersion.String(), "MyDatabase", "apps/v1", "StatefulSet", // owner references
	}
}

package specs

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// Label keys. The app.kubernetes.io ones follow the Kubernetes recommended
// labels; the others are this operator's own.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelComponent = "app.kubernetes.io/component"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// LabelOwnerUID carries the UID of the MyDatabase that owns the object.
	// Cleanup selects by it, never by name alone, so a new MyDatabase of the
	// same name never loses what belongs to it.
	LabelOwnerUID = "database.example.com/owner-uid"
	// LabelRole is set by the operator on each pod: primary or replica.
	LabelRole = "database.example.com/role"
	// AnnotationSpecHash is the hash of the applied configuration of a child;
	// the reconciler skips the write when it and the live object agree.
	AnnotationSpecHash = "database.example.com/spec-hash"
	// AnnotationConfigHash on the pod template rolls the pods when the
	// PostgreSQL configuration changes.
	AnnotationConfigHash = "database.example.com/config-hash"

	// ManagedBy is the value of app.kubernetes.io/managed-by on every child;
	// the operator's cache only holds objects with this label.
	ManagedBy = "myoperator"

	RolePrimary = "primary"
	RoleReplica = "replica"

	ComponentDatabase    = "database"
	ComponentCredentials = "credentials"
	ComponentConfig      = "config"
	ComponentService     = "service"
)

// Child names. They are deterministic so that a MyDatabase of the same name
// finds and adopts what a deleted one retained.
func StatefulSetName(db *databasev1alpha1.MyDatabase) string { return db.Name }
func HeadlessServiceName(db *databasev1alpha1.MyDatabase) string {
	return db.Name + "-headless"
}
func ReadWriteServiceName(db *databasev1alpha1.MyDatabase) string { return db.Name + "-rw" }
func ReadOnlyServiceName(db *databasev1alpha1.MyDatabase) string  { return db.Name + "-ro" }
func ConfigMapName(db *databasev1alpha1.MyDatabase) string        { return db.Name + "-config" }
func PodDisruptionBudgetName(db *databasev1alpha1.MyDatabase) string {
	return db.Name
}
func ReplicationSecretName(db *databasev1alpha1.MyDatabase) string { return db.Name + "-replication" }

// GeneratedCredentialsSecretName is the Secret the operator creates when the
// spec names none.
func GeneratedCredentialsSecretName(db *databasev1alpha1.MyDatabase) string {
	return db.Name + "-credentials"
}

// CredentialsSecretName is the Secret the database's password comes from.
func CredentialsSecretName(db *databasev1alpha1.MyDatabase) string {
	if UserSuppliedCredentials(db) {
		return db.Spec.Credentials.SecretName
	}
	return GeneratedCredentialsSecretName(db)
}

// UserSuppliedCredentials reports whether spec.credentials names a Secret.
func UserSuppliedCredentials(db *databasev1alpha1.MyDatabase) bool {
	return db.Spec.Credentials != nil && db.Spec.Credentials.SecretName != ""
}

// DataVolumeName is the volumeClaimTemplate name; PVCs are named
// <DataVolumeName>-<statefulset>-<ordinal>.
const DataVolumeName = "data"

// SelectorLabels select the pods of a MyDatabase. They never change over the
// life of a StatefulSet (its selector is immutable).
func SelectorLabels(db *databasev1alpha1.MyDatabase) map[string]string {
	return map[string]string{
		LabelName:      string(engine(db)),
		LabelInstance:  db.Name,
		LabelComponent: ComponentDatabase,
		LabelManagedBy: ManagedBy,
	}
}

// Selector is SelectorLabels as a string, for status.selector.
func Selector(db *databasev1alpha1.MyDatabase) string {
	return labels.SelectorFromSet(SelectorLabels(db)).String()
}

// Labels are the labels of a child of the given component.
func Labels(db *databasev1alpha1.MyDatabase, component string) map[string]string {
	return map[string]string{
		LabelName:      string(engine(db)),
		LabelInstance:  db.Name,
		LabelComponent: component,
		LabelManagedBy: ManagedBy,
		LabelOwnerUID:  string(db.UID),
	}
}

// PodRole is the role label a pod of the StatefulSet named statefulSet
// should carry: ordinal 0 is the primary, every other pod a replica.
func PodRole(statefulSet, pod string) string {
	if pod == statefulSet+"-0" {
		return RolePrimary
	}
	return RoleReplica
}

// InstanceLabels select every child of the MyDatabase of this name, whatever
// its owner UID; callers add LabelOwnerUID to narrow to one owner.
func InstanceLabels(db *databasev1alpha1.MyDatabase) map[string]string {
	return map[string]string{LabelInstance: db.Name, LabelManagedBy: ManagedBy}
}

// OwnerReference is the controller reference of every owned child.
func OwnerReference(db *databasev1alpha1.MyDatabase) metav1.OwnerReference {
	return *metav1.NewControllerRef(db, databasev1alpha1.GroupVersion.WithKind("MyDatabase"))
}

func ownerReferenceApply(db *databasev1alpha1.MyDatabase) *metav1ac.OwnerReferenceApplyConfiguration {
	ref := OwnerReference(db)
	return metav1ac.OwnerReference().WithAPIVersion(ref.APIVersion).WithKind(ref.Kind).
		WithName(ref.Name).WithUID(ref.UID).WithController(true).WithBlockOwnerDeletion(true)
}

func engine(db *databasev1alpha1.MyDatabase) databasev1alpha1.Engine {
	if db.Spec.Engine == "" {
		return databasev1alpha1.EnginePostgres
	}
	return db.Spec.Engine
}

// Replicas is spec.replicas, 1 when unset.
func Replicas(db *databasev1alpha1.MyDatabase) int32 {
	if db.Spec.Replicas == nil {
		return 1
	}
	return *db.Spec.Replicas
}

package specs

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// Component label values.
const (
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

// LegacyReplicationSecretName held the replication password of a
// MyDatabase made before replicas authenticated by certificate. The
// operator deletes it once no pod can need it (credentials.go); until
// then an instance manager may fall back to it (internal/instance,
// replication.go).
func LegacyReplicationSecretName(db *databasev1alpha1.MyDatabase) string {
	return db.Name + "-replication"
}

// LeaseName is the primary Lease: its holder is the primary.
func LeaseName(db *databasev1alpha1.MyDatabase) string { return db.Name + "-primary" }

// InstanceAccessName names the ServiceAccount, Role and RoleBinding of the
// instance managers.
func InstanceAccessName(db *databasev1alpha1.MyDatabase) string { return db.Name + "-instance" }

// BootstrapPod is the pod that makes the data of a new MyDatabase.
func BootstrapPod(db *databasev1alpha1.MyDatabase) string { return PodName(db, 0) }

// PodName is the name of the pod of the given ordinal.
func PodName(db *databasev1alpha1.MyDatabase, ordinal int32) string {
	return fmt.Sprintf("%s-%d", StatefulSetName(db), ordinal)
}

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

// The volumeClaimTemplates' names (Volumes); PVCs are named
// <name>-<statefulset>-<ordinal>.
const (
	DataVolumeName = "data"
	WALVolumeName  = "wal"
)

// DataVolumeClaimName is the PVC the StatefulSet controller makes from the
// data volumeClaimTemplate for the server of this ordinal.
func DataVolumeClaimName(db *databasev1alpha1.MyDatabase, ordinal int32) string {
	return Volumes(db)[0].ClaimName(db, ordinal)
}

// SelectorLabels select the pods of a MyDatabase. They never change over the
// life of a StatefulSet (its selector is immutable).
func SelectorLabels(db *databasev1alpha1.MyDatabase) map[string]string {
	return map[string]string{
		databasev1alpha1.LabelName:      string(engine(db)),
		databasev1alpha1.LabelInstance:  db.Name,
		databasev1alpha1.LabelComponent: ComponentDatabase,
		databasev1alpha1.LabelManagedBy: databasev1alpha1.ManagedBy,
	}
}

// Selector is SelectorLabels as a string, for status.selector.
func Selector(db *databasev1alpha1.MyDatabase) string {
	return labels.SelectorFromSet(SelectorLabels(db)).String()
}

// Labels are the labels of a child of the given component.
func Labels(db *databasev1alpha1.MyDatabase, component string) map[string]string {
	return map[string]string{
		databasev1alpha1.LabelName:      string(engine(db)),
		databasev1alpha1.LabelInstance:  db.Name,
		databasev1alpha1.LabelComponent: component,
		databasev1alpha1.LabelManagedBy: databasev1alpha1.ManagedBy,
		databasev1alpha1.LabelOwnerUID:  string(db.UID),
	}
}

// PrimaryPod is the pod that runs the primary as the operator last saw it:
// status.currentPrimary, which follows the primary Lease, or ordinal 0
// before any instance manager has taken the Lease (a new MyDatabase, whose
// ordinal 0 initialises the data; or pods that run no instance manager, as
// on a simulated cluster).
func PrimaryPod(db *databasev1alpha1.MyDatabase) string {
	if db.Status.CurrentPrimary != "" {
		return db.Status.CurrentPrimary
	}
	return BootstrapPod(db)
}

// KnownRole reports whether role is one the operator sets.
func KnownRole(role string) bool {
	return role == databasev1alpha1.RolePrimary || role == databasev1alpha1.RoleReplica
}

// InstanceLabels select every child of the MyDatabase of this name, whatever
// its owner UID; callers add databasev1alpha1.LabelOwnerUID to narrow to one owner.
func InstanceLabels(db *databasev1alpha1.MyDatabase) map[string]string {
	return map[string]string{databasev1alpha1.LabelInstance: db.Name, databasev1alpha1.LabelManagedBy: databasev1alpha1.ManagedBy}
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

// PodReady reports whether the pod's Ready condition is True.
func PodReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

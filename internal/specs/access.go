package specs

import (
	coordinationv1ac "k8s.io/client-go/applyconfigurations/coordination/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
)

// ComponentInstance labels what the instance managers use: their
// ServiceAccount, Role and RoleBinding, and the primary Lease.
const ComponentInstance = "instance"

// Lease is the primary Lease, created without a holder: the instance
// managers take, renew and release it (internal/instance). The operator
// creates it, so that it carries an owner reference and goes with the
// MyDatabase, reads its holder, and keeps on it the quorum the instance
// managers replicate and elect by (contract.AnnotationQuorum), and the
// roles and databases the primary's applies (contract.AnnotationDeclared),
// and whether a replica MyDatabase follows its source or is promoted
// (contract.AnnotationReplica): there a change needs no pod restart. sole, when set, is the member that alone holds data
// (contract.Quorum.Sole); pooled, whether a MyDatabasePooler leads to db
// (contract.Declared.Pooler).
func Lease(db *databasev1alpha1.MyDatabase, sole string, pooled bool) *coordinationv1ac.LeaseApplyConfiguration {
	q := QuorumOf(db)
	q.Sole = sole
	annotations := map[string]string{contract.AnnotationQuorum: q.String()}
	if d := DeclaredOf(db, pooled); d != nil {
		annotations[contract.AnnotationDeclared] = d.String()
	}
	if r := Replica(db); r != nil {
		annotations[contract.AnnotationReplica] = contract.ReplicaFollow
		if !r.Enabled {
			annotations[contract.AnnotationReplica] = contract.ReplicaPromote
			if r.PromotionToken != "" {
				annotations[contract.AnnotationPromotionToken] = r.PromotionToken
			}
		}
	}
	return coordinationv1ac.Lease(LeaseName(db), db.Namespace).
		WithLabels(Labels(db, ComponentInstance)).
		WithAnnotations(annotations).
		WithOwnerReferences(ownerReferenceApply(db))
}

// QuorumOf is the quorum spec.replication asks for.
func QuorumOf(db *databasev1alpha1.MyDatabase) contract.Quorum {
	q := contract.Quorum{Instances: Replicas(db)}
	if sync := db.Spec.Replication.Synchronous; sync != nil {
		q.Synchronous = sync.Number
		q.Required = sync.Durability != databasev1alpha1.DurabilityPreferred
	}
	return q
}

// InstanceServiceAccount is the identity of the database pods.
func InstanceServiceAccount(db *databasev1alpha1.MyDatabase) *corev1ac.ServiceAccountApplyConfiguration {
	return corev1ac.ServiceAccount(InstanceAccessName(db), db.Namespace).
		WithLabels(Labels(db, ComponentInstance)).
		WithOwnerReferences(ownerReferenceApply(db))
}

// InstanceRole is all an instance manager may do: read and update its
// MyDatabase's Lease, read the pods of its namespace (the reports of its
// peers; RBAC cannot narrow a list to a label), and patch its own pods'
// role label and report. Names, not labels, bound what it may change, so
// the Role lists the pods of every ordinal up to spec.replicas.
func InstanceRole(db *databasev1alpha1.MyDatabase) *rbacv1ac.RoleApplyConfiguration {
	pods := make([]string, Replicas(db))
	for i := range pods {
		pods[i] = PodName(db, int32(i))
	}
	return rbacv1ac.Role(InstanceAccessName(db), db.Namespace).
		WithLabels(Labels(db, ComponentInstance)).
		WithOwnerReferences(ownerReferenceApply(db)).
		WithRules(
			rbacv1ac.PolicyRule().WithAPIGroups("coordination.k8s.io").WithResources("leases").
				WithResourceNames(LeaseName(db)).WithVerbs("get", "watch", "update"),
			rbacv1ac.PolicyRule().WithAPIGroups("").WithResources("pods").WithVerbs("get", "list"),
			rbacv1ac.PolicyRule().WithAPIGroups("").WithResources("secrets").WithResourceNames(PasswordSecretNames(db)...).WithVerbs("get"),
			// Its own pod: the report, and the watch that brings backup
			// requests (a watch of one name is authorized by its name).
			rbacv1ac.PolicyRule().WithAPIGroups("").WithResources("pods").
				WithResourceNames(pods...).WithVerbs("patch", "watch"))
}

// InstanceRoleBinding grants InstanceRole to InstanceServiceAccount.
func InstanceRoleBinding(db *databasev1alpha1.MyDatabase) *rbacv1ac.RoleBindingApplyConfiguration {
	return rbacv1ac.RoleBinding(InstanceAccessName(db), db.Namespace).
		WithLabels(Labels(db, ComponentInstance)).
		WithOwnerReferences(ownerReferenceApply(db)).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup("rbac.authorization.k8s.io").WithKind("Role").WithName(InstanceAccessName(db))).
		WithSubjects(rbacv1ac.Subject().WithKind("ServiceAccount").WithName(InstanceAccessName(db)).WithNamespace(db.Namespace))
}

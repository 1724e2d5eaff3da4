package specs

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

const portName = "postgres"

// HeadlessService gives every pod a stable DNS name
// (<name>-<ordinal>.<name>-headless); the replicas find the primary through
// it. Not-ready pods are published so a replica can reach a primary that is
// still starting.
func HeadlessService(db *databasev1alpha1.MyDatabase) *corev1ac.ServiceApplyConfiguration {
	return corev1ac.Service(HeadlessServiceName(db), db.Namespace).
		WithLabels(Labels(db, ComponentService)).
		WithOwnerReferences(ownerReferenceApply(db)).
		WithSpec(corev1ac.ServiceSpec().
			WithClusterIP(corev1.ClusterIPNone).
			WithPublishNotReadyAddresses(true).
			WithSelector(SelectorLabels(db)).
			WithPorts(servicePort(containerPort)))
}

// ReadWriteService selects the primary by its role label, which its
// instance manager sets the moment it is promoted (and the operator from
// the Lease): the Service follows a failover even while the operator is
// down. A fenced former primary that still carries the label is not ready,
// so it is no endpoint.
func ReadWriteService(db *databasev1alpha1.MyDatabase) *corev1ac.ServiceApplyConfiguration {
	selector := SelectorLabels(db)
	selector[databasev1alpha1.LabelRole] = databasev1alpha1.RolePrimary
	return clientService(db, ReadWriteServiceName(db), selector)
}

// ReadOnlyService selects the replicas, labelled role=replica. It exists only while spec.replicas > 1.
func ReadOnlyService(db *databasev1alpha1.MyDatabase) *corev1ac.ServiceApplyConfiguration {
	selector := SelectorLabels(db)
	selector[databasev1alpha1.LabelRole] = databasev1alpha1.RoleReplica
	return clientService(db, ReadOnlyServiceName(db), selector)
}

func clientService(db *databasev1alpha1.MyDatabase, name string, selector map[string]string) *corev1ac.ServiceApplyConfiguration {
	serviceType := db.Spec.Service.Type
	if serviceType == "" {
		serviceType = corev1.ServiceTypeClusterIP
	}
	return corev1ac.Service(name, db.Namespace).
		WithLabels(Labels(db, ComponentService)).
		WithOwnerReferences(ownerReferenceApply(db)).
		WithSpec(corev1ac.ServiceSpec().
			WithType(serviceType).
			WithSelector(maps.Clone(selector)).
			WithPorts(servicePort(ServicePort(db))))
}

func servicePort(port int32) *corev1ac.ServicePortApplyConfiguration {
	return corev1ac.ServicePort().
		WithName(portName).
		WithProtocol(corev1.ProtocolTCP).
		WithPort(port).
		WithTargetPort(intstr.FromString(portName))
}

package specs

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// NetworkPolicyName is the NetworkPolicy of spec.networkPolicy.
func NetworkPolicyName(db *databasev1alpha1.MyDatabase) string { return db.Name }

// NetworkPolicyEnabled reports whether spec.networkPolicy asks for one.
func NetworkPolicyEnabled(db *databasev1alpha1.MyDatabase) bool { return db.Spec.NetworkPolicy.Enabled }

// NetworkPolicy admits to the database port of the servers only:
//   - the clients spec.networkPolicy.clients lists;
//   - the other instances of this MyDatabase (streaming replication,
//     pg_rewind and the clone of a new replica; on the metrics port, the
//     failsafe promises of internal/instance);
//
// and to the metrics port only the peers spec.networkPolicy.metricsClients
// lists (Prometheus).
//
// Nothing else reaches the servers: the operator itself never connects to
// them (the instance managers report through the API server), so it needs
// no rule. Egress is not restricted. Once any NetworkPolicy selects a pod,
// a CNI that enforces policies drops every connection no policy admits.
func NetworkPolicy(db *databasev1alpha1.MyDatabase) *networkingv1ac.NetworkPolicyApplyConfiguration {
	port := networkingv1ac.NetworkPolicyPort().WithProtocol(corev1.ProtocolTCP).WithPort(intstr.FromInt32(containerPort))
	// The metrics port serves the instances' failsafe endpoint too.
	failsafe := networkingv1ac.NetworkPolicyPort().WithProtocol(corev1.ProtocolTCP).WithPort(intstr.FromInt32(MetricsPort))
	instances := networkingv1ac.NetworkPolicyIngressRule().WithPorts(port, failsafe).
		WithFrom(networkingv1ac.NetworkPolicyPeer().WithPodSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(db))))
	spec := networkingv1ac.NetworkPolicySpec().
		WithPodSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(db))).
		WithPolicyTypes("Ingress").
		WithIngress(instances)
	if clients := db.Spec.NetworkPolicy.Clients; len(clients) > 0 {
		spec.WithIngress(admit(containerPort, clients))
	}
	if scrapers := db.Spec.NetworkPolicy.MetricsClients; len(scrapers) > 0 {
		spec.WithIngress(admit(MetricsPort, scrapers))
	}
	return networkingv1ac.NetworkPolicy(NetworkPolicyName(db), db.Namespace).
		WithLabels(Labels(db, ComponentDatabase)).
		WithOwnerReferences(ownerReferenceApply(db)).
		WithSpec(spec)
}

// admit is a rule that admits peers to a TCP port.
func admit(port int32, peers []networkingv1.NetworkPolicyPeer) *networkingv1ac.NetworkPolicyIngressRuleApplyConfiguration {
	rule := networkingv1ac.NetworkPolicyIngressRule().
		WithPorts(networkingv1ac.NetworkPolicyPort().WithProtocol(corev1.ProtocolTCP).WithPort(intstr.FromInt32(port)))
	for i := range peers {
		rule.WithFrom(convert[networkingv1ac.NetworkPolicyPeerApplyConfiguration](peers[i]))
	}
	return rule
}

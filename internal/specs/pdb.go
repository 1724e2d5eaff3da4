package specs

import (
	"k8s.io/apimachinery/pkg/util/intstr"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// PodDisruptionBudget lets a voluntary disruption (a node drain) take one
// server at a time. It exists only while spec.replicas > 1: with a single
// server it would block every drain forever.
func PodDisruptionBudget(db *databasev1alpha1.MyDatabase) *policyv1ac.PodDisruptionBudgetApplyConfiguration {
	return policyv1ac.PodDisruptionBudget(PodDisruptionBudgetName(db), db.Namespace).
		WithLabels(Labels(db, ComponentDatabase)).
		WithOwnerReferences(ownerReferenceApply(db)).
		WithSpec(policyv1ac.PodDisruptionBudgetSpec().
			WithMaxUnavailable(intstr.FromInt32(1)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(db))))
}

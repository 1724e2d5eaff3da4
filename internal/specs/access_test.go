package specs

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/utils/ptr"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
)

// TestInstanceRoleIsNarrow: an instance manager may change its Lease and
// the pods of its own MyDatabase, by name, and read pods; nothing else.
func TestInstanceRoleIsNarrow(t *testing.T) {
	d := db(func(d *databasev1alpha1.MyDatabase) { d.Spec.Replicas = ptr.To[int32](3) })
	role := typed[rbacv1.Role](t, InstanceRole(d))
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"orders-primary"}, Verbs: []string{"get", "watch", "update"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"orders-credentials-rotation"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, ResourceNames: []string{"orders-0", "orders-1", "orders-2"}, Verbs: []string{"patch", "watch"}},
	}
	if diff := cmp.Diff(want, role.Rules); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
	binding := typed[rbacv1.RoleBinding](t, InstanceRoleBinding(d))
	if binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 ||
		binding.Subjects[0].Name != InstanceAccessName(d) || binding.Subjects[0].Namespace != "shop" {
		t.Errorf("binding %+v does not grant %s to the instance managers' ServiceAccount", binding, role.Name)
	}
	for name, labels := range map[string]map[string]string{
		"Role": role.Labels, "RoleBinding": binding.Labels,
		"ServiceAccount": InstanceServiceAccount(d).Labels, "Lease": Lease(d, "", false).Labels,
	} {
		if labels[databasev1alpha1.LabelManagedBy] != databasev1alpha1.ManagedBy || labels[databasev1alpha1.LabelOwnerUID] != "uid-1" {
			t.Errorf("%s labels %v: the operator's cache would not see it", name, labels)
		}
	}
}

// TestLeaseSpecIsTheInstanceManagers: the operator creates the Lease with
// no spec, so that its applies never take the holder from the instance
// managers.
func TestLeaseSpecIsTheInstanceManagers(t *testing.T) {
	if l := Lease(db(), "", false); l.Spec != nil {
		t.Errorf("the operator's Lease has a spec %+v", l.Spec)
	}
}

// TestQuorumOnTheLease: the Lease carries the quorum spec.replication asks
// for, which the instance managers read back, and an election needs the
// candidacies of Instances-Synchronous replicas only when it is required.
func TestQuorumOnTheLease(t *testing.T) {
	for name, tc := range map[string]struct {
		replicas int32
		sync     *databasev1alpha1.SynchronousReplication
		want     contract.Quorum
		electors int
	}{
		"asynchronous":           {3, nil, contract.Quorum{Instances: 3}, 1},
		"one of two replicas":    {3, &databasev1alpha1.SynchronousReplication{Number: 1, Durability: databasev1alpha1.DurabilityRequired}, contract.Quorum{Instances: 3, Synchronous: 1, Required: true}, 2},
		"two of two replicas":    {3, &databasev1alpha1.SynchronousReplication{Number: 2}, contract.Quorum{Instances: 3, Synchronous: 2, Required: true}, 1},
		"two of four, preferred": {5, &databasev1alpha1.SynchronousReplication{Number: 2, Durability: databasev1alpha1.DurabilityPreferred}, contract.Quorum{Instances: 5, Synchronous: 2, Required: false}, 1},
		"two of four, required":  {5, &databasev1alpha1.SynchronousReplication{Number: 2, Durability: databasev1alpha1.DurabilityRequired}, contract.Quorum{Instances: 5, Synchronous: 2, Required: true}, 3},
	} {
		t.Run(name, func(t *testing.T) {
			d := db(func(d *databasev1alpha1.MyDatabase) {
				d.Spec.Replicas, d.Spec.Replication.Synchronous = new(tc.replicas), tc.sync
			})
			got, err := contract.ParseQuorum(Lease(d, "", false).Annotations[contract.AnnotationQuorum])
			if err != nil || got != tc.want {
				t.Fatalf("quorum on the Lease %+v (%v), want %+v", got, err, tc.want)
			}
			if n := got.Electors(); n != tc.electors {
				t.Errorf("electors %d, want %d", n, tc.electors)
			}
			// The member a major upgrade left as the only one with data
			// is elected alone; the others as before.
			sole, err := contract.ParseQuorum(Lease(d, "orders-0", false).Annotations[contract.AnnotationQuorum])
			if err != nil || sole.ElectorsFor("orders-0") != 1 || sole.ElectorsFor("orders-1") != tc.electors {
				t.Errorf("with orders-0 the sole member: %+v (%v), electors %d for it, %d for orders-1",
					sole, err, sole.ElectorsFor("orders-0"), sole.ElectorsFor("orders-1"))
			}
		})
	}
}

package mydatabase

import (
	"fmt"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// TestNetworkPolicy: opted in, the NetworkPolicy admits to the database
// port the instances and the clients listed, and follows the list; the
// metrics port only to metricsClients (no rule, no one, without them);
// opted out, it goes.
func TestNetworkPolicy(t *testing.T) {
	ns := namespace(t)
	app := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "shop"}}}
	db := create(t, newDB(ns, "np", func(db *databasev1alpha1.MyDatabase) {
		db.Spec.NetworkPolicy = databasev1alpha1.NetworkPolicySpec{Enabled: true, Clients: []networkingv1.NetworkPolicyPeer{app}}
	}))
	rules := func(np *networkingv1.NetworkPolicy) string {
		out := make([]string, 0, len(np.Spec.Ingress))
		for _, r := range np.Spec.Ingress {
			var from []string
			for _, f := range r.From {
				switch {
				case f.PodSelector != nil && f.NamespaceSelector != nil:
					from = append(from, fmt.Sprintf("pods %v in namespaces %v", f.PodSelector.MatchLabels, f.NamespaceSelector.MatchLabels))
				case f.PodSelector != nil:
					from = append(from, fmt.Sprintf("pods %v", f.PodSelector.MatchLabels))
				case f.NamespaceSelector != nil:
					from = append(from, fmt.Sprintf("namespaces %v", f.NamespaceSelector.MatchLabels))
				}
			}
			var ports []string
			for _, p := range r.Ports {
				ports = append(ports, fmt.Sprintf("%s/%s", *p.Protocol, p.Port))
			}
			out = append(out, fmt.Sprintf("%v to %s", from, strings.Join(ports, ",")))
		}
		return fmt.Sprintf("pods %v, %v: %s", np.Spec.PodSelector.MatchLabels, np.Spec.PolicyTypes, strings.Join(out, "; "))
	}
	selector := fmt.Sprint(specs.SelectorLabels(db))
	// The instances reach each other's server and failsafe endpoint (the
	// metrics port).
	want := fmt.Sprintf("pods %s, [Ingress]: [pods %s] to TCP/5432,TCP/9187; [pods map[app:shop]] to TCP/5432", selector, selector)
	admits := func(want string) func() error {
		return func() error {
			np := &networkingv1.NetworkPolicy{}
			if err := get(ns, "np", np); err != nil {
				return err
			}
			if got := rules(np); got != want {
				return fmt.Errorf("got  %s\nwant %s", got, want)
			}
			return nil
		}
	}
	eventually(t, "the NetworkPolicy", admits(want))

	monitoring := networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "shop"}},
		PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "shop"}}}
	update(t, db, func(db *databasev1alpha1.MyDatabase) {
		db.Spec.NetworkPolicy.Clients = []networkingv1.NetworkPolicyPeer{monitoring}
	})
	want = fmt.Sprintf("pods %s, [Ingress]: [pods %s] to TCP/5432,TCP/9187; [pods map[app:shop] in namespaces map[team:shop]] to TCP/5432", selector, selector)
	eventually(t, "the NetworkPolicy to follow the clients", admits(want))

	prometheus := networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{
		MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}}}
	update(t, db, func(db *databasev1alpha1.MyDatabase) {
		db.Spec.NetworkPolicy.MetricsClients = []networkingv1.NetworkPolicyPeer{prometheus}
	})
	want += "; [namespaces map[kubernetes.io/metadata.name:monitoring]] to TCP/9187"
	eventually(t, "the NetworkPolicy to open the metrics port to metricsClients", admits(want))

	update(t, db, func(db *databasev1alpha1.MyDatabase) { db.Spec.NetworkPolicy.Enabled = false })
	eventually(t, "the NetworkPolicy gone", gone(ns, "np", &networkingv1.NetworkPolicy{}))
}

package specs

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// TestMetricsEndpoint: every pod has the metrics port and METRICS_ADDRESS;
// the custom queries' ConfigMap is mounted, optional, with CUSTOM_QUERIES
// pointing at its key, only when the spec names one.
func TestMetricsEndpoint(t *testing.T) {
	cases := map[string]struct {
		configMap   string
		wantVolume  *corev1.Volume
		wantQueries string
	}{
		"no custom queries": {},
		"custom queries": {
			configMap: "orders-queries",
			wantVolume: &corev1.Volume{Name: customQueries, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "orders-queries"},
				DefaultMode:          new(int32(0o444)), Optional: new(true)}}},
			wantQueries: "/etc/mydatabase-queries/queries.yaml",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sts := typed[appsv1.StatefulSet](t, StatefulSet(db(func(d *databasev1alpha1.MyDatabase) {
				d.Spec.Monitoring.CustomQueriesConfigMap = tc.configMap
			}), Platform{}))
			pod := sts.Spec.Template.Spec
			ctr := pod.Containers[0]
			wantPorts := []corev1.ContainerPort{
				{Name: "postgres", ContainerPort: 5432, Protocol: corev1.ProtocolTCP},
				{Name: "metrics", ContainerPort: 9187, Protocol: corev1.ProtocolTCP},
			}
			if diff := cmp.Diff(wantPorts, ctr.Ports); diff != "" {
				t.Errorf("ports (-want +got):\n%s", diff)
			}
			env := map[string]string{}
			for _, e := range ctr.Env {
				env[e.Name] = e.Value
			}
			if env["METRICS_ADDRESS"] != ":9187" || env["CUSTOM_QUERIES"] != tc.wantQueries {
				t.Errorf("METRICS_ADDRESS %q, CUSTOM_QUERIES %q; want \":9187\", %q", env["METRICS_ADDRESS"], env["CUSTOM_QUERIES"], tc.wantQueries)
			}
			var gotVolume *corev1.Volume
			for i := range pod.Volumes {
				if pod.Volumes[i].Name == customQueries {
					gotVolume = &pod.Volumes[i]
				}
			}
			if diff := cmp.Diff(tc.wantVolume, gotVolume); diff != "" {
				t.Errorf("custom queries volume (-want +got):\n%s", diff)
			}
			mounted := false
			for _, m := range ctr.VolumeMounts {
				mounted = mounted || (m.Name == customQueries && m.MountPath == CustomQueriesDir && m.ReadOnly)
			}
			if mounted != (tc.wantVolume != nil) {
				t.Errorf("custom queries mounted read-only at %s: %v, want %v", CustomQueriesDir, mounted, tc.wantVolume != nil)
			}
		})
	}
}

// TestPodMonitor: the PodMonitor selects this MyDatabase's pods (owner UID
// included), scrapes port metrics at /metrics, labels samples with the
// MyDatabase's name, and is controlled by the MyDatabase.
func TestPodMonitor(t *testing.T) {
	d := db()
	raw, err := json.Marshal(PodMonitor(d))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"apiVersion": "monitoring.coreos.com/v1",
		"kind":       "PodMonitor",
		"metadata": map[string]any{
			"name": d.Name, "namespace": d.Namespace, "labels": toAny(Labels(d, ComponentDatabase)),
			"ownerReferences": []any{map[string]any{"apiVersion": "database.example.com/v1alpha1", "kind": "MyDatabase",
				"name": d.Name, "uid": string(d.UID), "controller": true, "blockOwnerDeletion": true}},
		},
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": toAny(InstanceSelector(d))},
			"podMetricsEndpoints": []any{map[string]any{"port": "metrics", "path": "/metrics", "relabelings": []any{map[string]any{
				"sourceLabels": []any{"__meta_kubernetes_pod_label_app_kubernetes_io_instance"}, "targetLabel": "mydatabase"}}}},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PodMonitor (-want +got):\n%s", diff)
	}
	if n, ns := PodMonitor(d).GetName(), PodMonitor(d).GetNamespace(); *n != d.Name || *ns != d.Namespace {
		t.Errorf("GetName, GetNamespace = %s, %s", *n, *ns)
	}
}

// TestNetworkPolicyMetricsRule: the metrics port is open only to
// metricsClients, in a rule of its own; without them no rule names it.
func TestNetworkPolicyMetricsRule(t *testing.T) {
	prometheus := networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{
		MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}}}
	metricsRules := func(d *databasev1alpha1.MyDatabase) []networkingv1.NetworkPolicyIngressRule {
		np := typed[networkingv1.NetworkPolicy](t, NetworkPolicy(d))
		var out []networkingv1.NetworkPolicyIngressRule
		for _, r := range np.Spec.Ingress {
			if r.Ports[0].Port.IntValue() == MetricsPort {
				out = append(out, r)
			}
		}
		return out
	}
	if got := metricsRules(db(func(d *databasev1alpha1.MyDatabase) { d.Spec.NetworkPolicy.Enabled = true })); len(got) != 0 {
		t.Errorf("rules on the metrics port without metricsClients: %+v", got)
	}
	got := metricsRules(db(func(d *databasev1alpha1.MyDatabase) {
		d.Spec.NetworkPolicy = databasev1alpha1.NetworkPolicySpec{Enabled: true, MetricsClients: []networkingv1.NetworkPolicyPeer{prometheus}}
	}))
	port := intstr.FromInt32(MetricsPort)
	want := []networkingv1.NetworkPolicyIngressRule{{
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: new(corev1.ProtocolTCP), Port: &port}},
		From:  []networkingv1.NetworkPolicyPeer{prometheus},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics rule (-want +got):\n%s", diff)
	}
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

package specs

import (
	"encoding/json"
	"fmt"
	"regexp"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
)

// The metrics endpoint every instance manager serves (internal/instance/pgmetrics).
const (
	// MetricsPort is postgres_exporter's usual port.
	MetricsPort     = 9187
	MetricsPortName = "metrics"
	MetricsPath     = "/metrics"

	// CustomQueriesDir holds the ConfigMap of
	// spec.monitoring.customQueriesConfigMap; CustomQueriesKey is its key.
	CustomQueriesDir = "/etc/mydatabase-queries"
	CustomQueriesKey = "queries.yaml"
	customQueries    = "custom-queries"
)

// metricsPort is the database container's port for Prometheus.
func metricsPort() *corev1ac.ContainerPortApplyConfiguration {
	return corev1ac.ContainerPort().WithName(MetricsPortName).WithContainerPort(MetricsPort).WithProtocol(corev1.ProtocolTCP)
}

// metricsEnv tells the instance manager where to serve metrics, and where
// the custom queries are, if any.
func metricsEnv(db *databasev1alpha1.MyDatabase) []*corev1ac.EnvVarApplyConfiguration {
	env := []*corev1ac.EnvVarApplyConfiguration{corev1ac.EnvVar().WithName(contract.EnvMetricsAddress).WithValue(fmt.Sprintf(":%d", MetricsPort))}
	if db.Spec.Monitoring.CustomQueriesConfigMap != "" {
		env = append(env, corev1ac.EnvVar().WithName(contract.EnvCustomQueries).WithValue(CustomQueriesDir+"/"+CustomQueriesKey))
	}
	return env
}

// customQueriesVolume is spec.monitoring.customQueriesConfigMap's volume,
// if any. It is optional: a missing ConfigMap leaves the pod running (the
// instance manager reports mydatabase_pg_custom_queries_ok 0), and the
// kubelet updates the files in place when the ConfigMap changes.
func customQueriesVolume(db *databasev1alpha1.MyDatabase) []*corev1ac.VolumeApplyConfiguration {
	if db.Spec.Monitoring.CustomQueriesConfigMap == "" {
		return nil
	}
	return []*corev1ac.VolumeApplyConfiguration{corev1ac.Volume().WithName(customQueries).WithConfigMap(
		corev1ac.ConfigMapVolumeSource().WithName(db.Spec.Monitoring.CustomQueriesConfigMap).WithOptional(true).WithDefaultMode(0o444))}
}

// customQueriesMount mounts customQueriesVolume in the database container.
func customQueriesMount(db *databasev1alpha1.MyDatabase) []*corev1ac.VolumeMountApplyConfiguration {
	if db.Spec.Monitoring.CustomQueriesConfigMap == "" {
		return nil
	}
	return []*corev1ac.VolumeMountApplyConfiguration{
		corev1ac.VolumeMount().WithName(customQueries).WithMountPath(CustomQueriesDir).WithReadOnly(true)}
}

// PodMonitorGVK is the Prometheus Operator's PodMonitor.
var PodMonitorGVK = schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "PodMonitor"}

// PodMonitorName is the PodMonitor of spec.monitoring.podMonitor.
func PodMonitorName(db *databasev1alpha1.MyDatabase) string { return db.Name }

// PodMonitorConfiguration is the apply configuration of a PodMonitor,
// built as plain JSON: the operator needs three of its fields, not the
// Prometheus Operator's Go module.
type PodMonitorConfiguration struct {
	name, namespace string
	object          map[string]any
}

// IsApplyConfiguration marks it as an apply configuration.
func (*PodMonitorConfiguration) IsApplyConfiguration() {}

// GetName is the PodMonitor's name.
func (p *PodMonitorConfiguration) GetName() *string { return &p.name }

// GetNamespace is the PodMonitor's namespace.
func (p *PodMonitorConfiguration) GetNamespace() *string { return &p.namespace }

// MarshalJSON is the PodMonitor as the API server takes it.
func (p *PodMonitorConfiguration) MarshalJSON() ([]byte, error) { return json.Marshal(p.object) }

// PodMonitor scrapes the metrics port of every server of the MyDatabase.
// Besides the Prometheus Operator's own target labels (namespace, pod,
// container, endpoint), each sample carries mydatabase, the MyDatabase's
// name, which the alerts and the dashboard group by.
func PodMonitor(db *databasev1alpha1.MyDatabase) *PodMonitorConfiguration {
	return podMonitor(PodMonitorName(db), db.Namespace, Labels(db, ComponentDatabase), OwnerReference(db), InstanceSelector(db), "mydatabase")
}

// PoolerPodMonitor scrapes the pooler managers' metrics port of a
// pooler's pods; each sample carries mydatabasepooler, the pooler's name.
func PoolerPodMonitor(p *databasev1alpha1.MyDatabasePooler) *PodMonitorConfiguration {
	return podMonitor(p.Name, p.Namespace, PoolerLabels(p), PoolerOwnerReference(p), PoolerSelectorLabels(p), "mydatabasepooler")
}

// podMonitor scrapes the port MetricsPortName of the pods selector selects,
// their instance label copied into the label instanceLabel.
func podMonitor(name, namespace string, labels map[string]string, ref metav1.OwnerReference, selector map[string]string,
	instanceLabel string) *PodMonitorConfiguration {
	anyMap := func(m map[string]string) map[string]any {
		out := make(map[string]any, len(m))
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	return &PodMonitorConfiguration{name: name, namespace: namespace, object: map[string]any{
		"apiVersion": PodMonitorGVK.GroupVersion().String(),
		"kind":       PodMonitorGVK.Kind,
		"metadata": map[string]any{
			"name":      name,
			"namespace": namespace,
			"labels":    anyMap(labels),
			"ownerReferences": []any{map[string]any{
				"apiVersion": ref.APIVersion, "kind": ref.Kind, "name": ref.Name, "uid": string(ref.UID),
				"controller": true, "blockOwnerDeletion": true,
			}},
		},
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": anyMap(selector)},
			"podMetricsEndpoints": []any{map[string]any{
				"port": MetricsPortName,
				"path": MetricsPath,
				"relabelings": []any{map[string]any{
					"sourceLabels": []any{"__meta_kubernetes_pod_label_" + sanitize(databasev1alpha1.LabelInstance)},
					"targetLabel":  instanceLabel,
				}},
			}},
		},
	}}
}

// sanitize is a label name as Kubernetes service discovery writes it.
func sanitize(label string) string { return invalidLabelChars.ReplaceAllString(label, "_") }

var invalidLabelChars = regexp.MustCompile(`[^a-zA-Z0-9_]`)

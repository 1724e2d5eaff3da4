package v1alpha1

// MonitoringSpec is how the servers' metrics are collected. Every instance
// manager serves them whatever this says, on the container port "metrics"
// (9187) at /metrics; these fields add to that.
type MonitoringSpec struct {
	// podMonitor creates a Prometheus Operator PodMonitor <name> that
	// scrapes every server. Needs the PodMonitor CRD
	// (monitoring.coreos.com/v1) in the cluster: without it the
	// MyDatabase reports MonitoringReady False (PodMonitorCRDMissing) and
	// everything else proceeds.
	// +optional
	PodMonitor bool `json:"podMonitor,omitempty"`

	// customQueriesConfigMap names a ConfigMap of this namespace whose key
	// queries.yaml holds extra queries in postgres_exporter's queries.yaml
	// format; the instance managers run them at every scrape, in the
	// database postgres. The ConfigMap is read at each scrape, so edits
	// apply without a restart; while it is missing or invalid,
	// mydatabase_pg_custom_queries_ok is 0.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="monitoring.customQueriesConfigMap must be a valid ConfigMap name: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"
	// +optional
	CustomQueriesConfigMap string `json:"customQueriesConfigMap,omitempty"`
}

// The condition of spec.monitoring.podMonitor, outside kstatus: present
// only while a PodMonitor is asked for, and no effect on Ready (the
// database serves either way).
const (
	// ConditionMonitoringReady is True while the PodMonitor is applied.
	ConditionMonitoringReady = "MonitoringReady"
	// ReasonPodMonitorApplied: the PodMonitor exists as the spec says.
	ReasonPodMonitorApplied = "PodMonitorApplied"
	// ReasonPodMonitorCRDMissing: the cluster has no PodMonitor CRD.
	ReasonPodMonitorCRDMissing = "PodMonitorCRDMissing"
)

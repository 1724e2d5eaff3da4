package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// PhaseMetrics exports mydatabase_phase: how many MyDatabases are in each
// phase, next to controller-runtime's own metrics.
type PhaseMetrics struct {
	mu     sync.Mutex
	phases map[types.NamespacedName]databasev1alpha1.Phase
	gauge  *prometheus.GaugeVec
}

// NewPhaseMetrics creates the gauge and registers it with reg.
func NewPhaseMetrics(reg prometheus.Registerer) *PhaseMetrics {
	m := &PhaseMetrics{
		phases: map[types.NamespacedName]databasev1alpha1.Phase{},
		gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mydatabase_phase",
			Help: "Number of MyDatabases in each phase.",
		}, []string{"phase"}),
	}
	reg.MustRegister(m.gauge)
	return m
}

// Set records the phase of one MyDatabase.
func (m *PhaseMetrics) Set(key types.NamespacedName, phase databasev1alpha1.Phase) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.phases[key]; ok {
		if old == phase {
			return
		}
		m.gauge.WithLabelValues(string(old)).Dec()
	}
	m.phases[key] = phase
	m.gauge.WithLabelValues(string(phase)).Inc()
}

// Forget drops a MyDatabase that no longer exists.
func (m *PhaseMetrics) Forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.phases[key]; ok {
		m.gauge.WithLabelValues(string(old)).Dec()
		delete(m.phases, key)
	}
}

// Package metrics holds the operator's own Prometheus metrics, served next
// to controller-runtime's (controller_runtime_reconcile_*, workqueue_*).
// The databases' metrics are the instance managers'
// (internal/instance/pgmetrics).
package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// Metrics are the operator's metrics:
//   - mydatabase_phase{phase}: how many MyDatabases are in each phase;
//   - mydatabase_primary_changes_total{namespace,mydatabase,kind}: changes
//     of primary this operator process saw in status.currentPrimary, kind
//     "switchover" (one was under way towards that pod) or "failover";
//   - mydatabase_reconcile_errors_total{reason}: passes that ended on an
//     error, by the reason the status reports (APIError, QuotaExceeded,
//     Forbidden, ...);
//   - mydatabase_last_backup_timestamp_seconds{namespace,mydatabase}: when
//     the newest base backup in its object store finished;
//   - mydatabase_last_verified_backup_timestamp_seconds{namespace,mydatabase}:
//     when a verification of one of its backups last passed, and
//     mydatabase_backup_verification_failed{namespace,mydatabase}: 1 when
//     its newest verification failed or could not run, 0 when it passed.
type Metrics struct {
	mu              sync.Mutex
	phases          map[types.NamespacedName]databasev1alpha1.Phase
	phase           *prometheus.GaugeVec
	primaryChanges  *prometheus.CounterVec
	reconcileErrors *prometheus.CounterVec
	lastBackup      *prometheus.GaugeVec
	lastVerified    *prometheus.GaugeVec
	verifyFailed    *prometheus.GaugeVec
}

// Labels that name a MyDatabase.
const (
	labelNamespace  = "namespace"
	labelMyDatabase = "mydatabase"
)

// Kinds of primary change.
const (
	Failover   = "failover"
	Switchover = "switchover"
)

// New creates the metrics and registers them with reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		phases: map[types.NamespacedName]databasev1alpha1.Phase{},
		phase: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mydatabase_phase",
			Help: "Number of MyDatabases in each phase.",
		}, []string{"phase"}),
		primaryChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mydatabase_primary_changes_total",
			Help: "Changes of primary seen by this operator process, by kind: switchover (one was under way) or failover.",
		}, []string{labelNamespace, labelMyDatabase, "kind"}),
		reconcileErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mydatabase_reconcile_errors_total",
			Help: "Reconcile passes that ended on an error, by the reason the status reports.",
		}, []string{"reason"}),
		lastBackup: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mydatabase_last_backup_timestamp_seconds",
			Help: "When the newest base backup in a MyDatabase's object store finished (status.backup.lastBackupTime); absent without one.",
		}, []string{labelNamespace, labelMyDatabase}),
		lastVerified: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mydatabase_last_verified_backup_timestamp_seconds",
			Help: "When a verification of one of a MyDatabase's backups last passed (status.backup.lastVerifiedTime); absent before the first.",
		}, []string{labelNamespace, labelMyDatabase}),
		verifyFailed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mydatabase_backup_verification_failed",
			Help: "1 when the newest verification of a MyDatabase's backups failed or could not run, 0 when it passed (status.backup.lastVerification); absent before the first.",
		}, []string{labelNamespace, labelMyDatabase}),
	}
	reg.MustRegister(m.phase, m.primaryChanges, m.reconcileErrors, m.lastBackup, m.lastVerified, m.verifyFailed)
	return m
}

// Set records the phase of one MyDatabase.
func (m *Metrics) Set(key types.NamespacedName, phase databasev1alpha1.Phase) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.phases[key]; ok {
		if old == phase {
			return
		}
		m.phase.WithLabelValues(string(old)).Dec()
	}
	m.phases[key] = phase
	m.phase.WithLabelValues(string(phase)).Inc()
}

// PrimaryChanged counts a change of primary of one MyDatabase.
func (m *Metrics) PrimaryChanged(key types.NamespacedName, kind string) {
	m.primaryChanges.WithLabelValues(key.Namespace, key.Name, kind).Inc()
}

// ReconcileError counts a pass that ended on an error of this reason.
func (m *Metrics) ReconcileError(reason string) {
	m.reconcileErrors.WithLabelValues(reason).Inc()
}

// LastBackup records when the newest base backup of one MyDatabase
// finished; nil drops it.
func (m *Metrics) LastBackup(key types.NamespacedName, at *time.Time) {
	if at == nil {
		m.lastBackup.DeleteLabelValues(key.Namespace, key.Name)
		return
	}
	m.lastBackup.WithLabelValues(key.Namespace, key.Name).Set(float64(at.UnixNano()) / 1e9)
}

// Verification records how the verifications of one MyDatabase's backups
// stand (status.backup); what it lacks is dropped.
func (m *Metrics) Verification(key types.NamespacedName, st *databasev1alpha1.BackupStatus) {
	if st == nil || st.LastVerifiedTime == nil {
		m.lastVerified.DeleteLabelValues(key.Namespace, key.Name)
	} else {
		m.lastVerified.WithLabelValues(key.Namespace, key.Name).Set(float64(st.LastVerifiedTime.UnixNano()) / 1e9)
	}
	if st == nil || st.LastVerification == nil {
		m.verifyFailed.DeleteLabelValues(key.Namespace, key.Name)
		return
	}
	failed := 0.0
	if st.LastVerification.Result != databasev1alpha1.VerificationPassed {
		failed = 1
	}
	m.verifyFailed.WithLabelValues(key.Namespace, key.Name).Set(failed)
}

// Forget drops a MyDatabase that no longer exists.
func (m *Metrics) Forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.phases[key]; ok {
		m.phase.WithLabelValues(string(old)).Dec()
		delete(m.phases, key)
	}
	m.primaryChanges.DeletePartialMatch(prometheus.Labels{labelNamespace: key.Namespace, labelMyDatabase: key.Name})
	m.lastBackup.DeleteLabelValues(key.Namespace, key.Name)
	m.Verification(key, nil)
}

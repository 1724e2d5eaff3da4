package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// TestMetrics: phases move between gauges, primary changes and errors
// count, and a forgotten MyDatabase leaves no series behind.
func TestMetrics(t *testing.T) {
	m := New(prometheus.NewRegistry())
	orders := types.NamespacedName{Namespace: "shop", Name: "orders"}
	m.Set(orders, databasev1alpha1.PhaseProvisioning)
	m.Set(orders, databasev1alpha1.PhaseReady)
	m.PrimaryChanged(orders, Failover)
	m.PrimaryChanged(orders, Switchover)
	m.PrimaryChanged(orders, Switchover)
	m.ReconcileError(databasev1alpha1.ReasonAPIError)
	backedUp := time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC)
	m.LastBackup(orders, &backedUp)
	m.LastBackup(types.NamespacedName{Namespace: "shop", Name: "carts"}, nil)
	verified := metav1.NewTime(time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC))
	m.Verification(orders, &databasev1alpha1.BackupStatus{LastVerifiedTime: &verified,
		LastVerification: &databasev1alpha1.LastVerification{Backup: "orders-2", Result: databasev1alpha1.VerificationFailed}})
	m.Verification(types.NamespacedName{Namespace: "shop", Name: "carts"}, &databasev1alpha1.BackupStatus{})
	want := `
# HELP mydatabase_phase Number of MyDatabases in each phase.
# TYPE mydatabase_phase gauge
mydatabase_phase{phase="Provisioning"} 0
mydatabase_phase{phase="Ready"} 1
# HELP mydatabase_primary_changes_total Changes of primary seen by this operator process, by kind: switchover (one was under way) or failover.
# TYPE mydatabase_primary_changes_total counter
mydatabase_primary_changes_total{kind="failover",mydatabase="orders",namespace="shop"} 1
mydatabase_primary_changes_total{kind="switchover",mydatabase="orders",namespace="shop"} 2
# HELP mydatabase_reconcile_errors_total Reconcile passes that ended on an error, by the reason the status reports.
# TYPE mydatabase_reconcile_errors_total counter
mydatabase_reconcile_errors_total{reason="APIError"} 1
# HELP mydatabase_last_backup_timestamp_seconds When the newest base backup in a MyDatabase's object store finished (status.backup.lastBackupTime); absent without one.
# TYPE mydatabase_last_backup_timestamp_seconds gauge
mydatabase_last_backup_timestamp_seconds{mydatabase="orders",namespace="shop"} 1.7960976e+09
# HELP mydatabase_last_verified_backup_timestamp_seconds When a verification of one of a MyDatabase's backups last passed (status.backup.lastVerifiedTime); absent before the first.
# TYPE mydatabase_last_verified_backup_timestamp_seconds gauge
mydatabase_last_verified_backup_timestamp_seconds{mydatabase="orders",namespace="shop"} 1.7961876e+09
# HELP mydatabase_backup_verification_failed 1 when the newest verification of a MyDatabase's backups failed or could not run, 0 when it passed (status.backup.lastVerification); absent before the first.
# TYPE mydatabase_backup_verification_failed gauge
mydatabase_backup_verification_failed{mydatabase="orders",namespace="shop"} 1
`
	if err := testutil.CollectAndCompare(m.phase, strings.NewReader(want), "mydatabase_phase"); err != nil {
		t.Error(err)
	}
	if err := testutil.CollectAndCompare(m.primaryChanges, strings.NewReader(want), "mydatabase_primary_changes_total"); err != nil {
		t.Error(err)
	}
	if err := testutil.CollectAndCompare(m.reconcileErrors, strings.NewReader(want), "mydatabase_reconcile_errors_total"); err != nil {
		t.Error(err)
	}
	if err := testutil.CollectAndCompare(m.lastBackup, strings.NewReader(want), "mydatabase_last_backup_timestamp_seconds"); err != nil {
		t.Error(err)
	}
	if err := testutil.CollectAndCompare(m.lastVerified, strings.NewReader(want), "mydatabase_last_verified_backup_timestamp_seconds"); err != nil {
		t.Error(err)
	}
	if err := testutil.CollectAndCompare(m.verifyFailed, strings.NewReader(want), "mydatabase_backup_verification_failed"); err != nil {
		t.Error(err)
	}
	m.Forget(orders)
	if n := testutil.CollectAndCount(m.primaryChanges) + testutil.CollectAndCount(m.lastBackup) +
		testutil.CollectAndCount(m.lastVerified) + testutil.CollectAndCount(m.verifyFailed); n != 0 {
		t.Errorf("%d primary change, last backup and verification series after Forget, want 0", n)
	}
	if got := testutil.ToFloat64(m.phase.WithLabelValues("Ready")); got != 0 {
		t.Errorf("Ready = %v after Forget, want 0", got)
	}
}

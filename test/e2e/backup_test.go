//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// TestBackupObjects: the Kubernetes side of backups on the simulated
// cluster. A schedule makes its first MyDatabaseBackup at once, owned by
// the MyDatabase, and `kubectl mydb backup` makes another. KWOK's pods run
// no instance manager, so none reports: the backups wait, Pending, and
// say for what, and ContinuousArchiving is Unknown. test/postgres takes
// real backups (TestBackupObjectsAndRetention).
func TestBackupObjects(t *testing.T) {
	ns := newNamespace(t, "backup", nil)
	kubectl(t, `apiVersion: v1
kind: Secret
metadata:
  name: s3-key
stringData:
  ACCESS_KEY_ID: the-key-id
  SECRET_ACCESS_KEY: the-secret-key
---
apiVersion: database.example.com/v1alpha1
kind: MyDatabase
metadata:
  name: x
spec:
  replicas: 2
  storage:
    size: 1Gi
  backup:
    objectStore:
      endpoint: https://s3.example.com
      bucket: backups
      credentialsSecret: s3-key
    schedule:
      cron: "@daily"
    retention:
      recoveryWindow: 7d
`, "apply", "-n", ns, "-f", "-")
	waitReady(t, ns, 2, 120*time.Second)

	pendingFor := func(b *databasev1alpha1.MyDatabaseBackup) (bool, string) {
		if err := env.c.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
			return false, err.Error()
		}
		st := b.Status
		return st.Phase == databasev1alpha1.BackupPending && st.Instance == "" &&
			strings.Contains(st.Message, "waiting for a ready primary") && strings.Contains(st.Message, "no instance reports one"), fmt.Sprintf("%+v", st)
	}
	midnight := time.Now().UTC().Truncate(24 * time.Hour)
	scheduled := &databasev1alpha1.MyDatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x-" + midnight.Format("20060102150405")}}
	eventually(t, time.Minute, "the schedule's first backup, Pending", func() (bool, string) { return pendingFor(scheduled) })
	db := &databasev1alpha1.MyDatabase{}
	if !exists(t, ns, dbName, db) || !metav1.IsControlledBy(scheduled, db) || scheduled.Spec.Target != databasev1alpha1.BackupTargetPreferReplica {
		t.Errorf("the scheduled backup: owners %v, target %q", scheduled.OwnerReferences, scheduled.Spec.Target)
	}
	eventually(t, time.Minute, "status.backup with the schedule's times", func() (bool, string) {
		if !exists(t, ns, dbName, db) || db.Status.Backup == nil {
			return false, "no status.backup"
		}
		st := db.Status.Backup
		return st.LastScheduleTime != nil && st.LastScheduleTime.Time.Equal(midnight) &&
			st.NextScheduleTime != nil && st.NextScheduleTime.Time.Equal(midnight.Add(24*time.Hour)), fmt.Sprintf("%+v", st)
	})
	if c := meta.FindStatusCondition(db.Status.Conditions, databasev1alpha1.ConditionContinuousArchiving); c == nil ||
		c.Status != metav1.ConditionUnknown || c.Reason != databasev1alpha1.ReasonArchivingPending {
		t.Errorf("ContinuousArchiving with no instance manager: %+v", c)
	}

	out := mustMydb(t, "backup", dbName, "-n", ns, "--primary")
	name := ""
	if _, err := fmt.Sscanf(out, "MyDatabaseBackup "+ns+"/%s created", &name); err != nil {
		t.Fatalf("kubectl mydb backup printed %q: %v", out, err)
	}
	byHand := &databasev1alpha1.MyDatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	eventually(t, time.Minute, name+" Pending", func() (bool, string) { return pendingFor(byHand) })
	if byHand.Spec.Target != databasev1alpha1.BackupTargetPrimary || byHand.Spec.Database != dbName {
		t.Errorf("kubectl mydb backup --primary made %+v", byHand.Spec)
	}
	if got := kubectl(t, "", "get", "mydatabasebackup", name, "-n", ns); !strings.Contains(got, "Pending") {
		t.Errorf("kubectl get mydatabasebackup:\n%s", got)
	}
}

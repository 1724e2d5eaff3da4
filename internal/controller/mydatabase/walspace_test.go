package mydatabase

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
)

func TestWALSpaceNamesTheServerAndTheCause(t *testing.T) {
	const gib = 1 << 30
	now := time.Now().UTC()
	before := now.Add(-time.Minute)
	storage := func(wal int64) *contract.Storage {
		return &contract.Storage{CapacityBytes: gib, AvailableBytes: gib - wal - gib/10, WALBytes: wal}
	}
	// On a WAL volume of 512 MiB, with 4 GiB of data beside it.
	onVolume := func(wal int64) *contract.Storage {
		return &contract.Storage{CapacityBytes: 4 * gib, AvailableBytes: gib, WALBytes: wal,
			WALCapacityBytes: gib / 2, WALAvailableBytes: gib/2 - wal}
	}
	failing := &contract.Archive{LastArchivedWAL: "000000010000000000000003", LastArchivedTime: &before,
		LastFailedWAL: "000000010000000000000004", LastFailedTime: &now, Error: "connection refused"}
	pods := func(primary, replica *contract.Storage, archive *contract.Archive) []corev1.Pod {
		var out []corev1.Pod
		for name, rep := range map[string]contract.Report{
			"orders-0": {Role: databasev1alpha1.RolePrimary, Ready: true, LSN: "0/5000000", Archive: archive, Storage: primary, Time: now},
			"orders-1": {Role: databasev1alpha1.RoleReplica, Ready: true, LSN: "0/5000000", Replayed: "0/5000000", Storage: replica, Time: now},
		} {
			out = append(out, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name,
				Annotations: map[string]string{contract.AnnotationInstance: rep.String()}}})
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		wal    bool // spec.walStorage
		pods   []corev1.Pod
		status metav1.ConditionStatus
		reason string
		says   []string
	}{
		{"not reported", false, pods(nil, nil, nil), metav1.ConditionUnknown, databasev1alpha1.ReasonWALNotReported, []string{"no server"}},
		{"within half", false, pods(storage(gib/4), storage(gib/5), nil), metav1.ConditionTrue, databasev1alpha1.ReasonWALWithinBound,
			[]string{"orders-0 holds 256.0 MiB, 25% of its 1.0 GiB data volume"}},
		{"archiving fails", false, pods(storage(gib*6/10), storage(gib/5), failing), metav1.ConditionFalse, databasev1alpha1.ReasonWALAccumulating,
			[]string{"orders-0 holds", "60%", "Archiving fails", "000000010000000000000004", "connection refused", "Mend the object store", "spec.storage.size"}},
		{"held by a setting or slot", false, pods(storage(gib*6/10), storage(gib/5), nil), metav1.ConditionFalse, databasev1alpha1.ReasonWALAccumulating,
			[]string{"orders-0 holds", "Archiving keeps up", "max_wal_size", "pg_replication_slots"}},
		{"a replica", false, pods(storage(gib/5), storage(gib*7/10), nil), metav1.ConditionFalse, databasev1alpha1.ReasonWALAccumulating,
			[]string{"orders-1 holds", "70%", "restartpoint", "lagBytes"}},
		{"within half of the WAL volume", true, pods(onVolume(gib/8), onVolume(gib/8), nil), metav1.ConditionTrue, databasev1alpha1.ReasonWALWithinBound,
			[]string{"orders-0 holds 128.0 MiB, 25% of its 512.0 MiB WAL volume"}},
		{"past half of the WAL volume, a small share of the data volume", true, pods(onVolume(gib*3/8), onVolume(gib/8), failing),
			metav1.ConditionFalse, databasev1alpha1.ReasonWALAccumulating,
			[]string{"orders-0 holds 384.0 MiB, 75% of its 512.0 MiB WAL volume", "128.0 MiB is free", "Archiving fails", "spec.walStorage.size"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := newDB("shop", "orders", withBackupSecretless)
			if tc.wal {
				db.Spec.WALStorage = &databasev1alpha1.StorageSpec{}
			}
			computeStatus(db, &observation{pods: tc.pods}, now)
			c := meta.FindStatusCondition(db.Status.Conditions, databasev1alpha1.ConditionWALSpace)
			if c == nil {
				t.Fatal("no WALSpace condition")
			}
			if c.Status != tc.status || c.Reason != tc.reason {
				t.Errorf("WALSpace %s %s %q, want %s %s", c.Status, c.Reason, c.Message, tc.status, tc.reason)
			}
			for _, s := range tc.says {
				if !strings.Contains(c.Message, s) {
					t.Errorf("message %q does not say %q", c.Message, s)
				}
			}
			if ready := meta.FindStatusCondition(db.Status.Conditions, databasev1alpha1.ConditionReady); tc.status == metav1.ConditionFalse &&
				ready != nil && ready.Reason == databasev1alpha1.ReasonWALAccumulating {
				t.Errorf("Ready follows WALSpace: %+v", ready)
			}
		})
	}
}

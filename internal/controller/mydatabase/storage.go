package mydatabase

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get

// storageClass is the component of the check of the storage class.
type storageClass struct {
	*kit
	*scope
}

// reconcile stalls a MyDatabase whose spec.storage.storageClassName
// names a class the cluster does not have, before anything is created: its
// claims would stay Pending forever with the reason visible only on the
// PVCs. It is checked only until the StatefulSet exists (the class is
// immutable, and later its claims tell the story), read around the cache
// since classes are few and cluster-scoped. Where the operator may not read
// StorageClasses (a namespace-scoped install without that grant), the check
// is skipped rather than blocking every database.
func (r *storageClass) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	name := db.Spec.Storage.StorageClassName
	if name == nil || *name == "" || r.sts != nil {
		return nil
	}
	class := &storagev1.StorageClass{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Name: *name}, class)
	switch {
	case apierrors.IsNotFound(err):
		obs.stalled = &blocker{Reason: databasev1alpha1.ReasonStorageClassNotFound, Message: fmt.Sprintf(
			"StorageClass %q named in spec.storage.storageClassName does not exist: create it, "+
				"or delete and recreate this MyDatabase with an existing class (kubectl get storageclass); "+
				"nothing has been created yet", *name)}
		return nil
	case apierrors.IsForbidden(err):
		log(ctx).V(1).Info("Not allowed to read StorageClasses, not checking the class", "storageClass", *name)
		return nil
	}
	return objectError("get", class, *name, err)
}

// retainedVolumes is the component of the adoption of retained volumes.
type retainedVolumes struct {
	*kit
	*scope
}

// reconcile takes over the volumes (data and WAL) that a deleted
// MyDatabase of the same name retained: the new StatefulSet mounts them by
// name, and relabelling them with the new owner's UID puts them under the
// new deletion policy. Volumes that still have an owner (a StatefulSet
// being collected) are left to it.
func (r *retainedVolumes) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	pvcs := &corev1.PersistentVolumeClaimList{}
	if err := r.listOwn(ctx, pvcs, db, specs.InstanceLabels(db)); err != nil {
		return objectError("list", &corev1.PersistentVolumeClaim{}, "", err)
	}
	ours := func(name string) bool {
		for _, v := range specs.Volumes(db) {
			if strings.HasPrefix(name, v.ClaimPrefix(db)) {
				return true
			}
		}
		return false
	}
	for i := range pvcs.Items {
		pvc := &pvcs.Items[i]
		if pvc.Labels[databasev1alpha1.LabelOwnerUID] == string(db.UID) || len(pvc.OwnerReferences) > 0 ||
			!ours(pvc.Name) || !pvc.DeletionTimestamp.IsZero() {
			continue
		}
		if err := r.alignMetadata(ctx, pvc, map[string]string{databasev1alpha1.LabelOwnerUID: string(db.UID)}, nil, nil, db); err != nil {
			return err
		}
	}
	return nil
}

// setWALSpaceCondition reports whether the WAL on every server stays within
// half its volume (ConditionWALSpace): the WAL volume where the server
// reports one, the data volume otherwise, from status.instances. For the
// primary, the cause it names comes from the ContinuousArchiving condition,
// so it runs after setArchivingStatus.
func setWALSpaceCondition(db *databasev1alpha1.MyDatabase, now time.Time) {
	st := &db.Status
	cond := metav1.Condition{Type: databasev1alpha1.ConditionWALSpace, ObservedGeneration: db.Generation,
		LastTransitionTime: metav1.NewTime(now), Status: metav1.ConditionUnknown,
		Reason: databasev1alpha1.ReasonWALNotReported, Message: "no server has reported its storage yet"}
	if hibernated(db) {
		cond.Message = "no server runs while the MyDatabase is hibernated"
	}
	// The server whose WAL takes the largest share of its volume.
	var worst *databasev1alpha1.InstanceStatus
	var worstVolume walVolume
	for i := range st.Instances {
		if s := st.Instances[i].Storage; s != nil {
			if v := walVolumeOf(s); v.capacity > 0 && (worst == nil || v.share(s) > worstVolume.share(worst.Storage)) {
				worst, worstVolume = &st.Instances[i], v
			}
		}
	}
	if worst != nil {
		s, v := worst.Storage, worstVolume
		holds := fmt.Sprintf("pg_wal on %s holds %s, %d%% of its %s %s volume", worst.Name, iecBytes(s.WALBytes),
			int(math.Round(100*v.share(s))), iecBytes(v.capacity), v.what)
		if 2*s.WALBytes <= v.capacity {
			cond.Status, cond.Reason = metav1.ConditionTrue, databasev1alpha1.ReasonWALWithinBound
			cond.Message = holds + ", within the half checkpoints and replication slots may keep"
		} else {
			cond.Status, cond.Reason = metav1.ConditionFalse, databasev1alpha1.ReasonWALAccumulating
			cond.Message = fmt.Sprintf("%s, more than the half checkpoints and replication slots may keep; %s is free. %s",
				holds, iecBytes(v.available), walCause(db, worst.Name))
		}
	}
	meta.SetStatusCondition(&st.Conditions, cond)
}

// walVolume is the volume a server's WAL is on, as it reported it.
type walVolume struct {
	what                string // "WAL" or "data"
	capacity, available int64
}

func walVolumeOf(s *databasev1alpha1.InstanceStorage) walVolume {
	if s.WALCapacityBytes > 0 {
		return walVolume{"WAL", s.WALCapacityBytes, s.WALAvailableBytes}
	}
	return walVolume{"data", s.CapacityBytes, s.AvailableBytes}
}

// share is the WAL's share of the volume.
func (v walVolume) share(s *databasev1alpha1.InstanceStorage) float64 {
	return float64(s.WALBytes) / float64(v.capacity)
}

// iecBytes writes a byte count in MiB or GiB, one decimal.
func iecBytes(b int64) string {
	if b >= 1<<30 {
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

// walCause says why a server keeps more WAL than its bounds, and what to do.
func walCause(db *databasev1alpha1.MyDatabase, pod string) string {
	grow := "Growing spec.storage.size buys time meanwhile."
	if db.Spec.WALStorage != nil {
		grow = "Growing spec.walStorage.size buys time meanwhile."
	}
	if pod != db.Status.CurrentPrimary {
		return "A replica keeps the WAL it received until its next restartpoint: its replay may be stuck behind a long query " +
			"or a conflict (see its lagBytes and its log). " + grow
	}
	if c := meta.FindStatusCondition(db.Status.Conditions, databasev1alpha1.ConditionContinuousArchiving); c != nil &&
		c.Status == metav1.ConditionFalse {
		return "Archiving fails: " + c.Message + ". Mend the object store or its credentials: " +
			"the backlog is archived and removed once it works. " + grow
	}
	return "Archiving keeps up, so a setting in spec.parameters (max_wal_size, wal_keep_size, max_slot_wal_keep_size) " +
		"or a replication slot the operator does not manage keeps it (pg_replication_slots; " +
		"mydatabase_pg_replication_slot_retained_bytes): lower the setting or drop the slot. " + grow
}

package mydatabase

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/backup/agekey"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
)

// objectStores is the component of the check of the object stores' credentials.
type objectStores struct {
	*kit
	*scope
}

// reconcile stalls a MyDatabase whose spec.backup,
// spec.bootstrap.recovery or spec.replica.source names a credentials Secret that does not exist
// or lacks a key, before any pod is made: the kubelet would otherwise
// leave the pods in CreateContainerConfigError. The Secret is the user's
// (read around the cache, never written).
func (r *objectStores) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	stores := map[string]databasev1alpha1.ObjectStore{}
	if db.Spec.Backup != nil {
		stores["spec.backup.objectStore"] = db.Spec.Backup.ObjectStore
	}
	if rec := specs.Recovery(db); rec != nil {
		stores["spec.bootstrap.recovery.objectStore"] = rec.ObjectStore
	}
	if rep := specs.Replica(db); rep != nil && rep.Source.ObjectStore != nil {
		stores["spec.replica.source.objectStore"] = *rep.Source.ObjectStore
		// Once promoted, this MyDatabase archives a new timeline to its own
		// path: never into its source's archive.
		if db.Spec.Backup != nil && db.Spec.Backup.ObjectStore.Bucket == rep.Source.ObjectStore.Bucket &&
			specs.BackupPath(db) == rep.Source.ObjectStore.Path {
			obs.stalled = &blocker{Reason: databasev1alpha1.ReasonReplicaArchiveClash, Message: fmt.Sprintf(
				"spec.backup archives to %s, the archive spec.replica.source reads: give spec.backup.objectStore.path another path, "+
					"so that this MyDatabase, once promoted, never writes into its source's archive", specs.ReplicaSource(rep))}
			return nil
		}
	}
	for _, field := range []string{"spec.backup.objectStore", "spec.bootstrap.recovery.objectStore", "spec.replica.source.objectStore"} {
		store, ok := stores[field]
		if !ok {
			continue
		}
		name := store.CredentialsSecret
		found, missing, err := r.secretLacks(ctx, name, specs.ObjectStoreAccessKeyIDKey, specs.ObjectStoreSecretAccessKeyKey)
		switch {
		case err != nil:
			return err
		case !found:
			obs.stalled = &blocker{Reason: databasev1alpha1.ReasonObjectStoreCredentials, Message: fmt.Sprintf(
				"Secret %q named in %s.credentialsSecret does not exist in namespace %q: create it with the keys %s and %s of the bucket's access key",
				name, field, db.Namespace, specs.ObjectStoreAccessKeyIDKey, specs.ObjectStoreSecretAccessKeyKey)}
			return nil
		case len(missing) > 0:
			obs.stalled = &blocker{Reason: databasev1alpha1.ReasonObjectStoreCredentials, Message: fmt.Sprintf(
				"Secret %q named in %s.credentialsSecret lacks the keys %s", name, field, strings.Join(missing, ", "))}
			return nil
		}
	}
	if err := r.checkEncryption(ctx, obs); err != nil || obs.stalled != nil {
		return err
	}
	return r.checkReplicaSource(ctx, obs)
}

// checkEncryption stalls a MyDatabase whose spec.backup.encryption,
// spec.bootstrap.recovery.encryption or spec.replica.source.encryption
// names a Secret that does not exist,
// lacks the key identities, or holds no age identity there, before any
// pod is made: the kubelet would leave the pods in ContainerCreating, and
// a bad key would fail every archive attempt. The message never quotes
// the key.
func (r *objectStores) checkEncryption(ctx context.Context, obs *observation) error {
	db := r.db
	type check struct {
		field string
		enc   *databasev1alpha1.BackupEncryption
	}
	var checks []check
	if b := db.Spec.Backup; b != nil && b.Encryption != nil {
		checks = append(checks, check{"spec.backup.encryption", b.Encryption})
	}
	if rec := specs.Recovery(db); rec != nil && rec.Encryption != nil {
		checks = append(checks, check{"spec.bootstrap.recovery.encryption", rec.Encryption})
	}
	if rep := specs.Replica(db); rep != nil && rep.Source.ObjectStore != nil && rep.Source.Encryption != nil {
		checks = append(checks, check{"spec.replica.source.encryption", rep.Source.Encryption})
	}
	const howTo = "age-keygen makes one; docs/backup.md, \"Encryption at rest\""
	for _, c := range checks {
		name, key := c.enc.Secret, specs.EncryptionIdentitiesKey
		secret := &corev1.Secret{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, secret)
		var problem string
		switch {
		case apierrors.IsNotFound(err):
			problem = fmt.Sprintf("Secret %q named in %s.secret does not exist in namespace %q: create it with the key %s, "+
				"age X25519 identities one a line, the current one first (%s)", name, c.field, db.Namespace, key, howTo)
		case err != nil:
			return objectError("get", secret, name, err)
		case len(secret.Data[key]) == 0:
			problem = fmt.Sprintf("Secret %q named in %s.secret lacks the key %s: put there the age X25519 identities, "+
				"one a line, the current one first (%s)", name, c.field, key, howTo)
		default:
			if _, err := agekey.Parse(secret.Data[key]); err != nil {
				problem = fmt.Sprintf("the key %s of Secret %q named in %s.secret: %v", key, name, c.field, err)
			}
		}
		if problem != "" {
			obs.stalled = &blocker{Reason: databasev1alpha1.ReasonBackupEncryptionKey, Message: problem}
			return nil
		}
	}
	return nil
}

// checkReplicaSource stalls a replica MyDatabase whose
// spec.replica.source.streaming names a Secret that does not exist or
// lacks a key, before any pod is made.
func (r *objectStores) checkReplicaSource(ctx context.Context, obs *observation) error {
	rep := specs.Replica(r.db)
	if rep == nil || rep.Source.Streaming == nil {
		return nil
	}
	name := rep.Source.Streaming.SecretName
	found, missing, err := r.secretLacks(ctx, name, specs.ReplicaSourceSecretKeys...)
	switch {
	case err != nil:
		return err
	case !found:
		obs.stalled = &blocker{Reason: databasev1alpha1.ReasonReplicaSourceSecretInvalid, Message: fmt.Sprintf(
			"Secret %q named in spec.replica.source.streaming.secretName does not exist in namespace %q: copy the source's <name>-replication-tls Secret here (keys %s)",
			name, r.db.Namespace, strings.Join(specs.ReplicaSourceSecretKeys, ", "))}
	case len(missing) > 0:
		obs.stalled = &blocker{Reason: databasev1alpha1.ReasonReplicaSourceSecretInvalid, Message: fmt.Sprintf(
			"Secret %q named in spec.replica.source.streaming.secretName lacks the keys %s", name, strings.Join(missing, ", "))}
	}
	return nil
}

// secretLacks reads the user's Secret name (around the cache, never
// written): found is false when it does not exist, missing lists the keys
// it has no value for.
func (r *objectStores) secretLacks(ctx context.Context, name string, keys ...string) (found bool, missing []string, err error) {
	secret := &corev1.Secret{}
	err = r.APIReader.Get(ctx, client.ObjectKey{Namespace: r.db.Namespace, Name: name}, secret)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil, nil
	case err != nil:
		return false, nil, objectError("get", secret, name, err)
	}
	for _, k := range keys {
		if len(secret.Data[k]) == 0 {
			missing = append(missing, k)
		}
	}
	return true, missing, nil
}

// reportOf is the report of the named pod, nil when it has none.
func reportOf(pods []corev1.Pod, name string) *contract.Report {
	for i := range pods {
		if pods[i].Name != name {
			continue
		}
		if r, err := contract.Parse(pods[i].Annotations[contract.AnnotationInstance]); err == nil {
			return &r
		}
	}
	return nil
}

// setArchivingStatus reports continuous archiving as the primary's
// instance manager last did: status.backup and the ContinuousArchiving
// condition, which says in plain words what failed; and the schedule's
// times and the verifications, as this pass saw them (schedule, verify;
// nil keeps the last). Without
// spec.backup none is there (and no report is read).
func setArchivingStatus(db *databasev1alpha1.MyDatabase, pods []corev1.Pod, primaryPod string, schedule *scheduleState, verify *verifyState, now time.Time) {
	st := &db.Status
	if db.Spec.Backup == nil {
		st.Backup = nil
		meta.RemoveStatusCondition(&st.Conditions, databasev1alpha1.ConditionContinuousArchiving)
		return
	}
	// The schedules' times and the verifications, from this pass or else
	// as they were.
	var last, next *metav1.Time
	if st.Backup != nil && db.Spec.Backup.Schedule != nil {
		last, next = st.Backup.LastScheduleTime, st.Backup.NextScheduleTime
	}
	if schedule != nil {
		last, next = schedule.last, schedule.next
	}
	verified := &verifyState{}
	if st.Backup != nil {
		verified = &verifyState{last: st.Backup.LastVerification, passed: st.Backup.LastVerifiedTime, next: st.Backup.NextVerifyTime}
	}
	if verify != nil {
		verified = verify
	}
	primary := reportOf(pods, primaryPod)
	cond := metav1.Condition{Type: databasev1alpha1.ConditionContinuousArchiving, ObservedGeneration: db.Generation,
		LastTransitionTime: metav1.NewTime(now), Status: metav1.ConditionUnknown, Reason: databasev1alpha1.ReasonArchivingPending,
		Message: "the primary has not reported on archiving yet"}
	if hibernated(db) {
		cond.Message = "no server runs while the MyDatabase is hibernated: nothing is written, so nothing is to archive"
	}
	if primary != nil && primary.Archive != nil {
		a := primary.Archive
		st.Backup = &databasev1alpha1.BackupStatus{LastArchivedWAL: a.LastArchivedWAL, LastFailedWAL: a.LastFailedWAL,
			LastArchivedTime: contract.MetaTime(a.LastArchivedTime), LastFailedTime: contract.MetaTime(a.LastFailedTime)}
		if b := a.Backups; b != nil {
			st.Backup.Backups, st.Backup.LastBackupID = int32(b.Count), b.LastID
			st.Backup.LastBackupTime, st.Backup.FirstRecoverabilityPoint = contract.MetaTime(b.LastTime), contract.MetaTime(b.FirstRecoverableTime)
		}
		switch {
		case a.Failing():
			cause := a.Error
			if cause == "" {
				cause = "the server log of the primary says why"
			}
			cond.Status, cond.Reason = metav1.ConditionFalse, databasev1alpha1.ReasonArchivingFailing
			cond.Message = fmt.Sprintf("WAL file %s could not be archived to %s (last attempt %s): %s. "+
				"The primary keeps every WAL file until it is archived, so its volume fills meanwhile",
				a.LastFailedWAL, db.Spec.Backup.ObjectStore.Endpoint, a.LastFailedTime.UTC().Format(time.RFC3339), cause)
		case a.LastArchivedWAL != "":
			cond.Status, cond.Reason = metav1.ConditionTrue, databasev1alpha1.ReasonArchiving
			cond.Message = fmt.Sprintf("the last WAL file archived is %s, at %s", a.LastArchivedWAL, a.LastArchivedTime.UTC().Format(time.RFC3339))
		default:
			cond.Status, cond.Reason = metav1.ConditionTrue, databasev1alpha1.ReasonArchiving
			cond.Message = "archiving is on; no WAL file has been completed yet"
		}
	}
	meta.SetStatusCondition(&st.Conditions, cond)
	if last != nil || next != nil || *verified != (verifyState{}) {
		if st.Backup == nil {
			st.Backup = &databasev1alpha1.BackupStatus{}
		}
		st.Backup.LastScheduleTime, st.Backup.NextScheduleTime = last, next
		st.Backup.LastVerification, st.Backup.LastVerifiedTime, st.Backup.NextVerifyTime = verified.last, verified.passed, verified.next
	}
}

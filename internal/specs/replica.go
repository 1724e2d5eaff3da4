package specs

import (
	"fmt"
	"strconv"
	"strings"

	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
)

// ReplicaSourceTLSDir is where spec.replica.source.streaming's Secret is
// mounted.
const ReplicaSourceTLSDir = "/etc/mydatabase-replica-source"

const replicaSourceVolumeName = "replica-source"

// Replica is spec.replica, nil without one.
func Replica(db *databasev1alpha1.MyDatabase) *databasev1alpha1.ReplicaSpec { return db.Spec.Replica }

// FollowsSource tells whether db is a replica MyDatabase that still
// follows its source: spec.replica.enabled, or a promotion asked for whose
// designated primary still reports as one (status.replica).
func FollowsSource(db *databasev1alpha1.MyDatabase) bool {
	r := Replica(db)
	return r != nil && (r.Enabled || db.Status.Replica != nil)
}

// ReplicaSource names a replica's source: the archive's bucket/path and
// the streaming host:port, whichever it has.
func ReplicaSource(r *databasev1alpha1.ReplicaSpec) string {
	var names []string
	if s := r.Source.ObjectStore; s != nil {
		names = append(names, s.Bucket+"/"+s.Path)
	}
	if s := r.Source.Streaming; s != nil {
		names = append(names, fmt.Sprintf("%s:%d", s.Host, replicaStreamPort(s)))
	}
	return strings.Join(names, " and ")
}

// ReplicaSourceSecretKeys are the keys spec.replica.source.streaming's
// Secret must have.
var ReplicaSourceSecretKeys = []string{TLSCertKey, TLSKeyKey, CACertKey}

func replicaStreamPort(s *databasev1alpha1.ReplicaStreaming) int32 {
	if s.Port == 0 {
		return 5432
	}
	return s.Port
}

// replicaStreamEnv is the instance manager's environment for
// spec.replica.source.streaming.
func replicaStreamEnv(db *databasev1alpha1.MyDatabase) []*corev1ac.EnvVarApplyConfiguration {
	r := Replica(db)
	if r == nil || r.Source.Streaming == nil {
		return nil
	}
	s := r.Source.Streaming
	return []*corev1ac.EnvVarApplyConfiguration{
		corev1ac.EnvVar().WithName(contract.EnvReplicaStreamHost).WithValue(s.Host),
		corev1ac.EnvVar().WithName(contract.EnvReplicaStreamPort).WithValue(strconv.Itoa(int(replicaStreamPort(s)))),
		corev1ac.EnvVar().WithName(contract.EnvReplicaStreamTLSDir).WithValue(ReplicaSourceTLSDir),
	}
}

// replicaSourceVolume is spec.replica.source.streaming's Secret, readable
// through fsGroup; the instance manager copies it, as the other
// certificates (TLSDir).
func replicaSourceVolume(db *databasev1alpha1.MyDatabase) []*corev1ac.VolumeApplyConfiguration {
	r := Replica(db)
	if r == nil || r.Source.Streaming == nil {
		return nil
	}
	return []*corev1ac.VolumeApplyConfiguration{corev1ac.Volume().WithName(replicaSourceVolumeName).WithSecret(
		corev1ac.SecretVolumeSource().WithSecretName(r.Source.Streaming.SecretName).WithDefaultMode(0o440))}
}

// replicaSourceMount mounts replicaSourceVolume in the database container.
func replicaSourceMount(db *databasev1alpha1.MyDatabase) []*corev1ac.VolumeMountApplyConfiguration {
	r := Replica(db)
	if r == nil || r.Source.Streaming == nil {
		return nil
	}
	return []*corev1ac.VolumeMountApplyConfiguration{
		corev1ac.VolumeMount().WithName(replicaSourceVolumeName).WithMountPath(ReplicaSourceTLSDir).WithReadOnly(true)}
}

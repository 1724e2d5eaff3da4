package specs

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
)

// Paths inside the container.
const (
	DataMountPath = "/var/lib/postgresql/data"
	// PGDATA is a directory below the volume root, so that a lost+found on a
	// fresh filesystem never makes initdb refuse a non-empty directory.
	PGDATA = DataMountPath + "/pgdata"
	// WALMountPath is where the WAL volume is mounted (spec.walStorage),
	// and WALDir the directory on it that PGDATA/pg_wal links to, below
	// the volume root for the same reason.
	WALMountPath = "/var/lib/postgresql/wal"
	WALDir       = WALMountPath + "/pg_wal"
	// SocketDir holds the Unix socket and the instance manager's copies of
	// the certificates.
	SocketDir = "/var/run/postgresql"

	// PostgresUID is the postgres user of the official image (Debian variant).
	PostgresUID = 999
	// InstanceManagerDir is where the init container puts the instance
	// manager for the database container (an emptyDir).
	InstanceManagerDir = "/controller"
	// InstanceManagerPath is the database container's first process.
	InstanceManagerPath = InstanceManagerDir + "/instance"

	// ContainerName is the database container of the server pods.
	ContainerName = "postgres"
	// instanceManagerInImage is the instance manager in the operator's
	// image (the Dockerfile).
	instanceManagerInImage = "/instance"
)

// DefaultInstanceManagerImage is the operator's image as the Makefile names
// it by default (IMG).
const DefaultInstanceManagerImage = "controller:latest"

// Platform is what the builders take from the operator's own configuration
// rather than from the MyDatabase. The zero value is usable.
type Platform struct {
	// InstanceManagerImage is an image holding the instance manager at
	// /instance: the operator's own. The pod's init container copies it
	// from there, so that the database container runs the unmodified
	// official postgres image. Empty: DefaultInstanceManagerImage.
	InstanceManagerImage string
	// PoolerImageDefault is the PgBouncer image of a MyDatabasePooler that
	// names none; empty: DefaultPoolerImage.
	PoolerImageDefault string
}

// PodTemplateDigest is the SHA-256 of the servers' pod template with no
// instance manager image (and without this annotation): it changes with
// everything in the template but the operator's version. The template
// carries it (AnnotationPodTemplate), and so every pod.
func PodTemplateDigest(db *databasev1alpha1.MyDatabase) string {
	return templateDigest(podTemplateWithout(db, Platform{InstanceManagerImage: noImage}))
}

// noImage stands for the instance manager image in the template a digest
// is taken of.
const noImage = "-"

func templateDigest(t *corev1ac.PodTemplateSpecApplyConfiguration) string {
	b, _ := json.Marshal(t) // an apply configuration always marshals
	return fmt.Sprintf("%x", sha256.Sum256(b))
}

// InstanceManagerImage is the instance manager image of a pod template
// (its init container's), "" when it has none.
func InstanceManagerImage(spec *corev1.PodSpec) string {
	for _, c := range spec.InitContainers {
		if c.Name == instanceManagerContainer {
			return c.Image
		}
	}
	return ""
}

// Image is the instance manager image the pods are made with.
func (p Platform) Image() string { return p.instanceManagerImage() }

func (p Platform) instanceManagerImage() string {
	if p.InstanceManagerImage == "" {
		return DefaultInstanceManagerImage
	}
	return p.InstanceManagerImage
}

// Image is the container image: spec.image, else the official
// postgres:<version>.
func Image(db *databasev1alpha1.MyDatabase) string {
	if db.Spec.Image != "" {
		return db.Spec.Image
	}
	return "postgres:" + db.Spec.Version
}

// DefaultStorageSize is used when spec.storage.size is unset (the CRD
// defaults it, so only hand-built objects miss it).
var DefaultStorageSize = resource.MustParse("1Gi")

// StorageSize is the size every data volume should have: spec.storage.size,
// DefaultStorageSize when unset.
func StorageSize(db *databasev1alpha1.MyDatabase) resource.Quantity {
	return Volume{Spec: &db.Spec.Storage}.Size()
}

// Volume is one of the volumes every server has: its data volume, and its
// WAL volume with spec.walStorage. Each is a volumeClaimTemplate of the
// StatefulSet, and claims named <Name>-<statefulset>-<ordinal>.
type Volume struct {
	// Name of the volumeClaimTemplate: DataVolumeName or WALVolumeName.
	Name string
	// Field is the spec's field, for messages: spec.storage or spec.walStorage.
	Field string
	// What the volume holds, for messages: "data" or "WAL".
	What string
	// MountPath in the database container.
	MountPath string
	// Spec is the MyDatabase's spec of it.
	Spec *databasev1alpha1.StorageSpec
}

// Volumes are the volumes of every server of db: the data volume first.
func Volumes(db *databasev1alpha1.MyDatabase) []Volume {
	vs := []Volume{{Name: DataVolumeName, Field: "spec.storage", What: "data", MountPath: DataMountPath, Spec: &db.Spec.Storage}}
	if db.Spec.WALStorage != nil {
		vs = append(vs, Volume{Name: WALVolumeName, Field: "spec.walStorage", What: "WAL", MountPath: WALMountPath, Spec: db.Spec.WALStorage})
	}
	return vs
}

// Size is the size the volumes should have: the spec's size,
// DefaultStorageSize when unset.
func (v Volume) Size() resource.Quantity {
	if v.Spec.Size.IsZero() {
		return DefaultStorageSize
	}
	return v.Spec.Size
}

// ClaimName is the PVC the StatefulSet controller makes from the volume's
// template for the server of this ordinal.
func (v Volume) ClaimName(db *databasev1alpha1.MyDatabase, ordinal int32) string {
	return v.ClaimPrefix(db) + fmt.Sprint(ordinal)
}

// ClaimPrefix is what the names of the volume's claims start with.
func (v Volume) ClaimPrefix(db *databasev1alpha1.MyDatabase) string {
	return v.Name + "-" + StatefulSetName(db) + "-"
}

// StatefulSet runs the servers. Ordinal 0 makes the data of a new
// MyDatabase; the others clone the primary and stream from it; from then on
// the primary is whichever instance holds the Lease (internal/instance).
//
// OrderedReady pod management: a replica can only clone a primary that is
// up, so pod N+1 must wait for pod N to be Ready; scale-down removes the
// highest ordinal first (a primary there gives the Lease up on its way out).
//
// OnDelete: the StatefulSet controller never restarts a pod for a new
// template; the operator does, replicas first and the primary after a
// switchover (internal/controller/mydatabase, rollout.go).
func StatefulSet(db *databasev1alpha1.MyDatabase, p Platform) *appsv1ac.StatefulSetApplyConfiguration {
	return appsv1ac.StatefulSet(StatefulSetName(db), db.Namespace).
		WithLabels(Labels(db, ComponentDatabase)).
		WithOwnerReferences(ownerReferenceApply(db)).
		WithSpec(appsv1ac.StatefulSetSpec().
			WithReplicas(Replicas(db)).
			WithServiceName(HeadlessServiceName(db)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(db))).
			WithPodManagementPolicy(appsv1.OrderedReadyPodManagement).
			WithUpdateStrategy(appsv1ac.StatefulSetUpdateStrategy().
				WithType(appsv1.OnDeleteStatefulSetStrategyType)).
			WithPersistentVolumeClaimRetentionPolicy(pvcRetentionPolicy(db)).
			WithTemplate(podTemplate(db, p)).
			WithVolumeClaimTemplates(volumeClaims(db)...))
}

// pvcRetentionPolicy follows deletionPolicy: Retain keeps every volume, on
// deletion and on scale-down; Delete removes them with the StatefulSet and
// when a replica is scaled away (a replica's data is a copy of the primary's).
func pvcRetentionPolicy(db *databasev1alpha1.MyDatabase) *appsv1ac.StatefulSetPersistentVolumeClaimRetentionPolicyApplyConfiguration {
	policy := appsv1.RetainPersistentVolumeClaimRetentionPolicyType
	if db.Spec.DeletionPolicy == databasev1alpha1.DeletionPolicyDelete {
		policy = appsv1.DeletePersistentVolumeClaimRetentionPolicyType
	}
	return appsv1ac.StatefulSetPersistentVolumeClaimRetentionPolicy().
		WithWhenDeleted(policy).WithWhenScaled(policy)
}

func volumeClaims(db *databasev1alpha1.MyDatabase) []*corev1ac.PersistentVolumeClaimApplyConfiguration {
	volumes := Volumes(db)
	claims := make([]*corev1ac.PersistentVolumeClaimApplyConfiguration, 0, len(volumes))
	for _, v := range volumes {
		spec := corev1ac.PersistentVolumeClaimSpec().
			WithAccessModes(corev1.ReadWriteOnce).
			WithResources(corev1ac.VolumeResourceRequirements().
				WithRequests(corev1.ResourceList{corev1.ResourceStorage: v.Size()}))
		if v.Spec.StorageClassName != nil {
			spec.WithStorageClassName(*v.Spec.StorageClassName)
		}
		// Not corev1ac.PersistentVolumeClaim(), which sets apiVersion and
		// kind: the server drops those from a template, and the live object
		// must be able to agree with the desired one.
		claims = append(claims, (&corev1ac.PersistentVolumeClaimApplyConfiguration{}).
			WithName(v.Name).
			WithLabels(Labels(db, ComponentDatabase)).
			WithSpec(spec))
	}
	return claims
}

// volumeMounts mount every volume of Volumes(db).
func volumeMounts(db *databasev1alpha1.MyDatabase) []*corev1ac.VolumeMountApplyConfiguration {
	volumes := Volumes(db)
	mounts := make([]*corev1ac.VolumeMountApplyConfiguration, 0, len(volumes))
	for _, v := range volumes {
		mounts = append(mounts, corev1ac.VolumeMount().WithName(v.Name).WithMountPath(v.MountPath))
	}
	return mounts
}

// podTemplate is the servers' pod template, with its PodTemplateDigest:
// built once, its digest taken before the image goes in.
func podTemplate(db *databasev1alpha1.MyDatabase, p Platform) *corev1ac.PodTemplateSpecApplyConfiguration {
	t := podTemplateWithout(db, Platform{InstanceManagerImage: noImage})
	digest := templateDigest(t)
	t.Spec.InitContainers[0].WithImage(p.instanceManagerImage())
	return t.WithAnnotations(map[string]string{databasev1alpha1.AnnotationPodTemplate: digest})
}

// podTemplateWithout is the pod template without AnnotationPodTemplate.
func podTemplateWithout(db *databasev1alpha1.MyDatabase, p Platform) *corev1ac.PodTemplateSpecApplyConfiguration {
	podLabels := maps.Clone(db.Spec.PodLabels)
	if podLabels == nil {
		podLabels = map[string]string{}
	}
	maps.Copy(podLabels, SelectorLabels(db))
	podLabels[databasev1alpha1.LabelOwnerUID] = string(db.UID)

	annotations := maps.Clone(db.Spec.PodAnnotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[databasev1alpha1.AnnotationConfigHash] = ConfigHash(db)

	// The token is the instance manager's: it renews the Lease and reports
	// on its own pod, and may do nothing else (InstanceRole).
	spec := corev1ac.PodSpec().
		WithServiceAccountName(InstanceAccessName(db)).
		WithAutomountServiceAccountToken(true).
		WithEnableServiceLinks(false).
		WithTerminationGracePeriodSeconds(60).
		WithSecurityContext(postgresPodSecurity()).
		WithInitContainers(instanceManagerInstaller(p)).
		WithContainers(container(db)).
		WithVolumes(
			corev1ac.Volume().WithName("config").WithConfigMap(corev1ac.ConfigMapVolumeSource().
				WithName(ConfigMapName(db)).WithDefaultMode(0o444)),
			corev1ac.Volume().WithName(instanceManagerVolume).WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
			// Readable through fsGroup; the instance manager copies it (TLSDir).
			corev1ac.Volume().WithName(tlsVolume).WithSecret(corev1ac.SecretVolumeSource().
				WithSecretName(ServerCertSecretName(db)).WithDefaultMode(0o440)),
			corev1ac.Volume().WithName(replicationTLSVolume).WithSecret(corev1ac.SecretVolumeSource().
				WithSecretName(ReplicationCertSecretName(db)).WithDefaultMode(0o440)),
			corev1ac.Volume().WithName("run").WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
			corev1ac.Volume().WithName("tmp").WithEmptyDir(corev1ac.EmptyDirVolumeSource())).
		WithVolumes(customQueriesVolume(db)...).
		WithVolumes(replicaSourceVolume(db)...).
		WithVolumes(encryptionVolumes(db)...)
	place(spec, db.Spec.NodeSelector, db.Spec.Tolerations, db.Spec.PriorityClassName, db.Spec.TopologySpreadConstraints)
	if db.Spec.Affinity != nil {
		spec.WithAffinity(convert[corev1ac.AffinityApplyConfiguration](db.Spec.Affinity))
	} else {
		spec.WithAffinity(spreadServers(db))
	}
	return corev1ac.PodTemplateSpec().
		WithLabels(podLabels).
		WithAnnotations(annotations).
		WithSpec(spec)
}

// place sets the scheduling fields a MyDatabase's pods, its upgrade Job
// and a MyDatabasePooler's pods take from their spec (the affinity has a
// default of its own in each).
func place(spec *corev1ac.PodSpecApplyConfiguration, nodeSelector map[string]string, tolerations []corev1.Toleration,
	priorityClassName string, spread []corev1.TopologySpreadConstraint) {
	if len(nodeSelector) > 0 {
		spec.WithNodeSelector(nodeSelector)
	}
	for i := range tolerations {
		spec.WithTolerations(convert[corev1ac.TolerationApplyConfiguration](tolerations[i]))
	}
	if priorityClassName != "" {
		spec.WithPriorityClassName(priorityClassName)
	}
	for i := range spread {
		spec.WithTopologySpreadConstraints(convert[corev1ac.TopologySpreadConstraintApplyConfiguration](spread[i]))
	}
}

// spreadServers is the affinity of a MyDatabase that sets none: its servers
// prefer nodes, then zones, that run none of its other servers. Preferred,
// not required, so a one-node cluster still runs every replica.
func spreadServers(db *databasev1alpha1.MyDatabase) *corev1ac.AffinityApplyConfiguration {
	apart := func(weight int32, topologyKey string) *corev1ac.WeightedPodAffinityTermApplyConfiguration {
		return corev1ac.WeightedPodAffinityTerm().WithWeight(weight).WithPodAffinityTerm(corev1ac.PodAffinityTerm().
			WithTopologyKey(topologyKey).
			WithLabelSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(db))))
	}
	return corev1ac.Affinity().WithPodAntiAffinity(corev1ac.PodAntiAffinity().
		WithPreferredDuringSchedulingIgnoredDuringExecution(
			apart(100, corev1.LabelHostname),
			apart(50, corev1.LabelTopologyZone)))
}

const (
	instanceManagerContainer = "instance-manager"
	instanceManagerVolume    = "controller"
	tlsVolume                = "tls"
	replicationTLSVolume     = "replication-tls"
)

// instanceManagerInstaller is the init container that copies the instance
// manager out of the operator's image into the pod.
func instanceManagerInstaller(p Platform) *corev1ac.ContainerApplyConfiguration {
	return corev1ac.Container().
		WithName(instanceManagerContainer).
		WithImage(p.instanceManagerImage()).
		WithCommand(instanceManagerInImage, "install", InstanceManagerPath).
		WithVolumeMounts(corev1ac.VolumeMount().WithName(instanceManagerVolume).WithMountPath(InstanceManagerDir)).
		WithSecurityContext(restrictedContainer())
}

// postgresPodSecurity is the security context of every pod that runs
// PostgreSQL: Pod Security "restricted", as the postgres user of the
// official image, which owns the volumes through fsGroup.
func postgresPodSecurity() *corev1ac.PodSecurityContextApplyConfiguration {
	return corev1ac.PodSecurityContext().
		WithRunAsNonRoot(true).
		WithRunAsUser(PostgresUID).
		WithRunAsGroup(PostgresUID).
		WithFSGroup(PostgresUID).
		WithFSGroupChangePolicy(corev1.FSGroupChangeOnRootMismatch).
		WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))
}

// restrictedContainer is the security context of every container: Pod
// Security "restricted", and a read-only root.
func restrictedContainer() *corev1ac.SecurityContextApplyConfiguration {
	return corev1ac.SecurityContext().
		WithAllowPrivilegeEscalation(false).
		WithPrivileged(false).
		WithReadOnlyRootFilesystem(true).
		WithRunAsNonRoot(true).
		WithCapabilities(corev1ac.Capabilities().WithDrop("ALL"))
}

func container(db *databasev1alpha1.MyDatabase) *corev1ac.ContainerApplyConfiguration {
	c := corev1ac.Container().
		WithName(ContainerName).
		WithImage(Image(db)).
		WithCommand(InstanceManagerPath, "run").
		WithPorts(corev1ac.ContainerPort().WithName(portName).WithContainerPort(containerPort).WithProtocol(corev1.ProtocolTCP),
			metricsPort()).
		WithEnv(Env(db)...).
		WithVolumeMounts(volumeMounts(db)...).
		WithVolumeMounts(
									corev1ac.VolumeMount().WithName("config").WithMountPath(ConfigDir).WithReadOnly(true),
									corev1ac.VolumeMount().WithName(instanceManagerVolume).WithMountPath(InstanceManagerDir).WithReadOnly(true),
									corev1ac.VolumeMount().WithName(tlsVolume).WithMountPath(TLSDir).WithReadOnly(true),
									corev1ac.VolumeMount().WithName(replicationTLSVolume).WithMountPath(ReplicationTLSDir).WithReadOnly(true),
									corev1ac.VolumeMount().WithName("run").WithMountPath(SocketDir),
									corev1ac.VolumeMount().WithName("tmp").WithMountPath("/tmp")).
		WithStartupProbe(execProbe(ReadinessCommand, 5, 720)). // up to an hour for initdb or a clone
		WithReadinessProbe(execProbe(ReadinessCommand, 5, 3)).
		WithLivenessProbe(execProbe(LivenessCommand, 10, 6)).
		WithSecurityContext(restrictedContainer()).
		WithVolumeMounts(customQueriesMount(db)...).
		WithVolumeMounts(replicaSourceMount(db)...).
		WithVolumeMounts(encryptionMounts(db)...)
	if r := resources(db); r != nil {
		c.WithResources(r)
	}
	return c
}

// Probe commands. pg_isready reads the socket directory and port from
// PGHOST and PGPORT in the container's environment and needs no password.
var (
	// ReadinessCommand: ready when the server accepts connections (a hot
	// standby does once it is consistent).
	ReadinessCommand = []string{"pg_isready", "--quiet"}
	// LivenessCommand: alive while the server answers at all; exit 1 means
	// it answers but rejects connections (starting, recovering, stopping),
	// which is no reason to kill it.
	LivenessCommand = []string{"/bin/sh", "-c", "pg_isready --quiet; test $? -le 1"}
)

func execProbe(command []string, period, failures int32) *corev1ac.ProbeApplyConfiguration {
	return corev1ac.Probe().
		WithExec(corev1ac.ExecAction().WithCommand(command...)).
		WithPeriodSeconds(period).
		WithTimeoutSeconds(5).
		WithFailureThreshold(failures)
}

// Env is the environment of the PostgreSQL container, the contract between
// the operator and the instance manager (internal/instance.ConfigFromEnv).
func Env(db *databasev1alpha1.MyDatabase) []*corev1ac.EnvVarApplyConfiguration {
	secretRef := func(name, key string) *corev1ac.EnvVarSourceApplyConfiguration {
		return corev1ac.EnvVarSource().WithSecretKeyRef(corev1ac.SecretKeySelector().WithName(name).WithKey(key))
	}
	env := func(name, value string) *corev1ac.EnvVarApplyConfiguration {
		return corev1ac.EnvVar().WithName(name).WithValue(value)
	}
	vars := []*corev1ac.EnvVarApplyConfiguration{
		corev1ac.EnvVar().WithName(contract.EnvPodName).WithValueFrom(corev1ac.EnvVarSource().
			WithFieldRef(corev1ac.ObjectFieldSelector().WithFieldPath("metadata.name"))),
		env(contract.EnvPGData, PGDATA),
		env(contract.EnvSocketDir, SocketDir),
		env(contract.EnvPort, fmt.Sprint(containerPort)),
		env(contract.EnvConfigDir, ConfigDir),
		env(contract.EnvTLSDir, TLSDir),
		env(contract.EnvReplicationTLSDir, ReplicationTLSDir),
		env(contract.EnvUser, db.Spec.User),
		env(contract.EnvDatabase, db.Spec.DatabaseName),
		corev1ac.EnvVar().WithName(contract.EnvPassword).
			WithValueFrom(secretRef(CredentialsSecretName(db), SecretPasswordKey)),
		// Only while a MyDatabase made before replication by certificate
		// still has the Secret: a replica falls back to it against a
		// primary that does not check certificates yet (optional: no pod
		// needs the Secret to start).
		corev1ac.EnvVar().WithName(contract.EnvReplicationPassword).
			WithValueFrom(corev1ac.EnvVarSource().WithSecretKeyRef(corev1ac.SecretKeySelector().
				WithName(LegacyReplicationSecretName(db)).WithKey(SecretPasswordKey).WithOptional(true))),
		env(contract.EnvBootstrapPod, BootstrapPod(db)),
		corev1ac.EnvVar().WithName(contract.EnvNamespace).WithValueFrom(corev1ac.EnvVarSource().
			WithFieldRef(corev1ac.ObjectFieldSelector().WithFieldPath("metadata.namespace"))),
		env(contract.EnvLeaseName, LeaseName(db)),
		env(contract.EnvPodSelector, Selector(db)),
		// The kubelet expands $(POD_NAME), defined above.
		env(contract.EnvAdvertiseAddress, fmt.Sprintf("$(POD_NAME).%s.%s.svc:%d", HeadlessServiceName(db), db.Namespace, containerPort)),
		env(contract.EnvLeaseDurationSeconds, fmt.Sprint(LeaseDurationSeconds(db))),
		env(contract.EnvPasswordSecrets, PasswordSources(db)),
	}
	if db.Spec.WALStorage != nil {
		vars = append(vars, env(contract.EnvWALDir, WALDir))
	}
	vars = append(vars, metricsEnv(db)...)
	vars = append(vars, backupEnv(db)...)
	vars = append(vars, encryptionEnv(db)...)
	return append(vars, replicaStreamEnv(db)...)
}

// InstanceSelector selects the pods of this MyDatabase and no other of the
// same name: the selector labels and the owner's UID.
func InstanceSelector(db *databasev1alpha1.MyDatabase) map[string]string {
	l := SelectorLabels(db)
	l[databasev1alpha1.LabelOwnerUID] = string(db.UID)
	return l
}

// DefaultLeaseDurationSeconds is spec.failover.leaseDurationSeconds when
// unset (the CRD defaults it; hand-built objects miss it).
const DefaultLeaseDurationSeconds = 4

// LeaseDurationSeconds is spec.failover.leaseDurationSeconds or its default.
func LeaseDurationSeconds(db *databasev1alpha1.MyDatabase) int32 {
	if d := db.Spec.Failover.LeaseDurationSeconds; d > 0 {
		return d
	}
	return DefaultLeaseDurationSeconds
}

// convert turns a typed API struct into its apply configuration. Both share
// the same JSON form, so a round trip is exact.
func convert[T any](in any) *T {
	raw, err := json.Marshal(in)
	if err != nil {
		panic(fmt.Sprintf("marshal %T: %v", in, err))
	}
	out := new(T)
	if err := json.Unmarshal(raw, out); err != nil {
		panic(fmt.Sprintf("unmarshal into %T: %v", out, err))
	}
	return out
}

// resources is spec.resources for a container that runs PostgreSQL (the
// server, and the major upgrade's pg_upgrade); nil when it sets none.
func resources(db *databasev1alpha1.MyDatabase) *corev1ac.ResourceRequirementsApplyConfiguration {
	if len(db.Spec.Resources.Limits) == 0 && len(db.Spec.Resources.Requests) == 0 {
		return nil
	}
	r := corev1ac.ResourceRequirements()
	if len(db.Spec.Resources.Limits) > 0 {
		r.WithLimits(db.Spec.Resources.Limits)
	}
	if len(db.Spec.Resources.Requests) > 0 {
		r.WithRequests(db.Spec.Resources.Requests)
	}
	return r
}

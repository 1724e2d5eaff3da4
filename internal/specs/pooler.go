package specs

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	"k8s.io/utils/ptr"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/pki"
)

// A MyDatabasePooler's children, all named for the pooler and owned by
// it: the Deployment of PgBouncer pods, the Service clients connect to,
// the ConfigMap of the pooler manager's configuration (contract.Pooler),
// the Secret of its certificates, and a PodDisruptionBudget while it runs
// more than one pod. Each pod runs the instance manager binary as PID 1
// (`instance pooler`, internal/pooler), copied in by an init container as
// in the database pods, so the PgBouncer image runs unmodified.

// ComponentPooler labels a pooler's children.
const ComponentPooler = "pooler"

// DefaultPoolerImage is the PgBouncer image when neither spec.image nor the
// operator's --pooler-image names one: Debian's pgbouncer package, built
// by hack/ for the local clusters (docs/pooler.md).
const DefaultPoolerImage = "mydatabase-pgbouncer:1.18.0"

// Where the pooler container finds what the operator gives it.
const (
	PoolerConfigDir = "/etc/pooler/config"
	PoolerTLSDir    = "/etc/pooler/tls"
	PoolerRunDir    = "/run/pooler"
)

// PoolerContainerName is the PgBouncer container of a pooler pod.
const PoolerContainerName = "pgbouncer"

// PoolerConfigMapName and PoolerSecretName: the pooler manager's
// configuration and certificates.
func PoolerConfigMapName(p *databasev1alpha1.MyDatabasePooler) string { return p.Name + "-config" }
func PoolerSecretName(p *databasev1alpha1.MyDatabasePooler) string    { return p.Name + "-tls" }

// PoolerInstances is spec.instances or its default.
func PoolerInstances(p *databasev1alpha1.MyDatabasePooler) int32 {
	return ptr.Deref(p.Spec.Instances, 2)
}

// PoolerSelectorLabels select a pooler's pods.
func PoolerSelectorLabels(p *databasev1alpha1.MyDatabasePooler) map[string]string {
	return map[string]string{
		databasev1alpha1.LabelName:      "pgbouncer",
		databasev1alpha1.LabelInstance:  p.Name,
		databasev1alpha1.LabelComponent: ComponentPooler,
		databasev1alpha1.LabelManagedBy: databasev1alpha1.ManagedBy,
	}
}

// PoolerLabels are the labels of a pooler's children.
func PoolerLabels(p *databasev1alpha1.MyDatabasePooler) map[string]string {
	l := PoolerSelectorLabels(p)
	l[databasev1alpha1.LabelOwnerUID] = string(p.UID)
	return l
}

// PoolerOwnerReference makes the pooler the controller of a child.
func PoolerOwnerReference(p *databasev1alpha1.MyDatabasePooler) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: databasev1alpha1.GroupVersion.String(), Kind: "MyDatabasePooler",
		Name: p.Name, UID: p.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
}

func poolerOwnerApply(p *databasev1alpha1.MyDatabasePooler) *metav1ac.OwnerReferenceApplyConfiguration {
	ref := PoolerOwnerReference(p)
	return metav1ac.OwnerReference().WithAPIVersion(ref.APIVersion).WithKind(ref.Kind).
		WithName(ref.Name).WithUID(ref.UID).WithController(true).WithBlockOwnerDeletion(true)
}

// PoolerDNSNames are the names of the pooler's Service, which its
// certificate covers for clients' sslmode=verify-full.
func PoolerDNSNames(p *databasev1alpha1.MyDatabasePooler) []string {
	ns := p.Name + "." + p.Namespace
	return []string{p.Name, ns, ns + ".svc", ns + ".svc.cluster.local"}
}

// PoolerServersHost is the Service of db the pooler leads to.
func PoolerServersHost(p *databasev1alpha1.MyDatabasePooler, db *databasev1alpha1.MyDatabase) string {
	name := ReadWriteServiceName(db)
	if p.Spec.Type == databasev1alpha1.PoolerReadOnly {
		name = ReadOnlyServiceName(db)
	}
	return name + "." + db.Namespace + ".svc"
}

// PoolerConfig is what the pooler manager runs PgBouncer with.
func PoolerConfig(p *databasev1alpha1.MyDatabasePooler, db *databasev1alpha1.MyDatabase) contract.Pooler {
	c := contract.Pooler{Host: PoolerServersHost(p, db), Port: ServicePort(db), ClientTLS: "prefer",
		Settings: map[string]string{"pool_mode": string(cmp.Or(p.Spec.PoolMode, databasev1alpha1.PoolModeSession))}}
	if db.Spec.TLS.Clients == databasev1alpha1.TLSClientsRequired {
		c.ClientTLS = "require"
	}
	c.PauseOnSwitchover = PoolerPausesOnSwitchover(p)
	if c.PauseOnSwitchover {
		c.ID = contract.PoolerID(string(p.UID))
	}
	s := p.Spec.PgBouncer
	c.Paused = s.Paused
	for name, v := range map[string]*int32{
		"default_pool_size":    s.DefaultPoolSize,
		"min_pool_size":        s.MinPoolSize,
		"reserve_pool_size":    s.ReservePoolSize,
		"max_client_conn":      s.MaxClientConnections,
		"max_db_connections":   s.MaxDBConnections,
		"query_wait_timeout":   s.QueryWaitTimeoutSeconds,
		"server_idle_timeout":  s.ServerIdleTimeoutSeconds,
		"client_idle_timeout":  s.ClientIdleTimeoutSeconds,
		"reserve_pool_timeout": s.ReservePoolTimeoutSeconds,
	} {
		if v != nil {
			c.Settings[name] = strconv.Itoa(int(*v))
		}
	}
	return c
}

// PoolerPausesOnSwitchover: a read-write pooler in transaction mode
// pauses through switchovers (contract.Pooler.PauseOnSwitchover).
func PoolerPausesOnSwitchover(p *databasev1alpha1.MyDatabasePooler) bool {
	return p.Spec.Type != databasev1alpha1.PoolerReadOnly && p.Spec.PoolMode == databasev1alpha1.PoolModeTransaction
}

// PoolerConfigMap holds PoolerConfig. A change reaches the running pods
// through the volume, and the pooler manager reloads PgBouncer: no pod
// restarts for a setting.
func PoolerConfigMap(p *databasev1alpha1.MyDatabasePooler, db *databasev1alpha1.MyDatabase) *corev1ac.ConfigMapApplyConfiguration {
	b := poolerConfigJSON(p, db)
	return corev1ac.ConfigMap(PoolerConfigMapName(p), p.Namespace).
		WithLabels(PoolerLabels(p)).
		WithOwnerReferences(poolerOwnerApply(p)).
		WithData(map[string]string{contract.PoolerConfigKey: string(b)})
}

// PoolerConfigHash is the hash of the ConfigMap's configuration, which
// the operator puts on the pooler's pods (AnnotationPoolerConfig).
func PoolerConfigHash(p *databasev1alpha1.MyDatabasePooler, db *databasev1alpha1.MyDatabase) string {
	sum := sha256.Sum256(poolerConfigJSON(p, db))
	return hex.EncodeToString(sum[:8])
}

func poolerConfigJSON(p *databasev1alpha1.MyDatabasePooler, db *databasev1alpha1.MyDatabase) []byte {
	b, _ := json.Marshal(PoolerConfig(p, db)) // contract.Pooler always marshals
	return b
}

// PoolerService is where clients connect.
func PoolerService(p *databasev1alpha1.MyDatabasePooler) *corev1ac.ServiceApplyConfiguration {
	return corev1ac.Service(p.Name, p.Namespace).
		WithLabels(PoolerLabels(p)).
		WithOwnerReferences(poolerOwnerApply(p)).
		WithSpec(corev1ac.ServiceSpec().
			WithType(cmp.Or(p.Spec.ServiceType, corev1.ServiceTypeClusterIP)).
			WithSelector(PoolerSelectorLabels(p)).
			WithPorts(corev1ac.ServicePort().WithName(ComponentPooler).WithPort(contract.PoolerPort).
				WithTargetPort(intstr.FromString(ComponentPooler)).WithProtocol(corev1.ProtocolTCP)))
}

// PoolerDisruptionBudget lets a drain take one PgBouncer pod at a time;
// only while there are several.
func PoolerDisruptionBudget(p *databasev1alpha1.MyDatabasePooler) *policyv1ac.PodDisruptionBudgetApplyConfiguration {
	return policyv1ac.PodDisruptionBudget(p.Name, p.Namespace).
		WithLabels(PoolerLabels(p)).
		WithOwnerReferences(poolerOwnerApply(p)).
		WithSpec(policyv1ac.PodDisruptionBudgetSpec().
			WithMaxUnavailable(intstr.FromInt32(1)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(PoolerSelectorLabels(p))))
}

// PoolerImage is spec.image, else the platform's, else DefaultPoolerImage.
func (pl Platform) PoolerImage(p *databasev1alpha1.MyDatabasePooler) string {
	return cmp.Or(p.Spec.Image, pl.PoolerImageDefault, DefaultPoolerImage)
}

// PoolerDeployment runs the PgBouncer pods. Their template changes with
// the image, resources and placement only: settings and certificates are
// reloaded in place.
func PoolerDeployment(p *databasev1alpha1.MyDatabasePooler, pl Platform) *appsv1ac.DeploymentApplyConfiguration {
	podLabels := maps.Clone(p.Spec.PodLabels)
	if podLabels == nil {
		podLabels = map[string]string{}
	}
	maps.Copy(podLabels, PoolerLabels(p))
	env := func(name, value string) *corev1ac.EnvVarApplyConfiguration {
		return corev1ac.EnvVar().WithName(name).WithValue(value)
	}
	ctr := corev1ac.Container().
		WithName(PoolerContainerName).
		WithImage(pl.PoolerImage(p)).
		WithCommand(InstanceManagerPath, "pooler").
		WithEnv(
			env(contract.PoolerConfigEnv, PoolerConfigDir+"/"+contract.PoolerConfigKey),
			env(contract.PoolerTLSEnv, PoolerTLSDir),
			env(contract.PoolerRunEnv, PoolerRunDir),
			env(contract.PoolerPortEnv, strconv.Itoa(contract.PoolerPort)),
			env(contract.PoolerMetricsEnv, fmt.Sprintf(":%d", contract.PoolerMetricsPort))).
		WithPorts(corev1ac.ContainerPort().WithName(ComponentPooler).WithContainerPort(contract.PoolerPort).WithProtocol(corev1.ProtocolTCP),
			corev1ac.ContainerPort().WithName(MetricsPortName).WithContainerPort(contract.PoolerMetricsPort).WithProtocol(corev1.ProtocolTCP)).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName("config").WithMountPath(PoolerConfigDir).WithReadOnly(true),
			corev1ac.VolumeMount().WithName(tlsVolume).WithMountPath(PoolerTLSDir).WithReadOnly(true),
			corev1ac.VolumeMount().WithName(instanceManagerVolume).WithMountPath(InstanceManagerDir).WithReadOnly(true),
			corev1ac.VolumeMount().WithName("run").WithMountPath(PoolerRunDir)).
		WithReadinessProbe(corev1ac.Probe().WithTCPSocket(corev1ac.TCPSocketAction().WithPort(intstr.FromString(ComponentPooler))).
			WithPeriodSeconds(5).WithFailureThreshold(3)).
		WithLivenessProbe(corev1ac.Probe().WithTCPSocket(corev1ac.TCPSocketAction().WithPort(intstr.FromString(ComponentPooler))).
			WithPeriodSeconds(10).WithFailureThreshold(6)).
		WithSecurityContext(restrictedContainer())
	if r := p.Spec.Resources; len(r.Limits) > 0 || len(r.Requests) > 0 {
		ctr.WithResources(convert[corev1ac.ResourceRequirementsApplyConfiguration](r))
	}
	spec := corev1ac.PodSpec().
		WithAutomountServiceAccountToken(false).
		WithEnableServiceLinks(false).
		// PgBouncer's SIGINT waits for clients to finish (a safe shutdown).
		WithTerminationGracePeriodSeconds(30).
		WithSecurityContext(corev1ac.PodSecurityContext().
			WithRunAsNonRoot(true).
			WithRunAsUser(PostgresUID).
			WithRunAsGroup(PostgresUID).
			WithFSGroup(PostgresUID).
			WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))).
		WithInitContainers(instanceManagerInstaller(pl)).
		WithContainers(ctr).
		WithVolumes(
			corev1ac.Volume().WithName("config").WithConfigMap(corev1ac.ConfigMapVolumeSource().
				WithName(PoolerConfigMapName(p)).WithDefaultMode(0o444)),
			corev1ac.Volume().WithName(tlsVolume).WithSecret(corev1ac.SecretVolumeSource().
				WithSecretName(PoolerSecretName(p)).WithDefaultMode(0o440)),
			corev1ac.Volume().WithName(instanceManagerVolume).WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
			corev1ac.Volume().WithName("run").WithEmptyDir(corev1ac.EmptyDirVolumeSource()))
	place(spec, p.Spec.NodeSelector, p.Spec.Tolerations, p.Spec.PriorityClassName, p.Spec.TopologySpreadConstraints)
	if p.Spec.Affinity != nil {
		spec.WithAffinity(convert[corev1ac.AffinityApplyConfiguration](p.Spec.Affinity))
	}
	template := corev1ac.PodTemplateSpec().WithLabels(podLabels).WithSpec(spec)
	if len(p.Spec.PodAnnotations) > 0 {
		template.WithAnnotations(p.Spec.PodAnnotations)
	}
	return appsv1ac.Deployment(p.Name, p.Namespace).
		WithLabels(PoolerLabels(p)).
		WithOwnerReferences(poolerOwnerApply(p)).
		WithSpec(appsv1ac.DeploymentSpec().
			WithReplicas(PoolerInstances(p)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(PoolerSelectorLabels(p))).
			WithTemplate(template))
}

// PoolerSecret holds the pooler's certificates: the one it presents to
// clients (tls.crt, tls.key), the one it logs in to the servers with as
// contract.PoolerRole, the MyDatabase's CA (ca.crt: clients verify the
// pooler with it) and the CA the servers' certificate is verified with.
func PoolerSecret(p *databasev1alpha1.MyDatabasePooler, server, client pki.KeyPair, caCert, serverCA []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:            PoolerSecretName(p),
			Namespace:       p.Namespace,
			Labels:          PoolerLabels(p),
			OwnerReferences: []metav1.OwnerReference{PoolerOwnerReference(p)},
		},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{
			TLSCertKey: server.Cert, TLSKeyKey: server.Key, CACertKey: caCert,
			contract.PoolerClientCertKey: client.Cert, contract.PoolerClientKeyKey: client.Key,
			contract.PoolerServerCAKey: serverCA,
		},
	}
}

// PoolerEndpoint is host:port of the pooler's Service.
func PoolerEndpoint(p *databasev1alpha1.MyDatabasePooler) string {
	return fmt.Sprintf("%s.%s.svc:%d", p.Name, p.Namespace, contract.PoolerPort)
}

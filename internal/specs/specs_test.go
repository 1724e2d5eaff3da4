package specs

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/pki"
)

// db returns a MyDatabase as the API server defaults it.
func db(mutate ...func(*databasev1alpha1.MyDatabase)) *databasev1alpha1.MyDatabase {
	d := &databasev1alpha1.MyDatabase{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop", UID: "uid-1"},
		Spec: databasev1alpha1.MyDatabaseSpec{
			Engine: databasev1alpha1.EnginePostgres, Version: "17", Replicas: ptr.To[int32](1),
			Storage:      databasev1alpha1.StorageSpec{Size: resource.MustParse("1Gi")},
			DatabaseName: "app", User: "app",
			Service:        databasev1alpha1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Port: 5432},
			DeletionPolicy: databasev1alpha1.DeletionPolicyRetain,
		},
	}
	for _, m := range mutate {
		m(d)
	}
	return d
}

// typed turns an apply configuration into the API object it describes.
func typed[T any](t *testing.T, ac any) *T {
	t.Helper()
	raw, err := json.Marshal(ac)
	if err != nil {
		t.Fatal(err)
	}
	out := new(T)
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPostgresConf(t *testing.T) {
	cases := map[string]struct {
		params  map[string]string
		replica bool
		want    []string
		absent  []string
	}{
		"defaults": {
			want: []string{"listen_addresses = '*'", "wal_level = 'replica'", "hot_standby = 'on'", "password_encryption = 'scram-sha-256'",
				"wal_retrieve_retry_interval = '1s'"},
		},
		"a replica MyDatabase keeps PostgreSQL's archive retry": {
			replica: true,
			absent:  []string{"wal_retrieve_retry_interval"},
		},
		"user setting": {
			params: map[string]string{"max_connections": "250"},
			want:   []string{"max_connections = '250'"},
		},
		"user overrides a default once": {
			params: map[string]string{"wal_keep_size": "1GB"},
			want:   []string{"wal_keep_size = '1GB'"},
			absent: []string{"wal_keep_size = '128MB'"},
		},
		"quotes and line breaks cannot escape the value": {
			params: map[string]string{"application_name": "it's\nport = 1"},
			want:   []string{`application_name = 'it''s\nport = 1'`},
			absent: []string{"\nport = 1"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			conf := PostgresConf(db(func(d *databasev1alpha1.MyDatabase) {
				d.Spec.Parameters = tc.params
				if tc.replica {
					d.Spec.Replica = &databasev1alpha1.ReplicaSpec{}
				}
			}))
			for _, w := range tc.want {
				if !strings.Contains(conf, w+"\n") {
					t.Errorf("postgresql.conf lacks %q:\n%s", w, conf)
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(conf, a) {
					t.Errorf("postgresql.conf contains %q:\n%s", a, conf)
				}
			}
		})
	}
}

func TestConfigHashFollowsSettingsOnly(t *testing.T) {
	base := ConfigHash(db())
	if ConfigHash(db()) != base {
		t.Fatal("ConfigHash is not deterministic")
	}
	if ConfigHash(db(func(d *databasev1alpha1.MyDatabase) { d.Spec.Parameters = map[string]string{"work_mem": "8MB"} })) == base {
		t.Error("a parameter change does not change the config hash: pods would not roll")
	}
	if ConfigHash(db(func(d *databasev1alpha1.MyDatabase) { d.Spec.Replicas = ptr.To[int32](3) })) != base {
		t.Error("scaling changes the config hash: every pod would restart on a scale")
	}
	// The default retry interval came with an operator upgrade: the hash
	// is the one the operator before it computed (at 841648f), so the
	// upgrade rolls no pod.
	if base != "5f77cb00fd018255" {
		t.Errorf("config hash %s, was 5f77cb00fd018255 before the default %s: an operator upgrade would roll every pod", base, retryName)
	}
	conf := PostgresConf(db())
	if !strings.Contains(conf, retryName) {
		t.Fatalf("no %s in postgresql.conf:\n%s", retryName, conf)
	}
	if ConfigHash(db(func(d *databasev1alpha1.MyDatabase) { d.Spec.Parameters = map[string]string{retryName: "2s"} })) == base {
		t.Errorf("a %s the user sets does not change the config hash", retryName)
	}

}

func TestImage(t *testing.T) {
	cases := map[string]struct {
		version, image, want string
	}{
		"major":    {"17", "", "postgres:17"},
		"minor":    {"16.4", "", "postgres:16.4"},
		"override": {"17", "registry.local/pg:17-custom", "registry.local/pg:17-custom"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Image(db(func(d *databasev1alpha1.MyDatabase) { d.Spec.Version, d.Spec.Image = tc.version, tc.image }))
			if got != tc.want {
				t.Errorf("Image = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestStorageSize(t *testing.T) {
	for name, tc := range map[string]struct {
		size resource.Quantity
		want string
	}{
		"as the spec says":           {resource.MustParse("20Gi"), "20Gi"},
		"unset (hand-built objects)": {resource.Quantity{}, "1Gi"},
	} {
		t.Run(name, func(t *testing.T) {
			d := db(func(d *databasev1alpha1.MyDatabase) { d.Spec.Storage.Size = tc.size })
			if got := StorageSize(d); got.String() != tc.want {
				t.Errorf("StorageSize = %s, want %s", got.String(), tc.want)
			}
			sts := typed[appsv1.StatefulSet](t, StatefulSet(d, Platform{}))
			if got := sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().String(); got != tc.want {
				t.Errorf("volumeClaimTemplate asks for %s, want %s", got, tc.want)
			}
		})
	}
}

// The claims the StatefulSet controller makes are named
// <template>-<statefulset>-<ordinal>.
func TestDataVolumeClaimName(t *testing.T) {
	if got := DataVolumeClaimName(db(), 2); got != "data-orders-2" {
		t.Errorf("DataVolumeClaimName = %q, want data-orders-2", got)
	}
}

func TestServices(t *testing.T) {
	d := db(func(d *databasev1alpha1.MyDatabase) { d.Spec.Service.Port = 6432 })
	cases := map[string]struct {
		svc          *corev1.Service
		wantSelector map[string]string
		wantPort     int32
		headless     bool
	}{
		"headless": {typed[corev1.Service](t, HeadlessService(d)), SelectorLabels(d), 5432, true},
		"read-write selects the primary": {typed[corev1.Service](t, ReadWriteService(d)),
			merge(SelectorLabels(d), map[string]string{databasev1alpha1.LabelRole: databasev1alpha1.RolePrimary}), 6432, false},
		"read-only selects replicas": {typed[corev1.Service](t, ReadOnlyService(d)),
			merge(SelectorLabels(d), map[string]string{databasev1alpha1.LabelRole: databasev1alpha1.RoleReplica}), 6432, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.wantSelector, tc.svc.Spec.Selector); diff != "" {
				t.Errorf("selector (-want +got):\n%s", diff)
			}
			p := tc.svc.Spec.Ports[0]
			if p.Port != tc.wantPort || p.TargetPort.StrVal != "postgres" {
				t.Errorf("port %d -> %v, want %d -> postgres", p.Port, p.TargetPort, tc.wantPort)
			}
			if got := tc.svc.Spec.ClusterIP == corev1.ClusterIPNone; got != tc.headless {
				t.Errorf("headless = %v, want %v", got, tc.headless)
			}
			assertChildMeta(t, d, &tc.svc.ObjectMeta)
		})
	}
}

func merge(a, b map[string]string) map[string]string {
	out := map[string]string{}
	maps.Copy(out, a)
	maps.Copy(out, b)
	return out
}

func assertChildMeta(t *testing.T, d *databasev1alpha1.MyDatabase, m *metav1.ObjectMeta) {
	t.Helper()
	if m.Namespace != d.Namespace {
		t.Errorf("namespace %q", m.Namespace)
	}
	if m.Labels[databasev1alpha1.LabelOwnerUID] != string(d.UID) || m.Labels[databasev1alpha1.LabelInstance] != d.Name || m.Labels[databasev1alpha1.LabelManagedBy] != databasev1alpha1.ManagedBy {
		t.Errorf("labels %v", m.Labels)
	}
	if len(m.OwnerReferences) != 1 || !ptr.Deref(m.OwnerReferences[0].Controller, false) || m.OwnerReferences[0].UID != d.UID {
		t.Errorf("owner references %v, want one controller reference to %s", m.OwnerReferences, d.UID)
	}
}

func TestPodDisruptionBudget(t *testing.T) {
	d := db(func(d *databasev1alpha1.MyDatabase) { d.Spec.Replicas = ptr.To[int32](3) })
	pdb := typed[policyv1.PodDisruptionBudget](t, PodDisruptionBudget(d))
	if pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("maxUnavailable = %v", pdb.Spec.MaxUnavailable)
	}
	if diff := cmp.Diff(SelectorLabels(d), pdb.Spec.Selector.MatchLabels); diff != "" {
		t.Errorf("selector (-want +got):\n%s", diff)
	}
	assertChildMeta(t, d, &pdb.ObjectMeta)
}

func TestStatefulSetFollowsSpec(t *testing.T) {
	class := "fast"
	cases := map[string]struct {
		mutate func(*databasev1alpha1.MyDatabase)
		check  func(*testing.T, *appsv1.StatefulSet)
	}{
		"replicas and ordered pods": {
			func(d *databasev1alpha1.MyDatabase) { d.Spec.Replicas = ptr.To[int32](3) },
			func(t *testing.T, s *appsv1.StatefulSet) {
				if *s.Spec.Replicas != 3 || s.Spec.PodManagementPolicy != appsv1.OrderedReadyPodManagement ||
					s.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType || s.Spec.ServiceName != "orders-headless" {
					t.Errorf("spec = %+v", s.Spec)
				}
			},
		},
		"storage size and class": {
			func(d *databasev1alpha1.MyDatabase) {
				d.Spec.Storage = databasev1alpha1.StorageSpec{Size: resource.MustParse("20Gi"), StorageClassName: &class}
			},
			func(t *testing.T, s *appsv1.StatefulSet) {
				vct := s.Spec.VolumeClaimTemplates[0]
				if vct.Name != DataVolumeName || vct.Spec.Resources.Requests.Storage().String() != "20Gi" || *vct.Spec.StorageClassName != "fast" {
					t.Errorf("volumeClaimTemplate = %+v", vct)
				}
				if vct.APIVersion != "" || vct.Kind != "" {
					t.Errorf("volumeClaimTemplate carries type meta %q/%q, which the server drops", vct.APIVersion, vct.Kind)
				}
			},
		},
		"Retain keeps volumes": {
			nil,
			func(t *testing.T, s *appsv1.StatefulSet) {
				p := s.Spec.PersistentVolumeClaimRetentionPolicy
				if p.WhenDeleted != appsv1.RetainPersistentVolumeClaimRetentionPolicyType || p.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
					t.Errorf("retention = %+v", p)
				}
			},
		},
		"Delete removes volumes": {
			func(d *databasev1alpha1.MyDatabase) { d.Spec.DeletionPolicy = databasev1alpha1.DeletionPolicyDelete },
			func(t *testing.T, s *appsv1.StatefulSet) {
				p := s.Spec.PersistentVolumeClaimRetentionPolicy
				if p.WhenDeleted != appsv1.DeletePersistentVolumeClaimRetentionPolicyType || p.WhenScaled != appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
					t.Errorf("retention = %+v", p)
				}
			},
		},
		"scheduling, resources, pod labels and annotations": {
			func(d *databasev1alpha1.MyDatabase) {
				d.Spec.NodeSelector = map[string]string{"disk": "ssd"}
				d.Spec.Tolerations = []corev1.Toleration{{Key: "db", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
				d.Spec.PriorityClassName = "critical"
				d.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
					PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 10,
						PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname"}}}}}
				d.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "zone", WhenUnsatisfiable: corev1.ScheduleAnyway}}
				d.Spec.Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
				d.Spec.PodLabels = map[string]string{"team": "payments"}
				d.Spec.PodAnnotations = map[string]string{"example.com/scrape": "true"}
			},
			func(t *testing.T, s *appsv1.StatefulSet) {
				p := s.Spec.Template.Spec
				if p.NodeSelector["disk"] != "ssd" || len(p.Tolerations) != 1 || p.Tolerations[0].Key != "db" ||
					p.PriorityClassName != "critical" || len(p.TopologySpreadConstraints) != 1 {
					t.Errorf("scheduling not passed through: %+v", p)
				}
				if a := p.Affinity.PodAntiAffinity; len(a.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
					a.PreferredDuringSchedulingIgnoredDuringExecution[0].Weight != 10 {
					t.Errorf("anti-affinity = %+v, want the spec's in place of the default", a)
				}
				if p.Containers[0].Resources.Limits.Memory().String() != "1Gi" {
					t.Errorf("resources = %+v", p.Containers[0].Resources)
				}
				if s.Spec.Template.Labels["team"] != "payments" || s.Spec.Template.Annotations["example.com/scrape"] != "true" {
					t.Errorf("template metadata = %+v", s.Spec.Template.ObjectMeta)
				}
			},
		},
		"servers spread over nodes, then zones, by default": {
			func(d *databasev1alpha1.MyDatabase) {},
			func(t *testing.T, s *appsv1.StatefulSet) {
				a := s.Spec.Template.Spec.Affinity
				if a == nil || a.PodAntiAffinity == nil || a.NodeAffinity != nil || a.PodAffinity != nil ||
					len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 0 {
					t.Fatalf("affinity = %+v, want only preferred anti-affinity", a)
				}
				terms := a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution
				want := []struct {
					weight int32
					key    string
				}{{100, corev1.LabelHostname}, {50, corev1.LabelTopologyZone}}
				if len(terms) != len(want) {
					t.Fatalf("terms = %+v", terms)
				}
				for i, w := range want {
					term := terms[i].PodAffinityTerm
					if terms[i].Weight != w.weight || term.TopologyKey != w.key ||
						!maps.Equal(term.LabelSelector.MatchLabels, s.Spec.Selector.MatchLabels) {
						t.Errorf("term %d = %+v, want weight %d on %s selecting %v", i, terms[i], w.weight, w.key, s.Spec.Selector.MatchLabels)
					}
				}
			},
		},
		"{} affinity replaces the default": {
			func(d *databasev1alpha1.MyDatabase) { d.Spec.Affinity = &corev1.Affinity{} },
			func(t *testing.T, s *appsv1.StatefulSet) {
				if a := s.Spec.Template.Spec.Affinity; a != nil && (a.PodAntiAffinity != nil || a.NodeAffinity != nil || a.PodAffinity != nil) {
					t.Errorf("affinity = %+v, want none", a)
				}
			},
		},
		"pod labels cannot change the selector": {
			func(d *databasev1alpha1.MyDatabase) {
				d.Spec.PodLabels = map[string]string{databasev1alpha1.LabelInstance: "other"}
			},
			func(t *testing.T, s *appsv1.StatefulSet) {
				if s.Spec.Template.Labels[databasev1alpha1.LabelInstance] != "orders" {
					t.Errorf("pod label %s = %q", databasev1alpha1.LabelInstance, s.Spec.Template.Labels[databasev1alpha1.LabelInstance])
				}
			},
		},
		"credentials from a user Secret": {
			func(d *databasev1alpha1.MyDatabase) {
				d.Spec.Credentials = &databasev1alpha1.CredentialsSpec{SecretName: "mine"}
			},
			func(t *testing.T, s *appsv1.StatefulSet) {
				env := map[string]corev1.EnvVar{}
				for _, e := range s.Spec.Template.Spec.Containers[0].Env {
					env[e.Name] = e
				}
				if ref := env["POSTGRES_PASSWORD"].ValueFrom.SecretKeyRef; ref.Name != "mine" || ref.Key != "password" {
					t.Errorf("POSTGRES_PASSWORD from %+v", ref)
				}
				if ref := env["REPLICATION_PASSWORD"].ValueFrom.SecretKeyRef; ref.Name != "orders-replication" {
					t.Errorf("REPLICATION_PASSWORD from %+v", ref)
				}
				if env["ADVERTISE_ADDRESS"].Value != "$(POD_NAME).orders-headless.shop.svc:5432" || env["BOOTSTRAP_POD"].Value != "orders-0" {
					t.Errorf("ADVERTISE_ADDRESS = %q, BOOTSTRAP_POD = %q", env["ADVERTISE_ADDRESS"].Value, env["BOOTSTRAP_POD"].Value)
				}
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := db()
			if tc.mutate != nil {
				tc.mutate(d)
			}
			s := typed[appsv1.StatefulSet](t, StatefulSet(d, Platform{}))
			assertChildMeta(t, d, &s.ObjectMeta)
			if diff := cmp.Diff(SelectorLabels(d), s.Spec.Selector.MatchLabels); diff != "" {
				t.Errorf("selector (-want +got):\n%s", diff)
			}
			tc.check(t, s)
		})
	}
}

// TestInstanceManager checks how the instance manager reaches the pod: an
// init container of the operator's image copies it into an emptyDir that
// the database container mounts read-only and runs as its first process;
// no preStop hook (its SIGTERM handling is the fast shutdown).
func TestInstanceManager(t *testing.T) {
	for image, want := range map[string]string{"": DefaultInstanceManagerImage, "registry.example.com/op:v2": "registry.example.com/op:v2"} {
		s := typed[appsv1.StatefulSet](t, StatefulSet(db(), Platform{InstanceManagerImage: image}))
		pod := s.Spec.Template.Spec
		if len(pod.InitContainers) != 1 {
			t.Fatalf("%d init containers, want 1", len(pod.InitContainers))
		}
		init, ctr := pod.InitContainers[0], pod.Containers[0]
		if init.Image != want {
			t.Errorf("init container image %q, want %q", init.Image, want)
		}
		if got := strings.Join(init.Command, " "); got != "/instance install "+InstanceManagerPath {
			t.Errorf("init container command %q", got)
		}
		if got := strings.Join(ctr.Command, " "); got != InstanceManagerPath+" run" {
			t.Errorf("container command %q", got)
		}
		mounts := func(c corev1.Container) map[string]corev1.VolumeMount {
			m := map[string]corev1.VolumeMount{}
			for _, vm := range c.VolumeMounts {
				m[vm.MountPath] = vm
			}
			return m
		}
		im, cm := mounts(init)[InstanceManagerDir], mounts(ctr)[InstanceManagerDir]
		if im.Name == "" || im.ReadOnly || cm.Name != im.Name || !cm.ReadOnly {
			t.Errorf("mounts of %s: init %+v, container %+v; want one volume, writable by the init container only", InstanceManagerDir, im, cm)
		}
		if ctr.Lifecycle != nil {
			t.Errorf("lifecycle %+v: the instance manager turns SIGTERM into a fast shutdown, no hook", ctr.Lifecycle)
		}
	}
}

// TestPodSecurityRestricted checks the pod against the Pod Security
// "restricted" profile, field by field.
func TestPodSecurityRestricted(t *testing.T) {
	s := typed[appsv1.StatefulSet](t, StatefulSet(db(), Platform{}))
	pod := s.Spec.Template.Spec
	psc := pod.SecurityContext
	if !ptr.Deref(psc.RunAsNonRoot, false) || ptr.Deref(psc.RunAsUser, 0) == 0 || ptr.Deref(psc.FSGroup, 0) == 0 {
		t.Errorf("pod security context %+v: must run as a non-root uid with an fsGroup", psc)
	}
	if psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("seccomp profile %+v, want RuntimeDefault", psc.SeccompProfile)
	}
	// The token is the instance manager's, of a ServiceAccount of its own
	// (InstanceRole says what it may do).
	if pod.ServiceAccountName != InstanceAccessName(db()) || !ptr.Deref(pod.AutomountServiceAccountToken, false) {
		t.Errorf("service account %q, token mounted %v: want the instance managers' own, mounted",
			pod.ServiceAccountName, pod.AutomountServiceAccountToken)
	}
	restrictedContainers(t, pod)
}

// restrictedContainers checks the volumes and containers of pod against
// the Pod Security "restricted" profile (and a read-only root).
func restrictedContainers(t *testing.T, pod corev1.PodSpec) {
	t.Helper()
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			t.Errorf("volume %s is a hostPath", v.Name)
		}
	}
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		sc := c.SecurityContext
		if sc == nil || ptr.Deref(sc.AllowPrivilegeEscalation, true) || ptr.Deref(sc.Privileged, true) ||
			!ptr.Deref(sc.ReadOnlyRootFilesystem, false) {
			t.Errorf("container %s security context %+v", c.Name, sc)
			continue
		}
		if sc.Capabilities == nil || !cmp.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
			t.Errorf("container %s capabilities %+v, want drop ALL and add none", c.Name, sc.Capabilities)
		}
		if len(c.Ports) > 0 && c.Ports[0].HostPort != 0 {
			t.Errorf("container %s uses a host port", c.Name)
		}
	}
}

func TestSecrets(t *testing.T) {
	cases := map[string]struct {
		policy     databasev1alpha1.DeletionPolicy
		wantOwners int
	}{
		"Retain: no owner, the garbage collector can never take them": {databasev1alpha1.DeletionPolicyRetain, 0},
		"Delete: owned by the MyDatabase":                             {databasev1alpha1.DeletionPolicyDelete, 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := db(func(d *databasev1alpha1.MyDatabase) { d.Spec.DeletionPolicy = tc.policy })
			for _, s := range []*corev1.Secret{CredentialsSecret(d, "pw"), ReplicationCertSecret(d, pki.KeyPair{}, nil)} {
				if len(s.OwnerReferences) != tc.wantOwners {
					t.Errorf("%s owner references %v, want %d", s.Name, s.OwnerReferences, tc.wantOwners)
				}
				if s.Labels[databasev1alpha1.LabelOwnerUID] != "uid-1" {
					t.Errorf("%s labels %v", s.Name, s.Labels)
				}
			}
		})
	}
	s := CredentialsSecret(db(), "p@ss:word/")
	want := map[string]string{
		"username": "app", "password": "p@ss:word/", "database": "app",
		"host": "orders-rw.shop.svc", "port": "5432",
		"uri": "postgresql://app:p%40ss%3Aword%2F@orders-rw.shop.svc:5432/app?sslmode=verify-full",
	}
	got := map[string]string{}
	for k, v := range s.Data {
		got[k] = string(v)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("credentials Secret data (-want +got):\n%s", diff)
	}
}

func TestRandomPassword(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		p, err := RandomPassword()
		if err != nil {
			t.Fatal(err)
		}
		if len(p) != PasswordLength || strings.Trim(p, passwordAlphabet) != "" {
			t.Fatalf("password %q: want %d characters from the alphabet", p, PasswordLength)
		}
		if seen[p] {
			t.Fatalf("password repeated: %q", p)
		}
		seen[p] = true
	}
}

func TestPrimaryPod(t *testing.T) {
	db := &databasev1alpha1.MyDatabase{ObjectMeta: metav1.ObjectMeta{Name: "orders"}}
	if got := PrimaryPod(db); got != "orders-0" {
		t.Errorf("new MyDatabase: primary %s, want the bootstrap pod orders-0", got)
	}
	// Once the primary moves (status.currentPrimary follows the Lease),
	// nothing of the pod template changes: a failover must not roll the
	// pods.
	before := StatefulSet(db, Platform{})
	db.Status.CurrentPrimary = "orders-1"
	if got := PrimaryPod(db); got != "orders-1" {
		t.Errorf("with currentPrimary orders-1: primary %s", got)
	}
	if diff := cmp.Diff(before, StatefulSet(db, Platform{})); diff != "" {
		t.Errorf("the StatefulSet changes with the primary (-before +after):\n%s", diff)
	}
}

// TestArchiveTimeoutWithBackup: with spec.backup an idle primary still
// completes a WAL file every 5 minutes (a backup taken on a replica waits
// for it); spec.parameters may say otherwise; without spec.backup it is
// not set.
func TestArchiveTimeoutWithBackup(t *testing.T) {
	withBackup := func(d *databasev1alpha1.MyDatabase) {
		d.Spec.Backup = &databasev1alpha1.BackupSpec{ObjectStore: databasev1alpha1.ObjectStore{
			Endpoint: "https://s3.example.com", Bucket: "backups", CredentialsSecret: "s3"}}
	}
	if conf := PostgresConf(db(withBackup)); !strings.Contains(conf, "\narchive_timeout = '5min'\n") {
		t.Errorf("with spec.backup, no archive_timeout of 5min:\n%s", conf)
	}
	if conf := PostgresConf(db(withBackup, func(d *databasev1alpha1.MyDatabase) {
		d.Spec.Parameters = map[string]string{"archive_timeout": "60s"}
	})); !strings.Contains(conf, "\narchive_timeout = '60s'\n") {
		t.Errorf("spec.parameters' archive_timeout not kept:\n%s", conf)
	}
	if conf := PostgresConf(db()); strings.Contains(conf, "archive_timeout") {
		t.Errorf("archive_timeout without spec.backup:\n%s", conf)
	}
}

// TestConfigHashKeptAcrossVersions: the lines of pg_hba.conf a reload
// applies (the poolers') do not change the hash on the pod template, so
// the operator version that brings them restarts no pod. The values are
// what the operator before them computed for the same MyDatabases.
func TestConfigHashKeptAcrossVersions(t *testing.T) {
	db := SampleDatabase("orders")
	if !strings.Contains(HBAConf(db), poolerHBALines) {
		t.Fatal("pg_hba.conf does not hold the poolers' lines as ConfigHash leaves them out")
	}
	if got := ConfigHash(db); got != "5f77cb00fd018255" {
		t.Errorf("ConfigHash = %s, was 5f77cb00fd018255: upgrading the operator would restart every server", got)
	}
	db.Spec.TLS.Clients = databasev1alpha1.TLSClientsRequired
	if got := ConfigHash(db); got != "d16b5c92eea48694" {
		t.Errorf("ConfigHash (TLS required) = %s, was d16b5c92eea48694", got)
	}
}

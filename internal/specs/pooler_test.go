package specs

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/pki"
)

var pki0 pki.KeyPair

func pooler(mutate ...func(*databasev1alpha1.MyDatabasePooler)) *databasev1alpha1.MyDatabasePooler {
	p := &databasev1alpha1.MyDatabasePooler{ObjectMeta: metav1.ObjectMeta{Name: "orders-pool", Namespace: "shop", UID: "u-1"},
		Spec: databasev1alpha1.MyDatabasePoolerSpec{Database: "orders"}}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func TestPoolerConfig(t *testing.T) {
	d := db()
	c := PoolerConfig(pooler(), d)
	if c.Host != "orders-rw.shop.svc" || c.Port != 5432 || c.ClientTLS != "prefer" || len(c.Settings) != 1 || c.Settings["pool_mode"] != "session" {
		t.Errorf("defaults: %+v", c)
	}
	ro := PoolerConfig(pooler(func(p *databasev1alpha1.MyDatabasePooler) {
		p.Spec.Type = databasev1alpha1.PoolerReadOnly
		p.Spec.PoolMode = databasev1alpha1.PoolModeTransaction
		p.Spec.PgBouncer = databasev1alpha1.PgBouncerSettings{DefaultPoolSize: ptr.To(int32(30)), MaxClientConnections: ptr.To(int32(5000)),
			QueryWaitTimeoutSeconds: ptr.To(int32(0))}
	}), db(func(d *databasev1alpha1.MyDatabase) {
		d.Spec.TLS.Clients = databasev1alpha1.TLSClientsRequired
		d.Spec.Service.Port = 6000
	}))
	want := map[string]string{"pool_mode": "transaction", "default_pool_size": "30", "max_client_conn": "5000", "query_wait_timeout": "0"}
	if ro.Host != "orders-ro.shop.svc" || ro.Port != 6000 || ro.ClientTLS != "require" || len(ro.Settings) != len(want) {
		t.Errorf("ro: %+v", ro)
	}
	for k, v := range want {
		if ro.Settings[k] != v {
			t.Errorf("%s = %q, want %q", k, ro.Settings[k], v)
		}
	}
	// Only a read-write pooler in transaction mode pauses through a
	// switchover: a read-only one's servers do not change, and in session
	// mode PAUSE waits for every client to leave.
	for _, tc := range []struct {
		typ  databasev1alpha1.PoolerType
		mode databasev1alpha1.PoolMode
		want bool
	}{{"", "", false}, {"", databasev1alpha1.PoolModeTransaction, true}, {databasev1alpha1.PoolerReadWrite, databasev1alpha1.PoolModeTransaction, true},
		{databasev1alpha1.PoolerReadWrite, databasev1alpha1.PoolModeSession, false}, {databasev1alpha1.PoolerReadOnly, databasev1alpha1.PoolModeTransaction, false}} {
		got := PoolerConfig(pooler(func(p *databasev1alpha1.MyDatabasePooler) { p.Spec.Type, p.Spec.PoolMode = tc.typ, tc.mode }), d).PauseOnSwitchover
		if got != tc.want {
			t.Errorf("type %q, mode %q: pauseOnSwitchover %v, want %v", tc.typ, tc.mode, got, tc.want)
		}
	}
}

// TestPoolerDeployment: the pods run the pooler manager from the
// operator's image, restricted; a setting changes the ConfigMap, never the
// pod template (no restart).
func TestPoolerDeployment(t *testing.T) {
	pl := Platform{InstanceManagerImage: "operator:1", PoolerImageDefault: "pgbouncer:1"}
	dep := typed[appsv1.Deployment](t, PoolerDeployment(pooler(), pl))
	pod := dep.Spec.Template.Spec
	if *dep.Spec.Replicas != 2 || pod.InitContainers[0].Image != "operator:1" || pod.Containers[0].Image != "pgbouncer:1" ||
		pod.Containers[0].Command[0] != InstanceManagerPath || pod.Containers[0].Command[1] != "pooler" {
		t.Errorf("Deployment %+v", dep.Spec)
	}
	if own := typed[appsv1.Deployment](t, PoolerDeployment(pooler(func(p *databasev1alpha1.MyDatabasePooler) { p.Spec.Image = "mine:2" }), pl)); own.Spec.Template.Spec.Containers[0].Image != "mine:2" {
		t.Error("spec.image is not used")
	}
	if ptr.Deref(pod.AutomountServiceAccountToken, true) {
		t.Error("the pooler pods need no API token")
	}
	psc := pod.SecurityContext
	if !ptr.Deref(psc.RunAsNonRoot, false) || ptr.Deref(psc.RunAsUser, 0) == 0 || psc.SeccompProfile == nil ||
		psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v", psc)
	}
	restrictedContainers(t, pod)

	settings := pooler(func(p *databasev1alpha1.MyDatabasePooler) {
		p.Spec.PoolMode = databasev1alpha1.PoolModeTransaction
		p.Spec.PgBouncer.DefaultPoolSize = ptr.To(int32(3))
	})
	if PoolerConfigMap(settings, db()).Data[contract.PoolerConfigKey] == PoolerConfigMap(pooler(), db()).Data[contract.PoolerConfigKey] {
		t.Error("the ConfigMap does not follow the settings")
	}
	if templateDigest(PoolerDeployment(settings, pl).Spec.Template) != templateDigest(PoolerDeployment(pooler(), pl).Spec.Template) {
		t.Error("a setting changes the pod template: every PgBouncer pod would restart")
	}
}

func TestPoolerChildrenMeta(t *testing.T) {
	p := pooler()
	for kind, labels := range map[string]map[string]string{
		"Deployment": PoolerDeployment(p, Platform{}).Labels, "Service": PoolerService(p).Labels,
		"ConfigMap": PoolerConfigMap(p, db()).Labels, "PodDisruptionBudget": PoolerDisruptionBudget(p).Labels,
		"Secret": PoolerSecret(p, pki0, pki0, nil, nil).Labels,
	} {
		if labels[databasev1alpha1.LabelManagedBy] != databasev1alpha1.ManagedBy || labels[databasev1alpha1.LabelOwnerUID] != "u-1" ||
			labels[databasev1alpha1.LabelComponent] != ComponentPooler {
			t.Errorf("%s labels %v: the operator's cache holds only what carries managed-by", kind, labels)
		}
	}
	svc := typed[corev1.Service](t, PoolerService(p))
	if svc.Name != "orders-pool" || svc.Spec.Ports[0].Port != contract.PoolerPort || svc.Spec.Selector[databasev1alpha1.LabelInstance] != "orders-pool" {
		t.Errorf("Service %+v", svc)
	}
	if got := PoolerDNSNames(p); got[2] != "orders-pool.shop.svc" {
		t.Errorf("names %v", got)
	}
}

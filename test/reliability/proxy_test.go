package reliability

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/controller/mydatabase"
	"example.com/myoperator/internal/testenv"
)

// Scenario 6, at the network level: the operator (cached, every watch, as
// in production) reaches the API server through a proxy that goes slow,
// then cuts every connection and refuses new ones while the spec changes
// and the MyDatabase is deleted. Nothing the operator must keep is
// recreated or lost: the Secrets keep their UIDs and passwords, the data
// volume its UID; once the server is reachable again the last spec is
// applied and then the deletion policy (Retain) runs.
func TestUnreachableAndSlowServer(t *testing.T) {
	ctx := context.Background()
	host, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := testenv.StartProxy(testenv.To(host.Host))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	cfg := rest.CopyConfig(env.Config)
	cfg.Host = "https://" + proxy.Addr()
	ns := namespace(t)
	startManager(t, cfg, mydatabase.CacheOptions(cfg), managerSetup{})

	db := newDB(ns)
	key := client.ObjectKeyFromObject(db)
	converged := func(replicas int32) func() error {
		return func() error {
			sts := &appsv1.StatefulSet{}
			if err := env.Client.Get(ctx, key, sts); err != nil {
				return err
			}
			if err := env.Client.Get(ctx, key, db); err != nil {
				return err
			}
			if *sts.Spec.Replicas != replicas {
				return fmt.Errorf("replicas %d, want %d", *sts.Spec.Replicas, replicas)
			}
			return actedOn(db)
		}
	}
	waitUntil(t, "the first convergence", converged(1))
	pvc := dataVolume(t, db)
	kept := map[string]types.UID{"PVC " + pvc.Name: pvc.UID}
	passwords := map[string]string{}
	for _, name := range []string{"pg-credentials", "pg-ca"} {
		s := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
			t.Fatal(err)
		}
		kept["Secret "+name], passwords[name] = s.UID, string(s.Data["password"])
	}
	unchanged := func(t *testing.T) {
		t.Helper()
		for what, uid := range kept {
			var obj client.Object = &corev1.Secret{}
			name := what[len("Secret "):]
			if what[:3] == "PVC" {
				obj, name = &corev1.PersistentVolumeClaim{}, pvc.Name
			}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
				t.Errorf("%s: %v", what, err)
			} else if obj.GetUID() != uid || !obj.GetDeletionTimestamp().IsZero() {
				t.Errorf("%s was replaced or is being deleted (uid %s, was %s)", what, obj.GetUID(), uid)
			}
			if s, ok := obj.(*corev1.Secret); ok && string(s.Data["password"]) != passwords[name] {
				t.Errorf("%s has a new password", what)
			}
		}
	}

	proxy.Slow(300 * time.Millisecond)
	update := func(mutate func(*databasev1alpha1.MyDatabase)) {
		t.Helper()
		if err := env.Client.Get(ctx, key, db); err != nil {
			t.Fatal(err)
		}
		mutate(db)
		if err := env.Client.Update(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	update(func(db *databasev1alpha1.MyDatabase) { db.Spec.Replicas = ptr.To[int32](2) })
	testenv.Eventually(t, 60*time.Second, "convergence through a slow server", converged(2))

	// The server becomes unreachable while the operator is at work on the
	// next spec: its requests in flight fail half-way.
	written := resourceVersions(t, ns)
	update(func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Replicas = ptr.To[int32](3)
		db.Spec.Parameters = map[string]string{"work_mem": "8MB"}
	})
	written["MyDatabase "+db.Name] = db.ResourceVersion
	testenv.Eventually(t, 60*time.Second, "the operator's first write for the new spec", func() error {
		now := resourceVersions(t, ns)
		for obj, rv := range now {
			if written[obj] != rv {
				return nil
			}
		}
		return fmt.Errorf("none of %d objects changed", len(now))
	})
	if proxy.Cut() == 0 {
		t.Fatal("the operator had no connection open to cut")
	}
	time.Sleep(5 * time.Second) // the outage lasts; the operator retries meanwhile
	unchanged(t)
	proxy.Slow(0)
	proxy.Restore()
	testenv.Eventually(t, 90*time.Second, "convergence once the server is back", converged(3))
	unchanged(t)

	proxy.Cut()
	if err := env.Client.Delete(ctx, db); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second) // the outage lasts; the deletion must wait for the operator
	if gone(key) {
		t.Fatal("the MyDatabase went away while the operator could not run its deletion policy")
	}
	proxy.Restore()
	testenv.Eventually(t, 90*time.Second, "the deletion once the server is back", func() error {
		if !gone(key) {
			return fmt.Errorf("MyDatabase still there")
		}
		return nil
	})
	unchanged(t) // Retain: the data volume and the Secrets outlive it
}

// resourceVersions is the resourceVersion of every MyDatabase, StatefulSet,
// ConfigMap, Service, Secret and PodDisruptionBudget in ns, by kind and name.
// Once the test has made its own change, only the operator writes them: a new
// resourceVersion is the operator at work.
func resourceVersions(t *testing.T, ns string) map[string]string {
	t.Helper()
	out := map[string]string{}
	lists := map[string]client.ObjectList{
		"MyDatabase": &databasev1alpha1.MyDatabaseList{}, "StatefulSet": &appsv1.StatefulSetList{},
		"ConfigMap": &corev1.ConfigMapList{}, "Service": &corev1.ServiceList{}, "Secret": &corev1.SecretList{},
		"PodDisruptionBudget": &policyv1.PodDisruptionBudgetList{},
	}
	for kind, list := range lists {
		if err := env.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range items {
			obj := item.(client.Object)
			out[kind+" "+obj.GetName()] = obj.GetResourceVersion()
		}
	}
	return out
}

package v1alpha1_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/pki"
	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
)

// These tests run the generated CRD on a real kube-apiserver: every marker
// and CEL rule of api/v1alpha1 is exercised as a user meets it at admission.

var env *testenv.Env

func TestMain(m *testing.M) {
	var err error
	// Shared: FuzzAdmission's workers, each a process of this binary, use
	// the coordinator's API server.
	env, err = testenv.StartShared()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping envtest:", err)
	}
	os.Exit(code)
}

var gvk = databasev1alpha1.GroupVersion.WithKind("MyDatabase")

// manifest returns a minimal valid MyDatabase with the given spec fields set;
// a nil value removes the field.
func manifest(name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{}}}
	u.SetGroupVersionKind(gvk)
	u.SetName(name)
	u.SetNamespace("default")
	for path, v := range spec {
		fields := strings.Split(path, ".")
		if v == nil {
			unstructured.RemoveNestedField(u.Object, append([]string{"spec"}, fields...)...)
			continue
		}
		if err := unstructured.SetNestedField(u.Object, v, append([]string{"spec"}, fields...)...); err != nil {
			panic(err)
		}
	}
	return u
}

func TestMinimalIsAcceptedAndDefaulted(t *testing.T) {
	ctx := context.Background()
	if err := env.Client.Create(ctx, manifest("minimal", nil)); err != nil {
		t.Fatalf("create minimal MyDatabase: %v", err)
	}
	var got databasev1alpha1.MyDatabase
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "minimal"}, &got); err != nil {
		t.Fatal(err)
	}
	one := int32(1)
	want := databasev1alpha1.MyDatabaseSpec{
		Engine:                databasev1alpha1.EnginePostgres,
		Version:               "17",
		Replicas:              &one,
		Storage:               databasev1alpha1.StorageSpec{Size: got.Spec.Storage.Size},
		DatabaseName:          "app",
		User:                  "app",
		Service:               databasev1alpha1.ServiceSpec{Type: "ClusterIP", Port: 5432},
		DeletionPolicy:        databasev1alpha1.DeletionPolicyRetain,
		InstanceManagerUpdate: databasev1alpha1.InstanceManagerUpdateInPlace,
		Failover:              databasev1alpha1.FailoverSpec{LeaseDurationSeconds: 4},
		TLS:                   databasev1alpha1.TLSSpec{Clients: databasev1alpha1.TLSClientsAllowed},
	}
	if diff := cmp.Diff(want, got.Spec); diff != "" {
		t.Errorf("defaulted spec (-want +got):\n%s", diff)
	}
	if s := got.Spec.Storage.Size.String(); s != "1Gi" {
		t.Errorf("storage.size defaulted to %q, want 1Gi", s)
	}
}

func TestInvalidCreatesAreRejected(t *testing.T) {
	cases := map[string]struct {
		spec map[string]any
		want string
	}{
		"unknown engine": {map[string]any{"engine": "mysql"}, `Unsupported value: "mysql"`},
		"replica without a source path": {map[string]any{"replica": map[string]any{"enabled": true, "source": map[string]any{"objectStore": map[string]any{
			"endpoint": "https://s3.example.com", "bucket": "backups", "credentialsSecret": "s3"}}}}, "spec.replica.source.objectStore.path is required"},
		"replica encryption without an object store": {map[string]any{"replica": map[string]any{"enabled": true, "source": map[string]any{
			"streaming": map[string]any{"host": "shop-rw.shop", "secretName": "shop-replication"}, "encryption": map[string]any{"secret": "backup-key"}}}},
			"spec.replica.source.encryption decrypts the source's archive: it needs spec.replica.source.objectStore"},
		"replica and bootstrap": {map[string]any{"replica": replicaOf(true), "bootstrap.recovery": map[string]any{"objectStore": map[string]any{
			"endpoint": "https://s3.example.com", "bucket": "backups", "path": "shop/orders", "credentialsSecret": "s3"}}},
			"spec.replica and spec.bootstrap exclude each other"},
		"replicas 0":                            {map[string]any{"replicas": int64(0)}, "spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1"},
		"replicas 10":                           {map[string]any{"replicas": int64(10)}, "spec.replicas in body should be less than or equal to 9"},
		"unsupported major":                     {map[string]any{"version": "14"}, "version must be a supported PostgreSQL major (15, 16, 17 or 18)"},
		"version not a number":                  {map[string]any{"version": "latest"}, "version must be a supported PostgreSQL major"},
		"empty image":                           {map[string]any{"image": ""}, "spec.image in body should be at least 1 chars long"},
		"bad quantity":                          {map[string]any{"storage.size": "lots"}, "spec.storage.size in body should match"},
		"zero size":                             {map[string]any{"storage.size": "0"}, "spec.storage.size: Invalid value: \"0\": size must be greater than zero"},
		"autoGrow below the size":               {map[string]any{"storage.size": "10Gi", "storage.autoGrow": map[string]any{"maxSize": "5Gi"}}, "spec.storage: Invalid value: autoGrow.maxSize must be at least size"},
		"zero WAL size":                         {map[string]any{"walStorage.size": "0"}, "spec.walStorage.size: Invalid value: \"0\": size must be greater than zero"},
		"WAL autoGrow below the size":           {map[string]any{"walStorage.size": "10Gi", "walStorage.autoGrow": map[string]any{"maxSize": "5Gi"}}, "spec.walStorage: Invalid value: autoGrow.maxSize must be at least size"},
		"autoGrow without maxSize":              {map[string]any{"storage.autoGrow": map[string]any{}}, "spec.storage.autoGrow.maxSize: Required value"},
		"autoGrow by 5%":                        {map[string]any{"storage.autoGrow": map[string]any{"maxSize": "5Gi", "stepPercent": int64(5)}}, "spec.storage.autoGrow.stepPercent in body should be greater than or equal to 10"},
		"autoGrow at 99% used":                  {map[string]any{"storage.autoGrow": map[string]any{"maxSize": "5Gi", "usedPercent": int64(99)}}, "spec.storage.autoGrow.usedPercent in body should be less than or equal to 95"},
		"unknown deletion policy":               {map[string]any{"deletionPolicy": "Forget"}, `spec.deletionPolicy: Unsupported value: "Forget"`},
		"ExternalName service":                  {map[string]any{"service.type": "ExternalName"}, `spec.service.type: Unsupported value: "ExternalName"`},
		"port out of range":                     {map[string]any{"service.port": int64(70000)}, "spec.service.port in body should be less than or equal to 65535"},
		"reserved database":                     {map[string]any{"databaseName": "postgres"}, "databaseName must not be postgres, template0 or template1"},
		"database with upper case":              {map[string]any{"databaseName": "My-DB"}, "databaseName must start with a lower-case letter"},
		"reserved user":                         {map[string]any{"user": "pg_monitor"}, "user must not be postgres, replicator, public, none or start with pg_"},
		"user public":                           {map[string]any{"user": "public"}, "user must not be postgres, replicator, public, none or start with pg_"},
		"user none":                             {map[string]any{"user": "none"}, "user must not be postgres, replicator, public, none or start with pg_"},
		"invalid secret name":                   {map[string]any{"credentials.secretName": "Bad_Name"}, "credentials.secretName must be a valid Secret name"},
		"invalid custom queries ConfigMap name": {map[string]any{"monitoring.customQueriesConfigMap": "Queries_1"}, "monitoring.customQueriesConfigMap must be a valid ConfigMap name"},
		"empty secret name":                     {map[string]any{"credentials.secretName": ""}, "spec.credentials.secretName in body should be at least 1 chars long"},
		"managed parameter":                     {map[string]any{"parameters": map[string]any{"port": "5433"}}, "parameters may not set listen_addresses, port"},
		"malformed parameter name":              {map[string]any{"parameters": map[string]any{"Max Conn": "1"}}, "parameter names are lower-case PostgreSQL setting names"},
		"operator-owned pod label":              {map[string]any{"podLabels": map[string]any{"app.kubernetes.io/name": "x"}}, "podLabels must not use the app.kubernetes.io/ or database.example.com/ prefixes"},
		"negative cpu request":                  {map[string]any{"resources": map[string]any{"requests": map[string]any{"cpu": "a lot"}}}, "spec.resources.requests.cpu"},
		"priorityClassName too long":            {map[string]any{"priorityClassName": strings.Repeat("p", 254)}, "spec.priorityClassName: Too long"},
		"fence disabled by hand":                {map[string]any{"parameters": map[string]any{"synchronous_standby_names": "*"}}, "synchronous_standby_names: the operator manages them"},
		"lease of one second":                   {map[string]any{"failover.leaseDurationSeconds": int64(1)}, "spec.failover.leaseDurationSeconds in body should be greater than or equal to 2"},
		"switchover to another's pod": {map[string]any{"switchover": map[string]any{"to": "orders-1", "requestedAt": "2026-11-30T12:00:00Z"}},
			"spec.switchover.to must name one of this MyDatabase's pods"},
		"a quorum of every replica and more": {map[string]any{"replicas": int64(2), "replication.synchronous.number": int64(2)},
			"spec.replication.synchronous.number must be less than spec.replicas"},
		"a quorum on a single server": {map[string]any{"replication.synchronous.number": int64(1)},
			"spec.replication.synchronous.number must be less than spec.replicas"},
		"TLS switched off":               {map[string]any{"parameters": map[string]any{"ssl": "off"}}, "parameters may not set ssl, ssl_cert_file"},
		"TLS 1.0 allowed":                {map[string]any{"parameters": map[string]any{"ssl_min_protocol_version": "TLSv1"}}, "ssl_min_protocol_version may be TLSv1.2"},
		"TLS clients sometimes":          {map[string]any{"tls.clients": "Sometimes"}, `spec.tls.clients: Unsupported value: "Sometimes"`},
		"switchover without requestedAt": {map[string]any{"switchover": map[string]any{"to": "invalid-1"}}, "spec.switchover.requestedAt: Required value"},
		"object store endpoint with a path": {map[string]any{"backup.objectStore": map[string]any{"endpoint": "https://s3.example.com/backups",
			"bucket": "backups", "credentialsSecret": "s3"}}, "objectStore.endpoint must be http(s)://host[:port]"},
		"object store bucket in capitals": {map[string]any{"backup.objectStore": map[string]any{"endpoint": "https://s3.example.com",
			"bucket": "Backups", "credentialsSecret": "s3"}}, "objectStore.bucket must be a bucket name"},
		"object store path climbing out": {map[string]any{"backup.objectStore": map[string]any{"endpoint": "https://s3.example.com",
			"bucket": "backups", "path": "a/../b", "credentialsSecret": "s3"}}, "objectStore.path is relative to the bucket"},
		"recovery without a path": {map[string]any{"bootstrap.recovery.objectStore": map[string]any{"endpoint": "https://s3.example.com",
			"bucket": "backups", "credentialsSecret": "s3"}}, "bootstrap.recovery.objectStore.path is required"},
		"recovery to two targets": {map[string]any{"bootstrap.recovery": map[string]any{"objectStore": map[string]any{"endpoint": "https://s3.example.com",
			"bucket": "backups", "path": "shop/orders", "credentialsSecret": "s3"}, "target": map[string]any{"name": "before", "lsn": "0/3000060"}}},
			"bootstrap.recovery.target takes exactly one of time, lsn, name or immediate"},
		"recovery to a malformed LSN": {map[string]any{"bootstrap.recovery": map[string]any{"objectStore": map[string]any{"endpoint": "https://s3.example.com",
			"bucket": "backups", "path": "shop/orders", "credentialsSecret": "s3"}, "target": map[string]any{"lsn": "3000060"}}},
			"bootstrap.recovery.target.lsn is a WAL position"},
		"a cron of four fields": {map[string]any{"backup": map[string]any{"objectStore": map[string]any{"endpoint": "https://s3.example.com",
			"bucket": "backups", "credentialsSecret": "s3"}, "schedule": map[string]any{"cron": "0 3 * *"}}}, "schedule.cron is five fields"},
		"a verification cron of four fields": {map[string]any{"backup": map[string]any{"objectStore": map[string]any{"endpoint": "https://s3.example.com",
			"bucket": "backups", "credentialsSecret": "s3"}, "verify": map[string]any{"cron": "0 5 * *"}}}, "verify.cron is five fields"},
		"a verification without a cron": {map[string]any{"backup": map[string]any{"objectStore": map[string]any{"endpoint": "https://s3.example.com",
			"bucket": "backups", "credentialsSecret": "s3"}, "verify": map[string]any{}}}, "spec.backup.verify.cron: Required value"},
		"a chain of one backup": {map[string]any{"backup": map[string]any{"objectStore": map[string]any{"endpoint": "https://s3.example.com",
			"bucket": "backups", "credentialsSecret": "s3"}, "incremental": map[string]any{"fullEvery": int64(1)}}}, "spec.backup.incremental.fullEvery: Invalid value: 1"},
		"retention without a rule": {map[string]any{"backup": map[string]any{"objectStore": map[string]any{"endpoint": "https://s3.example.com",
			"bucket": "backups", "credentialsSecret": "s3"}, "retention": map[string]any{}}}, "retention takes recoveryWindow, keep, or both"},
		"a recovery window in weeks": {map[string]any{"backup": map[string]any{"objectStore": map[string]any{"endpoint": "https://s3.example.com",
			"bucket": "backups", "credentialsSecret": "s3"}, "retention": map[string]any{"recoveryWindow": "2w"}}}, "retention.recoveryWindow is a number of days or hours"},
		"an encryption Secret that is no name": {map[string]any{"backup": map[string]any{"objectStore": map[string]any{"endpoint": "https://s3.example.com",
			"bucket": "backups", "credentialsSecret": "s3"}, "encryption": map[string]any{"secret": "Backup_Key"}}}, "encryption.secret must be the name of a Secret"},
		"a recovery encryption without its Secret": {map[string]any{"bootstrap.recovery": map[string]any{"objectStore": map[string]any{"endpoint": "https://s3.example.com",
			"bucket": "backups", "path": "shop/orders", "credentialsSecret": "s3"}, "encryption": map[string]any{}}},
			"spec.bootstrap.recovery.encryption.secret: Required value"},
		"keep nothing": {map[string]any{"backup": map[string]any{"objectStore": map[string]any{"endpoint": "https://s3.example.com",
			"bucket": "backups", "credentialsSecret": "s3"}, "retention": map[string]any{"keep": int64(0)}}}, "should be greater than or equal to 1"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			obj := manifest("invalid", tc.spec)
			err := env.Client.Create(context.Background(), obj, client.DryRunAll)
			if err == nil {
				t.Fatalf("create was accepted, want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q\ndoes not contain %q", err, tc.want)
			}
		})
	}
	t.Run("name with a dot", func(t *testing.T) {
		err := env.Client.Create(context.Background(), manifest("orders.eu", nil), client.DryRunAll)
		if want := "metadata.name may not contain dots"; err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("create of orders.eu: %v, want an error containing %q", err, want)
		}
	})
}

// replicaOf is a spec.replica of the source prod/shop, enabled or not,
// with a promotion token if one is given.
func replicaOf(enabled bool, token ...string) map[string]any {
	r := map[string]any{"enabled": enabled, "source": map[string]any{"objectStore": map[string]any{
		"endpoint": "https://s3.example.com", "bucket": "backups", "path": "prod/shop", "credentialsSecret": "s3"}}}
	if len(token) > 0 {
		r["promotionToken"] = token[0]
	}
	return r
}

func TestInvalidUpdatesAreRejected(t *testing.T) {
	base := map[string]any{
		"version":                  "17",
		"storage.size":             "2Gi",
		"storage.storageClassName": "fast",
		"credentials.secretName":   "mine",
	}
	cases := map[string]struct {
		from, to map[string]any
		want     string // empty: the update must be accepted
	}{
		"major version change":       {nil, map[string]any{"version": "18"}, "a change of major is possible only once the MyDatabase has been Ready"},
		"minor version change":       {nil, map[string]any{"version": "17.6"}, ""},
		"storage shrink":             {nil, map[string]any{"storage.size": "1Gi"}, "spec.storage.size: Invalid value: \"1Gi\": size may grow but never shrink"},
		"storage shrink, other unit": {nil, map[string]any{"storage.size": "2000Mi"}, "size may grow but never shrink"},
		"storage grow":               {nil, map[string]any{"storage.size": "3Gi"}, ""},
		"walStorage added":           {nil, map[string]any{"walStorage.size": "1Gi"}, ""},
		"walStorage removed":         {map[string]any{"walStorage.size": "1Gi"}, map[string]any{"walStorage": nil}, "walStorage cannot be removed"},
		"walStorage shrink":          {map[string]any{"walStorage.size": "2Gi"}, map[string]any{"walStorage.size": "1Gi"}, "spec.walStorage.size: Invalid value: \"1Gi\": size may grow but never shrink"},
		"walStorage grow":            {map[string]any{"walStorage.size": "2Gi"}, map[string]any{"walStorage.size": "3Gi"}, ""},
		"storage class changed":      {nil, map[string]any{"storage.storageClassName": "slow"}, "storageClassName is immutable"},
		"storage class removed":      {nil, map[string]any{"storage.storageClassName": nil}, "storageClassName is immutable"},
		"storage class added":        {map[string]any{"storage.storageClassName": nil}, map[string]any{"storage.storageClassName": "fast"}, "storageClassName is immutable"},
		"database renamed":           {nil, map[string]any{"databaseName": "other"}, "databaseName is immutable"},
		"user renamed":               {nil, map[string]any{"user": "other"}, "user is immutable"},
		"credentials secret changed": {nil, map[string]any{"credentials.secretName": "theirs"}, "credentials is immutable"},
		"credentials removed":        {nil, map[string]any{"credentials": nil}, "credentials is immutable"},
		"credentials added":          {map[string]any{"credentials": nil}, map[string]any{"credentials.secretName": "mine"}, "credentials is immutable"},
		"bootstrap added": {nil, map[string]any{"bootstrap.recovery": map[string]any{"objectStore": map[string]any{"endpoint": "https://s3.example.com",
			"bucket": "backups", "path": "shop/orders", "credentialsSecret": "s3"}}}, "bootstrap is immutable"},
		"replica added, following":     {nil, map[string]any{"replica": replicaOf(true)}, "spec.replica is added with enabled: false"},
		"replica added, not following": {nil, map[string]any{"replica": replicaOf(false)}, ""},
		"replica removed while following": {map[string]any{"replica": replicaOf(true)}, map[string]any{"replica": nil},
			"spec.replica can be removed only with enabled: false"},
		"replica removed once promoted": {map[string]any{"replica": replicaOf(false)}, map[string]any{"replica": nil}, ""},
		"replica promoted":              {map[string]any{"replica": replicaOf(true)}, map[string]any{"replica": replicaOf(false)}, ""},
		"demoted":                       {map[string]any{"replica": replicaOf(false)}, map[string]any{"replica": replicaOf(true)}, ""},
		"promotion token":               {map[string]any{"replica": replicaOf(true)}, map[string]any{"replica": replicaOf(false, "1/0/3000060")}, ""},
		"promotion token not a token": {map[string]any{"replica": replicaOf(true)}, map[string]any{"replica": replicaOf(false, "0/3000060")},
			"spec.replica.promotionToken is the source's status.replica.demotionToken"},
		// Only one engine exists today, so a change is refused by the enum;
		// the immutability rule on engine takes over when mysql joins.
		"engine changed": {nil, map[string]any{"engine": "mysql"}, `spec.engine: Unsupported value: "mysql"`},
		"scale to 10":    {nil, map[string]any{"replicas": int64(10)}, "less than or equal to 9"},
		"scale to 3":     {nil, map[string]any{"replicas": int64(3)}, ""},
	}
	i := 0
	for name, tc := range cases {
		i++
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			from := merge(base, tc.from)
			obj := manifest(fmt.Sprintf("update-%d", i), from)
			if err := env.Client.Create(ctx, obj); err != nil {
				t.Fatalf("create: %v", err)
			}
			t.Cleanup(func() { _ = env.Client.Delete(ctx, obj) })
			updated := manifest(obj.GetName(), merge(from, tc.to))
			updated.SetResourceVersion(obj.GetResourceVersion())
			err := env.Client.Update(ctx, updated, client.DryRunAll)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("update refused: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("update accepted, want an error containing %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q\ndoes not contain %q", err, tc.want)
			}
		})
	}
}

// TestMajorVersionChanges: the major may go up, never below the one the
// data is on (status.currentVersion), so a failed upgrade can be called
// off by setting the version back.
func TestMajorVersionChanges(t *testing.T) {
	cases := map[string]struct {
		current, from, to string
		want              string // empty: accepted
	}{
		"upgrade":                         {"15", "15", "17", ""},
		"upgrade from a minor":            {"15.8", "15.8", "18", ""},
		"back to the data's major":        {"15", "17", "15", ""},
		"downgrade below the data":        {"17", "17", "15", "PostgreSQL data cannot be downgraded"},
		"downgrade after a done upgrade":  {"17.2", "17", "16", "PostgreSQL data cannot be downgraded"},
		"minor change with status":        {"17", "17", "17.6", ""},
		"major change before being Ready": {"", "15", "17", "only once the MyDatabase has been Ready"},
	}
	i := 0
	for name, tc := range cases {
		i++
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			obj := manifest(fmt.Sprintf("major-%d", i), map[string]any{"version": tc.from})
			if err := env.Client.Create(ctx, obj); err != nil {
				t.Fatalf("create: %v", err)
			}
			t.Cleanup(func() { _ = env.Client.Delete(ctx, obj) })
			if tc.current != "" {
				if err := unstructured.SetNestedField(obj.Object, tc.current, "status", "currentVersion"); err != nil {
					t.Fatal(err)
				}
				if err := env.Client.Status().Update(ctx, obj); err != nil {
					t.Fatalf("status update: %v", err)
				}
			}
			if err := unstructured.SetNestedField(obj.Object, tc.to, "spec", "version"); err != nil {
				t.Fatal(err)
			}
			err := env.Client.Update(ctx, obj, client.DryRunAll)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("update refused: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("update accepted, want an error containing %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q\ndoes not contain %q", err, tc.want)
			}
		})
	}
}

// merge returns a with b's fields set over it; a nil in b removes the field
// and everything below it. Keys are dotted paths below spec.
func merge(a, b map[string]any) map[string]any {
	out := map[string]any{}
	maps.Copy(out, a)
	for k, v := range b {
		for other := range out {
			// a field replaces what was set below it, and what was set
			// (or removed) above it
			if strings.HasPrefix(other, k+".") || strings.HasPrefix(k, other+".") {
				delete(out, other)
			}
		}
		out[k] = v
	}
	return out
}

func TestScaleSubresource(t *testing.T) {
	ctx := context.Background()
	obj := manifest("scalable", nil)
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	db := &databasev1alpha1.MyDatabase{}
	db.Name, db.Namespace = "scalable", "default"

	scale := &autoscalingv1.Scale{}
	if err := env.Client.SubResource("scale").Get(ctx, db, scale); err != nil {
		t.Fatalf("get /scale: %v", err)
	}
	if scale.Spec.Replicas != 1 {
		t.Errorf("/scale spec.replicas = %d, want 1", scale.Spec.Replicas)
	}
	scale.Spec.Replicas = 3
	if err := env.Client.SubResource("scale").Update(ctx, db, client.WithSubResourceBody(scale)); err != nil {
		t.Fatalf("update /scale: %v", err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(db), db); err != nil {
		t.Fatal(err)
	}
	if *db.Spec.Replicas != 3 {
		t.Errorf("after scaling to 3, spec.replicas = %d", *db.Spec.Replicas)
	}
	scale.Spec.Replicas = 10
	scale.ResourceVersion = ""
	err := env.Client.SubResource("scale").Update(ctx, db, client.WithSubResourceBody(scale))
	if err == nil || !strings.Contains(err.Error(), "less than or equal to 9") {
		t.Errorf("scaling to 10 through /scale: got %v, want the replicas bound", err)
	}
}

func TestPrinterColumns(t *testing.T) {
	ctx := context.Background()
	if err := env.Client.Create(ctx, manifest("printed", nil)); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.GroupVersion = &schema.GroupVersion{Group: gvk.Group, Version: gvk.Version}
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = testenv.Codecs.WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	err = rc.Get().Namespace("default").Resource("mydatabases").Name("printed").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").Do(ctx).Into(&table)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(table.ColumnDefinitions))
	for _, c := range table.ColumnDefinitions {
		names = append(names, c.Name)
	}
	want := []string{"Name", "Engine", "Version", "Ready", "Phase", "Primary", "Endpoint", "Age"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("printer columns (-want +got):\n%s", diff)
	}
	if len(table.Rows) != 1 || table.Rows[0].Cells[1] != "postgres" || table.Rows[0].Cells[2] != "17" {
		t.Errorf("row = %v, want engine postgres and version 17", table.Rows)
	}
}

// nameRule matches the CRD rule that bounds metadata.name.
var nameRule = regexp.MustCompile(`^oldSelf\.hasValue\(\) \|\| size\(self\.metadata\.name\) <= ([0-9]+)$`)

// The CRD rule holds the bound as a literal; it must be MaxNameLength, in the
// rule and in its message, and it must run on create only.
func TestNameRuleIsMaxNameLength(t *testing.T) {
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "mydatabases." + gvk.Group}, crd); err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	if len(versions) != 1 {
		t.Fatalf("the CRD has %d versions, want 1", len(versions))
	}
	rules, _, _ := unstructured.NestedSlice(versions[0].(map[string]any), "schema", "openAPIV3Schema", "x-kubernetes-validations")
	found := 0
	for _, r := range rules {
		rule := r.(map[string]any)
		m := nameRule.FindStringSubmatch(fmt.Sprint(rule["rule"]))
		if m == nil {
			continue
		}
		found++
		if m[1] != strconv.Itoa(databasev1alpha1.MaxNameLength) {
			t.Errorf("the CRD rule %q bounds the name at %s, MaxNameLength is %d", rule["rule"], m[1], databasev1alpha1.MaxNameLength)
		}
		if want := fmt.Sprintf("metadata.name may be at most %d characters", databasev1alpha1.MaxNameLength); !strings.HasPrefix(fmt.Sprint(rule["message"]), want) {
			t.Errorf("message %q does not start with %q", rule["message"], want)
		}
		if rule["optionalOldSelf"] != true {
			t.Errorf("the name rule has optionalOldSelf %v, want true (it must also run on create)", rule["optionalOldSelf"])
		}
	}
	if found != 1 {
		t.Fatalf("found %d rules matching %s at the root of the schema, want 1: %v", found, nameRule, rules)
	}
}

// longName is a valid MyDatabase name of n characters.
func longName(n int) string {
	return ("longest-" + strings.Repeat("x", n))[:n-1] + "z"
}

// asObject turns a builder's apply configuration into the object it
// describes, for a plain create.
func asObject[T any](t *testing.T, ac any) *T {
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

// statefulSetPod is the pod of the given ordinal as the StatefulSet
// controller makes it: the template, named <statefulset>-<ordinal>, with the
// controller's labels (controller-revision-hash=<statefulset>-<hash of up to
// 10 characters>), its identity (hostname, subdomain) and its claims.
func statefulSetPod(sts *appsv1.StatefulSet, ordinal int) *corev1.Pod {
	name := fmt.Sprintf("%s-%d", sts.Name, ordinal)
	pod := &corev1.Pod{
		ObjectMeta: *sts.Spec.Template.ObjectMeta.DeepCopy(),
		Spec:       *sts.Spec.Template.Spec.DeepCopy(),
	}
	pod.Name, pod.Namespace = name, sts.Namespace
	pod.Labels[appsv1.ControllerRevisionHashLabelKey] = sts.Name + "-" + strings.Repeat("7", 10)
	pod.Labels[appsv1.StatefulSetPodNameLabel] = name
	pod.Labels[appsv1.PodIndexLabel] = strconv.Itoa(ordinal)
	pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: sts.Name, UID: "b5c7d0e4-1f0a-4b4c-9f8e-3d2a1c0b9a87"}}, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}
	pod.Spec.Hostname, pod.Spec.Subdomain = name, sts.Spec.ServiceName
	for _, claim := range sts.Spec.VolumeClaimTemplates {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: claim.Name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim.Name + "-" + name},
		}})
	}
	return pod
}

// The longest accepted name works: the MyDatabase is accepted, and so is
// every child derived from it, down to the last pod the StatefulSet
// controller would create for it. One character more is refused at
// admission, and a pod for it would be refused too.
func TestLongestName(t *testing.T) {
	ctx := context.Background()
	limit := databasev1alpha1.MaxNameLength

	obj := manifest(longName(limit), map[string]any{"replicas": int64(9)})
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatalf("create a MyDatabase named with %d characters: %v", limit, err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, obj) })
	db := &databasev1alpha1.MyDatabase{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), db); err != nil {
		t.Fatal(err)
	}

	sts := asObject[appsv1.StatefulSet](t, specs.StatefulSet(db, specs.Platform{}))
	pod := statefulSetPod(sts, int(*sts.Spec.Replicas)-1)
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: *sts.Spec.VolumeClaimTemplates[0].ObjectMeta.DeepCopy(),
		Spec:       *sts.Spec.VolumeClaimTemplates[0].Spec.DeepCopy(),
	}
	claim.Name, claim.Namespace = pod.Spec.Volumes[len(pod.Spec.Volumes)-1].PersistentVolumeClaim.ClaimName, db.Namespace
	children := []client.Object{
		sts,
		asObject[corev1.Service](t, specs.HeadlessService(db)),
		asObject[corev1.Service](t, specs.ReadWriteService(db)),
		asObject[corev1.Service](t, specs.ReadOnlyService(db)),
		asObject[corev1.ConfigMap](t, specs.ConfigMap(db)),
		asObject[policyv1.PodDisruptionBudget](t, specs.PodDisruptionBudget(db)),
		specs.CredentialsSecret(db, "password"),
		specs.ReplicationCertSecret(db, pki.KeyPair{Cert: []byte("certificate"), Key: []byte("key")}, nil),
		claim,
		pod,
	}
	for _, child := range children {
		kind := reflect.TypeOf(child).Elem().Name()
		if err := env.Client.Create(ctx, child, client.DryRunAll); err != nil {
			t.Errorf("%s %s, derived from a name of %d characters, refused: %v", kind, child.GetName(), limit, err)
		}
	}

	// One character more.
	err := env.Client.Create(ctx, manifest(longName(limit+1), nil), client.DryRunAll)
	want := fmt.Sprintf("metadata.name may be at most %d characters", limit)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a name of %d characters: got %v, want an error containing %q", limit+1, err, want)
	}
	// Its pods could never have been created.
	over := db.DeepCopy()
	over.Name = longName(limit + 1)
	pod = statefulSetPod(asObject[appsv1.StatefulSet](t, specs.StatefulSet(over, specs.Platform{})), 0)
	revision := pod.Labels[appsv1.ControllerRevisionHashLabelKey]
	err = env.Client.Create(ctx, pod, client.DryRunAll)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q: must be no more than 63", revision)) {
		t.Errorf("the pod of a MyDatabase named with %d characters: got %v, want its label %s=%s refused", limit+1, err, appsv1.ControllerRevisionHashLabelKey, revision)
	}
}

package v1alpha1_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// fuzzPaths are the spec fields FuzzAdmission sets, picked where the
// CRD's rules, patterns and formats are (roles and databases as whole
// lists).
var fuzzPaths = []string{
	"version", "image", "replicas", "storage.size", "walStorage.size", "parameters", "databaseName", "user",
	"service.type", "service.port", "deletionPolicy", "paused", "hibernate", "instanceManagerUpdate",
	"failover.leaseDurationSeconds", "replication.synchronous.number", "replication.synchronous.dataDurability",
	"switchover.to", "tls.clients", "tls.caRotation.requestedAt", "tls.caRotation.maxAge", "tls.caRotation.trustPeriod",
	"backup.objectStore.endpoint", "backup.objectStore.bucket", "backup.objectStore.path", "backup.objectStore.credentialsSecret",
	"backup.schedule.cron", "backup.retention.recoveryWindow", "backup.retention.keep", "backup.encryption.secret",
	"bootstrap.recovery.objectStore.path", "bootstrap.recovery.target.time", "bootstrap.recovery.target.lsn",
	"bootstrap.recovery.target.name", "bootstrap.recovery.target.immediate", "bootstrap.recovery.backupID",
	"replica.enabled", "replica.promotionToken", "replica.source.objectStore.path", "replica.source.streaming.host",
	"replica.source.encryption.secret", "roles", "databases", "podLabels", "credentials.secretName",
}

// fuzzValue is a value of one of JSON's kinds, made from the fuzzer's
// inputs: a string, a number, a boolean, a list of strings, an object, or
// a list of objects with a name (roles and databases).
func fuzzValue(kind uint8, s string, n int64) any {
	switch kind % 6 {
	case 0:
		return s
	case 1:
		return n
	case 2:
		return n%2 == 0
	case 3:
		return []any{s, fmt.Sprint(n)}
	case 4:
		return map[string]any{s: fmt.Sprint(n)}
	default:
		return []any{map[string]any{"name": s, "comment": fmt.Sprint(n)}}
	}
}

// FuzzAdmission sends MyDatabases with two fuzzed spec fields to the real
// kube-apiserver of envtest, which holds the generated CRD and its CEL
// rules. Properties:
//   - every one gets a verdict: created, or refused as Invalid or
//     BadRequest; never an internal error, a CEL rule that failed to
//     evaluate (a field read without has()), or one over its cost budget;
//   - one created is accepted again unchanged, so that no rule on a change
//     (oldSelf) refuses what admission took, and the operator's own writes
//     of an admitted object cannot be refused for its spec.
//
// The seed corpus runs in make test; `go test ./api/v1alpha1 -run '^$'
// -fuzz FuzzAdmission -fuzztime 60s` with KUBEBUILDER_ASSETS explores.
func FuzzAdmission(f *testing.F) {
	f.Add(uint8(0), uint8(0), "17", int64(0), uint8(2), uint8(1), "", int64(3))
	f.Add(uint8(16), uint8(1), "", int64(1), uint8(15), uint8(1), "", int64(4))
	f.Add(uint8(22), uint8(0), "http://s3:9000", int64(0), uint8(23), uint8(0), "backups", int64(0))
	f.Add(uint8(26), uint8(0), "0 3 * * *", int64(0), uint8(28), uint8(1), "", int64(-1))
	f.Add(uint8(31), uint8(0), "2026-12-07T04:00:00Z", int64(0), uint8(32), uint8(0), "0/3000000", int64(0))
	f.Add(uint8(36), uint8(2), "", int64(0), uint8(39), uint8(0), "shop-rw.shop", int64(0))
	f.Add(uint8(41), uint8(5), "pg_read_all", int64(0), uint8(42), uint8(5), "a\x00b", int64(9))
	f.Add(uint8(19), uint8(0), "2026-12-07T04:00:00Z", int64(0), uint8(20), uint8(0), "1h", int64(0))
	f.Add(uint8(5), uint8(4), "shared_preload_libraries", int64(1), uint8(43), uint8(4), "app.kubernetes.io/name", int64(2))
	f.Add(uint8(10), uint8(0), "Delete", int64(0), uint8(24), uint8(0), "../etc", int64(0))
	var seq atomic.Int64
	f.Fuzz(func(t *testing.T, p1, k1 uint8, s1 string, n1 int64, p2, k2 uint8, s2 string, n2 int64) {
		spec := map[string]any{
			fuzzPaths[int(p1)%len(fuzzPaths)]: fuzzValue(k1, s1, n1),
			fuzzPaths[int(p2)%len(fuzzPaths)]: fuzzValue(k2, s2, n2),
		}
		obj, err := fuzzManifest(fmt.Sprintf("fuzz-%d", seq.Add(1)), spec)
		if err != nil {
			return // two paths that cross (a field and one inside it)
		}
		ctx := context.Background()
		err = env.Client.Create(ctx, obj)
		if err != nil {
			verdict(t, spec, err)
			return
		}
		defer func() { _ = env.Client.Delete(ctx, obj) }()
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(gvk)
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), got); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Update(ctx, got); err != nil {
			t.Fatalf("%v was created, and refused unchanged: %v", spec, err)
		}
	})
}

// fuzzManifest is manifest, with an error where two paths cross.
func fuzzManifest(name string, spec map[string]any) (u *unstructured.Unstructured, err error) {
	defer func() {
		if recover() != nil {
			err = fmt.Errorf("paths cross")
		}
	}()
	return manifest(name, spec), nil
}

// verdict fails t unless err is admission's refusal of spec.
func verdict(t *testing.T, spec map[string]any, err error) {
	t.Helper()
	if !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
		t.Fatalf("%v: not a verdict: %v", spec, err)
	}
	for _, broken := range []string{"evaluating rule", "no such key", "no such overload", "cost exceeds", "Internal error", "internal error"} {
		if strings.Contains(err.Error(), broken) {
			t.Fatalf("%v: a CEL rule broke (%q): %v", spec, broken, err)
		}
	}
}

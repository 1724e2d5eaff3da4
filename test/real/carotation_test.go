//go:build real

package real

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
)

// TestCARotationOnRealPods rotates the operator's CA of a MyDatabase of
// two servers with a pooler in front (docs/security.md, CA rotation),
// under a writer through the rw Service that connects anew for every row
// with sslmode=verify-full and the Secret's ca.crt, re-read every second
// as the documented client rule asks (a mounted Secret does it on its
// own), and under clients of the pooler that keep their connections. It
// must go through Trusting and Reissuing to Succeeded with no failed
// write on either path and no PostgreSQL restart, and leave a ca.crt
// that holds the new CA alone.
//
// The rotation lasts at least twice the operator's bound on the kubelet's
// Secret sync (two minutes each phase), so the test runs only when asked:
// REAL_CA_ROTATION=1 (make test-real-ca-rotation).
func TestCARotationOnRealPods(t *testing.T) {
	if os.Getenv("REAL_CA_ROTATION") == "" {
		t.Skip("REAL_CA_ROTATION is not set: make test-real-ca-rotation runs it")
	}
	ctx := t.Context()
	ns := newNamespace(t, "real-ca-rotation", nil)
	db := &databasev1alpha1.MyDatabase{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: dbName},
		Spec: databasev1alpha1.MyDatabaseSpec{
			Version: "17", Replicas: ptr.To[int32](2), DatabaseName: "app", User: "app",
			Storage:        databasev1alpha1.StorageSpec{Size: resource.MustParse("2Gi")},
			DeletionPolicy: databasev1alpha1.DeletionPolicyDelete,
			TLS:            databasev1alpha1.TLSSpec{CARotation: &databasev1alpha1.CARotationSpec{TrustPeriod: &metav1.Duration{Duration: 10 * time.Second}}},
		},
	}
	if err := env.c.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	waitReady(t, ns, 2, 4*time.Minute)
	uri, _ := credentials(t, ns)
	conn := connect(t, uri)
	if _, err := conn.Exec(ctx, "CREATE TABLE items (id bigserial PRIMARY KEY, note text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	pooler := &databasev1alpha1.MyDatabasePooler{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: dbName + "-pool"},
		Spec: databasev1alpha1.MyDatabasePoolerSpec{Database: dbName, PoolMode: databasev1alpha1.PoolModeTransaction, Instances: ptr.To[int32](1)}}
	if err := env.c.Create(ctx, pooler); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 3*time.Minute, "the pooler Ready", func() error {
		if err := env.c.Get(ctx, client.ObjectKeyFromObject(pooler), pooler); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(pooler.Status.Conditions, databasev1alpha1.ConditionReady) {
			return fmt.Errorf("conditions %+v", pooler.Status.Conditions)
		}
		return nil
	})
	throughPooler := strings.Replace(uri, "@"+dbName+"-rw.", "@"+pooler.Name+".", 1) + "&default_query_exec_mode=exec"

	started := map[string]string{} // each server's postmaster start time
	for _, pod := range []string{dbName + "-0", dbName + "-1"} {
		started[pod] = superuser(t, ns, pod, "SELECT pg_postmaster_start_time()")
	}
	oldCA := caOf(t, ns)

	// The client rule: ca.crt read again from the Secret every second,
	// into the file the URI's sslrootcert names (credentials).
	refresh, stopRefresh := context.WithCancel(ctx)
	defer stopRefresh()
	go func() {
		for refresh.Err() == nil {
			s := &corev1.Secret{}
			if err := env.c.Get(refresh, client.ObjectKey{Namespace: ns, Name: specs.CredentialsSecretName(db)}, s); err == nil && len(s.Data[specs.CACertKey]) > 0 {
				path := filepath.Join(env.work, ns+"-"+db.Name+"-"+specs.CACertKey)
				_ = os.WriteFile(path+".new", s.Data[specs.CACertKey], 0o644)
				_ = os.Rename(path+".new", path) // a dial reads it whole, old or new
			}
			time.Sleep(time.Second)
		}
	}()
	direct := startWriter(ctx, uri)
	pooled := startClients(ctx, throughPooler, 2)

	began := time.Now()
	patch(t, ns, func(db *databasev1alpha1.MyDatabase) {
		db.Spec.TLS.CARotation.RequestedAt = &metav1.Time{Time: began.Truncate(time.Second)}
	})
	var phases []databasev1alpha1.CARotationPhase
	testenv.Eventually(t, 12*time.Minute, "the CA rotation Succeeded", func() error {
		got := getDB(t, ns)
		var rot *databasev1alpha1.CARotationStatus
		if got.Status.TLS != nil {
			rot = got.Status.TLS.CARotation
		}
		if rot == nil || rot.StartedAt == nil || rot.StartedAt.Before(&metav1.Time{Time: began.Truncate(time.Second)}) {
			return fmt.Errorf("no rotation since the request yet: %+v", rot)
		}
		if len(phases) == 0 || phases[len(phases)-1] != rot.Phase {
			phases = append(phases, rot.Phase)
			t.Logf("%s after %s: %s", rot.Phase, time.Since(began).Round(time.Second), rot.Message)
		}
		if rot.Phase != databasev1alpha1.CARotationSucceeded {
			return fmt.Errorf("%s: %s", rot.Phase, rot.Message)
		}
		return nil
	})
	took := time.Since(began)
	time.Sleep(5 * time.Second) // writes on the new certificates alone
	stopRefresh()
	direct.stop()
	pooled.stop()

	writeResult(t, "ca-rotation-duration", took)
	t.Logf("CA ROTATION took %s through %v: %d writes through the rw Service, %d failed; %d through the pooler, %d failed %v",
		took.Round(time.Second), phases, direct.acked(), direct.failures(), pooled.acked(), pooled.failures(), pooled.errs)
	if !slices.Contains(phases, databasev1alpha1.CARotationTrusting) || !slices.Contains(phases, databasev1alpha1.CARotationReissuing) {
		t.Errorf("phases seen %v, want Trusting and Reissuing before Succeeded (each lasts two minutes at least)", phases)
	}
	if direct.failures() > 0 || pooled.failures() > 0 || direct.acked() == 0 || pooled.acked() == 0 {
		t.Errorf("writes: %d acknowledged, %d failed through the rw Service; %d acknowledged, %d failed through the pooler; want none failed",
			direct.acked(), direct.failures(), pooled.acked(), pooled.failures())
	}
	for pod, at := range started {
		if now := superuser(t, ns, pod, "SELECT pg_postmaster_start_time()"); now != at {
			t.Errorf("%s restarted: PostgreSQL started at %s, then at %s", pod, at, now)
		}
	}
	newCA := caOf(t, ns)
	if newCA == oldCA || strings.Count(newCA, "BEGIN CERTIFICATE") != 1 {
		t.Errorf("ca.crt after the rotation: the same as before %t, %d certificates; want one, new", newCA == oldCA, strings.Count(newCA, "BEGIN CERTIFICATE"))
	}
	// With the new CA alone, a verifying client still connects.
	uri, _ = credentials(t, ns)
	count(t, uri)
}

// caOf is the ca.crt of the MyDatabase's connection Secret in ns.
func caOf(t *testing.T, ns string) string {
	t.Helper()
	s := &corev1.Secret{}
	if err := env.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: specs.CredentialsSecretName(getDB(t, ns))}, s); err != nil {
		t.Fatal(err)
	}
	return string(s.Data[specs.CACertKey])
}

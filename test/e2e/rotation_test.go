//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// The Kubernetes side of a password rotation. KWOK pods run no instance
// manager, so the test stands in for them through the same channel (their
// reports), as TestFailoverFollowsTheLease does; the rotation on real
// servers is TestPasswordRotation in test/postgres. It checks that the
// instance managers may read exactly the Secrets a rotation uses, that
// the Secret keeps its password until every server reports the new one,
// and that it then receives it and the MyDatabase is Ready again.
func TestPasswordRotationObjects(t *testing.T) {
	ns := newNamespace(t, "rotation", nil)
	applyDB(t, ns, 2, retain)
	waitReady(t, ns, 2, 120*time.Second)
	sa := "system:serviceaccount:" + ns + ":x-instance"
	for secret, want := range map[string]string{"x-credentials-rotation": "yes", "x-replication-tls": "no", "x-ca": "no", "x-credentials": "no"} {
		out, _ := kubectlRun("", "auth", "can-i", "get", "secret/"+secret, "-n", ns, "--as", sa)
		if got := strings.TrimSpace(out); got != want {
			t.Errorf("may the instance managers get Secret %s? %q, want %q", secret, got, want)
		}
	}
	old := secretPassword(t, ns, "x-credentials")

	kubectl(t, "", "patch", "mydatabase", dbName, "-n", ns, "--type=merge", "-p",
		`{"spec":{"passwordRotation":{"userRequestedAt":"2026-11-30T20:00:00Z"}}}`)
	staging := &corev1.Secret{}
	eventually(t, 30*time.Second, "the staging Secret", func() (bool, string) {
		return exists(t, ns, "x-credentials-rotation", staging), ""
	})
	eventually(t, 30*time.Second, "Reconciling RotatingPassword", func() (bool, string) {
		db := &databasev1alpha1.MyDatabase{}
		if !exists(t, ns, dbName, db) {
			return false, "no MyDatabase"
		}
		return strings.Contains(conditions(db), databasev1alpha1.ReasonRotatingPassword), conditions(db)
	})
	accepted := func(role string, passwords map[string]string) string {
		b, err := json.Marshal(map[string]any{"role": role, "ready": true, "passwords": passwords, "time": "2026-11-30T20:00:01Z"})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	standIn(t, ns, "x-1", accepted("replica", nil), "replica")
	standIn(t, ns, pod0, accepted("primary", map[string]string{staging.Name: staging.ResourceVersion}), "primary")
	time.Sleep(3 * time.Second)
	if got := secretPassword(t, ns, "x-credentials"); got != old {
		t.Fatal("the Secret changed before the replica accepted the new password")
	}
	standIn(t, ns, "x-1", accepted("replica", map[string]string{staging.Name: staging.ResourceVersion}), "replica")
	eventually(t, 30*time.Second, "the staging Secret gone", func() (bool, string) {
		return !exists(t, ns, "x-credentials-rotation", &corev1.Secret{}), ""
	})
	if got := secretPassword(t, ns, "x-credentials"); got != string(staging.Data["password"]) {
		t.Fatal("the Secret does not hold the staged password")
	}
	db := waitReady(t, ns, 2, 60*time.Second)
	for _, p := range db.Status.Passwords {
		if p.Role == "app" && (p.LastRotationTime == nil || p.Rotating != "") {
			t.Errorf("status.passwords %+v", db.Status.Passwords)
		}
	}
}

func secretPassword(t *testing.T, ns, name string) string {
	t.Helper()
	s := &corev1.Secret{}
	if err := env.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		t.Fatal(fmt.Errorf("Secret %s: %w", name, err))
	}
	return string(s.Data["password"])
}

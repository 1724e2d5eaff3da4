package mydatabase

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
)

// rotationPods makes the pods of a ready MyDatabase of n servers, as the
// StatefulSet controller would, and waits until it is Ready.
func rotationPods(t *testing.T, db *databasev1alpha1.MyDatabase, n int) {
	t.Helper()
	eventually(t, "the StatefulSet", exists(db.Namespace, db.Name, &appsv1.StatefulSet{}))
	for i := range n {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: fmt.Sprintf("%s-%d", db.Name, i),
				Labels: specs.Labels(db, specs.ComponentDatabase)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "postgres:17"}}},
		}
		if err := k8s.Create(context.Background(), pod); err != nil {
			t.Fatal(err)
		}
	}
	markReady(t, db)
	waitFor(t, db, "Ready", phaseIs(databasev1alpha1.PhaseReady))
}

// reportPasswords plays a pod's instance manager: a ready report of its
// role with the passwords its server accepts.
func reportPasswords(t *testing.T, ns, pod, role string, passwords map[string]string) {
	t.Helper()
	publishReport(t, ns, pod, contract.Report{Role: role, Ready: true, Passwords: passwords, Time: time.Now().UTC()})
}

// publishReport plays a pod's instance manager: it publishes r.
func publishReport(t *testing.T, ns, pod string, r contract.Report) {
	t.Helper()
	testenv.PublishReport(t, k8s, ns, pod, r)
}

func secretOf(t *testing.T, ns, name string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	eventually(t, "Secret "+name, exists(ns, name, s))
	return s
}

func reconcilingWith(reason string, want ...string) func(*databasev1alpha1.MyDatabase) error {
	return func(db *databasev1alpha1.MyDatabase) error {
		c := condition(db, databasev1alpha1.ConditionReconciling)
		if c == nil || c.Reason != reason {
			return fmt.Errorf("Reconciling %+v, want reason %s", c, reason)
		}
		for _, w := range want {
			if !strings.Contains(c.Message, w) {
				return fmt.Errorf("Reconciling message %q lacks %q", c.Message, w)
			}
		}
		return nil
	}
}

// TestPasswordRotationWaitsForEveryServer: a rotation request stages a new
// password; the Secret keeps the old one until the primary and the ready
// replica report that their servers accept the new one; then it receives
// it in one write, the staging Secret goes, and the request is not carried
// out again.
func TestPasswordRotationWaitsForEveryServer(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "rot", func(db *databasev1alpha1.MyDatabase) { db.Spec.Replicas = ptr.To[int32](2) }))
	rotationPods(t, db, 2)
	creds := secretOf(t, ns, "rot-credentials")
	oldPassword := string(creds.Data[specs.SecretPasswordKey])

	requested := metav1.NewTime(time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC))
	update(t, db, func(db *databasev1alpha1.MyDatabase) {
		db.Spec.PasswordRotation = &databasev1alpha1.PasswordRotationSpec{UserRequestedAt: &requested}
	})
	staging := secretOf(t, ns, "rot-credentials-rotation")
	if got := staging.Annotations[databasev1alpha1.AnnotationRole]; got != "app" {
		t.Fatalf("staging Secret for role %q, want app", got)
	}
	newPassword := string(staging.Data[specs.SecretPasswordKey])
	if newPassword == "" || newPassword == oldPassword {
		t.Fatal("the staging Secret has no new password")
	}
	waitFor(t, db, "RotatingPassword naming the primary", reconcilingWith(databasev1alpha1.ReasonRotatingPassword, "rot-0"))

	// The primary accepts it; the replica has not replayed it yet.
	reportPasswords(t, ns, "rot-1", databasev1alpha1.RoleReplica, nil)
	reportPasswords(t, ns, "rot-0", databasev1alpha1.RolePrimary, map[string]string{staging.Name: staging.ResourceVersion})
	waitFor(t, db, "RotatingPassword naming the replica", reconcilingWith(databasev1alpha1.ReasonRotatingPassword, "rot-1"))
	if s := secretOf(t, ns, "rot-credentials"); string(s.Data[specs.SecretPasswordKey]) != oldPassword {
		t.Fatal("the Secret changed before every server accepted the new password")
	}

	reportPasswords(t, ns, "rot-1", databasev1alpha1.RoleReplica, map[string]string{staging.Name: staging.ResourceVersion})
	waitFor(t, db, "Ready after the rotation", phaseIs(databasev1alpha1.PhaseReady))
	eventually(t, "the staging Secret deleted", gone(ns, staging.Name, &corev1.Secret{}))
	creds = secretOf(t, ns, "rot-credentials")
	if got := string(creds.Data[specs.SecretPasswordKey]); got != newPassword {
		t.Fatalf("the Secret's password is not the staged one")
	}
	if !strings.Contains(string(creds.Data[specs.SecretURIKey]), ":"+newPassword+"@") {
		t.Fatal("the Secret's uri does not carry the new password")
	}
	for k, want := range map[string]string{
		databasev1alpha1.AnnotationRotationRequest: "2026-11-30T20:00:00Z",
		databasev1alpha1.AnnotationPasswordDigest:  specs.PasswordDigest([]byte(newPassword)),
		databasev1alpha1.AnnotationRotatedAt:       "2026-01-02T03:04:05Z", // the fake clock
	} {
		if got := creds.Annotations[k]; got != want {
			t.Errorf("annotation %s = %q, want %q", k, got, want)
		}
	}
	waitFor(t, db, "status.passwords", func(db *databasev1alpha1.MyDatabase) error {
		i := slices.IndexFunc(db.Status.Passwords, func(p databasev1alpha1.PasswordStatus) bool { return p.Role == "app" })
		if i < 0 || db.Status.Passwords[i].LastRotationTime == nil || db.Status.Passwords[i].Rotating != "" {
			return fmt.Errorf("status.passwords %+v", db.Status.Passwords)
		}
		return nil
	})
	eventually(t, "a PasswordRotated event", eventWith(ns, "PasswordRotated", "rot-credentials"))

	// Done once: further passes create no staging Secret.
	reconcileOnce(t, db)
	if err := get(ns, staging.Name, &corev1.Secret{}); err == nil {
		t.Fatal("a fulfilled request staged another password")
	}
}

// TestLegacyReplicationPasswordRetired: the replication password Secret
// (and its staging Secret) of a MyDatabase made before replicas
// authenticated by certificate stays while a pod runs the old template,
// whose environment needs it, and is deleted once every pod runs the
// template that mounts the client certificate.
func TestLegacyReplicationPasswordRetired(t *testing.T) {
	ns := namespace(t)
	db := newDB(ns, "legacy")
	legacy := []string{"legacy-replication", "legacy-replication-rotation"}
	for _, name := range legacy {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: specs.Labels(db, specs.ComponentCredentials)},
			Data: map[string][]byte{specs.SecretPasswordKey: []byte("old-replication-password")}}
		if err := k8s.Create(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	db = create(t, db)
	eventually(t, "the StatefulSet", exists(ns, "legacy", &appsv1.StatefulSet{}))
	instancePod(t, db, "legacy-0", "r0", databasev1alpha1.RolePrimary, "0/5000100")
	markReady(t, db) // the template's revision is r1
	eventually(t, "the pod of the old template restarted", gone(ns, "legacy-0", &corev1.Pod{}))
	for _, name := range legacy {
		if err := get(ns, name, &corev1.Secret{}); err != nil {
			t.Fatalf("Secret %s, which the old template's pod needs, is gone before the pod: %v", name, err)
		}
	}
	instancePod(t, db, "legacy-0", "r1", databasev1alpha1.RolePrimary, "0/5000100")
	for _, name := range legacy {
		eventually(t, name+" deleted", gone(ns, name, &corev1.Secret{}))
	}
	eventually(t, "a ReplicationPasswordRetired event", eventWith(ns, "ReplicationPasswordRetired", "legacy-replication-tls"))
	if s := secretOf(t, ns, "legacy-replication-tls"); len(s.Data[specs.TLSCertKey]) == 0 {
		t.Fatal("the replication certificate Secret has no certificate")
	}
}

// TestUserSecretChangeIsFollowed: a user-supplied Secret's new password is
// reported as being applied until the primary's instance manager reports
// it; one it cannot hash stalls with what to do.
func TestUserSecretChangeIsFollowed(t *testing.T) {
	ns := namespace(t)
	user := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mine"},
		Data:       map[string][]byte{specs.SecretPasswordKey: []byte("s3cret-from-the-user-1")},
	}
	if err := k8s.Create(context.Background(), user); err != nil {
		t.Fatal(err)
	}
	db := create(t, newDB(ns, "usr", func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Credentials = &databasev1alpha1.CredentialsSpec{SecretName: "mine"}
	}))
	rotationPods(t, db, 1)
	reportPasswords(t, ns, "usr-0", databasev1alpha1.RolePrimary, map[string]string{"mine": user.ResourceVersion})

	user.Data[specs.SecretPasswordKey] = []byte("s3cret-from-the-user-2")
	if err := k8s.Update(context.Background(), user); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, db) // no watch brings a user's Secret
	waitFor(t, db, "RotatingPassword for the user's Secret", reconcilingWith(databasev1alpha1.ReasonRotatingPassword, "Secret mine changed"))
	reportPasswords(t, ns, "usr-0", databasev1alpha1.RolePrimary, map[string]string{"mine": user.ResourceVersion})
	waitFor(t, db, "Ready once applied", phaseIs(databasev1alpha1.PhaseReady))

	user.Data[specs.SecretPasswordKey] = []byte("s3cret-from-the-user-ä")
	if err := k8s.Update(context.Background(), user); err != nil {
		t.Fatal(err)
	}
	reportPasswords(t, ns, "usr-0", databasev1alpha1.RolePrimary, map[string]string{"mine": contract.PasswordRefused + user.ResourceVersion})
	waitFor(t, db, "Stalled PasswordNotApplied", stalledWith(databasev1alpha1.ReasonPasswordNotApplied, "printable ASCII"))
}

func TestUserRotationWithOwnSecretIsRefused(t *testing.T) {
	ns := namespace(t)
	db := newDB(ns, "refused", func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Credentials = &databasev1alpha1.CredentialsSpec{SecretName: "mine"}
		db.Spec.PasswordRotation = &databasev1alpha1.PasswordRotationSpec{UserRequestedAt: new(metav1.Now())}
	})
	err := k8s.Create(context.Background(), db)
	if err == nil || !strings.Contains(err.Error(), "passwordRotation.userRequestedAt rotates the generated Secret only") {
		t.Fatalf("created, or refused with another message: %v", err)
	}
}

func TestUnconfirmed(t *testing.T) {
	pods := []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "db-0"}}, {ObjectMeta: metav1.ObjectMeta{Name: "db-1"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "db-2"}}}
	ok := map[string]string{"s": "7"}
	replica := func(ready bool, pw map[string]string) *contract.Report {
		return &contract.Report{Role: databasev1alpha1.RoleReplica, Ready: ready, Passwords: pw}
	}
	primary := &contract.Report{Role: databasev1alpha1.RolePrimary, Ready: true, Passwords: ok}
	for name, tc := range map[string]struct {
		reports map[string]*contract.Report
		want    []string
	}{
		"no reports: the primary":            {map[string]*contract.Report{}, []string{"db-0"}},
		"all accept":                         {map[string]*contract.Report{"db-0": primary, "db-1": replica(true, ok), "db-2": replica(true, ok)}, nil},
		"a ready replica behind":             {map[string]*contract.Report{"db-0": primary, "db-1": replica(true, nil), "db-2": replica(true, ok)}, []string{"db-1"}},
		"an unready replica is not awaited":  {map[string]*contract.Report{"db-0": primary, "db-1": replica(false, nil)}, nil},
		"an older resourceVersion":           {map[string]*contract.Report{"db-0": {Passwords: map[string]string{"s": "6"}}}, []string{"db-0"}},
		"a replica without report is absent": {map[string]*contract.Report{"db-0": primary}, nil},
	} {
		if got := unconfirmed(pods, tc.reports, "db-0", "s", "7"); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}

func eventWith(ns, reason, text string) func() error {
	return func() error {
		events := &eventsv1.EventList{}
		if err := k8s.List(context.Background(), events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason == reason && strings.Contains(e.Note, text) {
				return nil
			}
		}
		return fmt.Errorf("no %s event mentioning %q among %d", reason, text, len(events.Items))
	}
}

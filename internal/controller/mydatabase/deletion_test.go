package mydatabase

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// dataVolume creates the PVC the StatefulSet controller would create for
// ordinal i (envtest has none), labelled from the volume claim template and,
// as the StatefulSet controller does under a Delete retention policy, owned
// by the StatefulSet.
func dataVolume(t *testing.T, db *databasev1alpha1.MyDatabase, ordinal int, ownedBySts bool) *corev1.PersistentVolumeClaim {
	t.Helper()
	return volumeClaim(t, db, specs.DataVolumeName, ordinal, ownedBySts)
}

// volumeClaim creates the claim of the StatefulSet's volumeClaimTemplate
// of this name for the server of this ordinal, as its controller would.
func volumeClaim(t *testing.T, db *databasev1alpha1.MyDatabase, name string, ordinal int, ownedBySts bool) *corev1.PersistentVolumeClaim {
	t.Helper()
	sts := &appsv1.StatefulSet{}
	eventually(t, "the StatefulSet", exists(db.Namespace, db.Name, sts))
	i := slices.IndexFunc(sts.Spec.VolumeClaimTemplates, func(c corev1.PersistentVolumeClaim) bool { return c.Name == name })
	if i < 0 {
		t.Fatalf("the StatefulSet has no volumeClaimTemplate %s", name)
	}
	tmpl := sts.Spec.VolumeClaimTemplates[i]
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: db.Namespace,
			Name:      fmt.Sprintf("%s-%s-%d", tmpl.Name, sts.Name, ordinal),
			Labels:    tmpl.Labels,
		},
		Spec: tmpl.Spec,
	}
	if ownedBySts {
		pvc.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts.Name, UID: sts.UID}}
	}
	if err := k8s.Create(context.Background(), pvc); err != nil {
		t.Fatal(err)
	}
	return pvc
}

func deleteDB(t *testing.T, db *databasev1alpha1.MyDatabase) {
	t.Helper()
	if err := k8s.Delete(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the MyDatabase to be gone", func() error {
		err := get(db.Namespace, db.Name, &databasev1alpha1.MyDatabase{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (err %v)", err)
	})
}

func TestDeleteUnderRetainKeepsDataAndAdoptsIt(t *testing.T) {
	ns := namespace(t)
	withWAL := func(db *databasev1alpha1.MyDatabase) { db.Spec.WALStorage = &databasev1alpha1.StorageSpec{} }
	db := create(t, newDB(ns, "keep", withWAL))
	eventually(t, "the credentials", exists(ns, "keep-credentials", &corev1.Secret{}))
	// A PVC still owned by the StatefulSet, as after a switch from Delete:
	// the finalizer must release it too.
	pvc := dataVolume(t, db, 0, true)
	wal := volumeClaim(t, db, specs.WALVolumeName, 0, false)
	oldUID := db.UID
	password := secretValue(t, ns, "keep-credentials")

	eventually(t, "the CA", exists(ns, "keep-ca", &corev1.Secret{}))
	ca := secretData(t, ns, "keep-ca")
	deleteDB(t, db)
	for _, name := range []string{"keep-credentials", "keep-replication-tls", "keep-ca", "keep-server-tls"} {
		s := &corev1.Secret{}
		if err := get(ns, name, s); err != nil {
			t.Fatalf("Secret %s after delete under Retain: %v", name, err)
		}
		if len(s.OwnerReferences) != 0 {
			t.Errorf("retained Secret %s still has owners %v", name, s.OwnerReferences)
		}
	}
	kept := &corev1.PersistentVolumeClaim{}
	if err := get(ns, pvc.Name, kept); err != nil {
		t.Fatalf("PVC after delete under Retain: %v", err)
	}
	if len(kept.OwnerReferences) != 0 {
		t.Errorf("retained PVC still has owners %v: the garbage collector would take it", kept.OwnerReferences)
	}
	// Everything else still points at the deleted MyDatabase, so the
	// garbage collector (absent in envtest) removes it.
	sts := &appsv1.StatefulSet{}
	if err := get(ns, "keep", sts); err == nil {
		if ref := metav1.GetControllerOf(sts); ref == nil || ref.UID != oldUID {
			t.Errorf("StatefulSet controller reference %v, want the deleted MyDatabase", ref)
		}
		// Play the garbage collector, so the new instance starts clean.
		_ = k8s.Delete(context.Background(), sts)
	}

	// The same name again: the Secrets and volume are adopted, the password
	// is the one the data knows.
	db2 := create(t, newDB(ns, "keep", withWAL))
	eventually(t, "adoption of the Secret and PVC", func() error {
		s := &corev1.Secret{}
		if err := get(ns, "keep-credentials", s); err != nil {
			return err
		}
		if s.Labels[databasev1alpha1.LabelOwnerUID] != string(db2.UID) {
			return fmt.Errorf("Secret owner-uid %q, want %q", s.Labels[databasev1alpha1.LabelOwnerUID], db2.UID)
		}
		if err := get(ns, pvc.Name, kept); err != nil {
			return err
		}
		if kept.Labels[databasev1alpha1.LabelOwnerUID] != string(db2.UID) {
			return fmt.Errorf("PVC owner-uid %q, want %q", kept.Labels[databasev1alpha1.LabelOwnerUID], db2.UID)
		}
		keptWAL := &corev1.PersistentVolumeClaim{}
		if err := get(ns, wal.Name, keptWAL); err != nil {
			return err
		}
		if keptWAL.Labels[databasev1alpha1.LabelOwnerUID] != string(db2.UID) {
			return fmt.Errorf("WAL PVC owner-uid %q, want %q", keptWAL.Labels[databasev1alpha1.LabelOwnerUID], db2.UID)
		}
		return nil
	})
	if got := secretValue(t, ns, "keep-credentials"); got != password {
		t.Errorf("password changed on adoption")
	}
	eventually(t, "a server certificate from the retained CA", func() error {
		s := &corev1.Secret{}
		if err := get(ns, "keep-server-tls", s); err != nil {
			return err
		}
		if !bytes.Equal(s.Data[specs.CACertKey], ca[specs.CACertKey]) {
			return errors.New("the server certificate names another CA")
		}
		return nil
	})
	if got := secretData(t, ns, "keep-ca"); !bytes.Equal(got[specs.CAKeyKey], ca[specs.CAKeyKey]) {
		t.Error("the retained CA was made again on adoption")
	}
	if kept.UID != pvc.UID {
		t.Errorf("PVC UID %s, want the original %s", kept.UID, pvc.UID)
	}
}

func secretValue(t *testing.T, ns, name string) string {
	t.Helper()
	return string(secretData(t, ns, name)[specs.SecretPasswordKey])
}

func secretData(t *testing.T, ns, name string) map[string][]byte {
	t.Helper()
	s := &corev1.Secret{}
	if err := get(ns, name, s); err != nil {
		t.Fatal(err)
	}
	return s.Data
}

func TestDeleteUnderDeleteRemovesData(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "drop", func(db *databasev1alpha1.MyDatabase) {
		db.Spec.DeletionPolicy = databasev1alpha1.DeletionPolicyDelete
	}))
	for _, name := range []string{"drop-credentials", "drop-replication-tls"} {
		s := &corev1.Secret{}
		eventually(t, name, exists(ns, name, s))
		assertOwnedChild(t, db, s)
	}
	sts := &appsv1.StatefulSet{}
	eventually(t, "the StatefulSet", exists(ns, "drop", sts))
	if p := sts.Spec.PersistentVolumeClaimRetentionPolicy; p.WhenDeleted != appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
		t.Errorf("PVC retention policy %+v under Delete", p)
	}
	pvc := dataVolume(t, db, 0, false)
	// A PVC of the same instance name but another owner UID must survive.
	foreign := pvc.DeepCopy()
	foreign.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: "data-drop-7",
		Labels: map[string]string{databasev1alpha1.LabelInstance: "drop", databasev1alpha1.LabelManagedBy: databasev1alpha1.ManagedBy, databasev1alpha1.LabelOwnerUID: "another-uid"}}
	if err := k8s.Create(context.Background(), foreign); err != nil {
		t.Fatal(err)
	}

	deleteDB(t, db)
	eventually(t, "the data volume to be deleted", gone(ns, pvc.Name, &corev1.PersistentVolumeClaim{}))
	for _, name := range []string{"drop-credentials", "drop-replication-tls"} {
		eventually(t, name+" to be deleted", gone(ns, name, &corev1.Secret{}))
	}
	if err := get(ns, foreign.Name, &corev1.PersistentVolumeClaim{}); err != nil {
		t.Errorf("a PVC of another owner was touched: %v", err)
	}
}

func TestUserSuppliedSecret(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "byo", func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Credentials = &databasev1alpha1.CredentialsSpec{SecretName: "my-creds"}
	}))
	waitFor(t, db, "Stalled on the missing Secret", phaseIs(databasev1alpha1.PhaseStalled))
	c := condition(db, databasev1alpha1.ConditionStalled)
	if c == nil || c.Reason != databasev1alpha1.ReasonCredentialsNotFound {
		t.Fatalf("Stalled = %+v, want %s", c, databasev1alpha1.ReasonCredentialsNotFound)
	}
	for name, obj := range map[string]client.Object{
		"byo": &appsv1.StatefulSet{}, "byo-config": &corev1.ConfigMap{}, "byo-rw": &corev1.Service{},
	} {
		if err := get(ns, name, obj); !apierrors.IsNotFound(err) {
			t.Errorf("%s written while the credentials are missing (err %v)", name, err)
		}
	}

	// A Secret without a password key is refused the same way.
	bad := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "my-creds"},
		Data: map[string][]byte{"username": []byte("app")}}
	if err := k8s.Create(context.Background(), bad); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, db)
	waitFor(t, db, "Stalled on the invalid Secret", func(db *databasev1alpha1.MyDatabase) error {
		if c := condition(db, databasev1alpha1.ConditionStalled); c == nil || c.Reason != databasev1alpha1.ReasonCredentialsInvalid {
			return fmt.Errorf("Stalled = %+v", c)
		}
		return nil
	})

	bad.Data["password"] = []byte("s3cret-from-the-user")
	if err := k8s.Update(context.Background(), bad); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, db)
	sts := &appsv1.StatefulSet{}
	eventually(t, "the StatefulSet", exists(ns, "byo", sts))
	var ref string
	for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "POSTGRES_PASSWORD" {
			ref = e.ValueFrom.SecretKeyRef.Name
		}
	}
	if ref != "my-creds" {
		t.Errorf("POSTGRES_PASSWORD comes from %q, want my-creds", ref)
	}
	if err := get(ns, "byo-credentials", &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("a credentials Secret was generated although one is supplied: %v", err)
	}
	waitFor(t, db, "status", func(db *databasev1alpha1.MyDatabase) error {
		if db.Status.CredentialsSecret != "my-creds" || condition(db, databasev1alpha1.ConditionStalled) != nil {
			return fmt.Errorf("status %+v", db.Status)
		}
		return nil
	})
}

func TestLostSecretIsNeverRegenerated(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "lost"))
	secret := &corev1.Secret{}
	eventually(t, "the credentials", exists(ns, "lost-credentials", secret))
	dataVolume(t, db, 0, false)

	if err := k8s.Delete(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	waitFor(t, db, "Stalled", func(db *databasev1alpha1.MyDatabase) error {
		c := condition(db, databasev1alpha1.ConditionStalled)
		if c == nil || c.Reason != databasev1alpha1.ReasonCredentialsLost {
			return fmt.Errorf("Stalled = %+v", c)
		}
		return nil
	})
	reconcileOnce(t, db)
	if err := get(ns, "lost-credentials", &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a new password was minted for existing data: %v", err)
	}
}

func TestEditedSecretIsReportedNotOverwritten(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "tamper"))
	secret := &corev1.Secret{}
	eventually(t, "the credentials", exists(ns, "tamper-credentials", secret))
	if secret.Annotations[databasev1alpha1.AnnotationPasswordDigest] != specs.PasswordDigest(secret.Data["password"]) {
		t.Fatalf("the generated Secret does not record the digest of its password")
	}

	secret.Data["password"] = []byte("someone-typed-this")
	if err := k8s.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	waitFor(t, db, "Stalled", func(db *databasev1alpha1.MyDatabase) error {
		if c := condition(db, databasev1alpha1.ConditionStalled); c == nil || c.Reason != databasev1alpha1.ReasonCredentialsChanged {
			return fmt.Errorf("Stalled = %+v", c)
		}
		return nil
	})
	if got := secretValue(t, ns, "tamper-credentials"); got != "someone-typed-this" {
		t.Errorf("the operator rewrote the edited Secret")
	}
	eventually(t, "a warning event", func() error {
		list := &eventsv1.EventList{}
		if err := k8s.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Reason == databasev1alpha1.ReasonCredentialsChanged && e.Type == corev1.EventTypeWarning {
				if strings.Contains(e.Note, "someone-typed-this") {
					return fmt.Errorf("the event carries the password")
				}
				return nil
			}
		}
		return fmt.Errorf("no %s event among %d", databasev1alpha1.ReasonCredentialsChanged, len(list.Items))
	})

	// The user changed it in PostgreSQL too and acknowledges it.
	_ = get(ns, "tamper-credentials", secret)
	delete(secret.Annotations, databasev1alpha1.AnnotationPasswordDigest)
	if err := k8s.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	waitFor(t, db, "the Stalled condition to clear", func(db *databasev1alpha1.MyDatabase) error {
		if c := condition(db, databasev1alpha1.ConditionStalled); c != nil {
			return fmt.Errorf("Stalled = %+v", c)
		}
		return nil
	})
	_ = get(ns, "tamper-credentials", secret)
	if secret.Annotations[databasev1alpha1.AnnotationPasswordDigest] != specs.PasswordDigest([]byte("someone-typed-this")) {
		t.Errorf("the accepted password's digest was not recorded")
	}
}

// A Secret of someone else's under a name the operator would give one of
// its own (the credentials, the CA) is reported, never overwritten.
func TestForeignSecretIsNeverOverwritten(t *testing.T) {
	ns := namespace(t)
	for db, clash := range map[string]struct{ secret, remedy string }{
		"clash":    {"clash-credentials", "spec.credentials.secretName"},
		"clash-ca": {"clash-ca-ca", "spec.tls.serverCertSecret"},
	} {
		name := clash.secret
		theirs := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Data: map[string][]byte{"password": []byte("not-ours")}}
		if err := k8s.Create(context.Background(), theirs); err != nil {
			t.Fatal(err)
		}
		waitFor(t, create(t, newDB(ns, db)), "Stalled", func(db *databasev1alpha1.MyDatabase) error {
			if c := condition(db, databasev1alpha1.ConditionStalled); c == nil || c.Reason != databasev1alpha1.ReasonSecretConflict ||
				!strings.Contains(c.Message, name) || !strings.Contains(c.Message, clash.remedy) {
				return fmt.Errorf("Stalled = %+v", c)
			}
			return nil
		})
		got := &corev1.Secret{}
		if err := get(ns, name, got); err != nil || string(got.Data["password"]) != "not-ours" || len(got.Labels) != 0 {
			t.Errorf("the foreign Secret was changed: %+v (err %v)", got, err)
		}
		if err := get(ns, db, &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
			t.Errorf("StatefulSet %s written while a Secret of its clashes: %v", db, err)
		}
	}
}

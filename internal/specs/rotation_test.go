package specs

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

func TestPasswordSources(t *testing.T) {
	own := func(d *databasev1alpha1.MyDatabase) {
		d.Spec.Credentials = &databasev1alpha1.CredentialsSpec{SecretName: "mine"}
	}
	for name, tc := range map[string]struct {
		db          *databasev1alpha1.MyDatabase
		sources     string
		secretNames []string
	}{
		"generated":     {db(), "app=orders-credentials-rotation", []string{"orders-credentials-rotation"}},
		"user-supplied": {db(own), "app=mine", []string{"mine"}},
	} {
		if got := PasswordSources(tc.db); got != tc.sources {
			t.Errorf("%s: PASSWORD_SECRETS %q, want %q", name, got, tc.sources)
		}
		if diff := cmp.Diff(tc.secretNames, PasswordSecretNames(tc.db)); diff != "" {
			t.Errorf("%s: readable Secrets (-want +got):\n%s", name, diff)
		}
	}
}

// TestRotationRequests: a request is recorded in UTC seconds; a user
// request means nothing with a user-supplied Secret; a Secret created
// while a request is in the spec already fulfils it.
func TestRotationRequests(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 11, 30, 21, 0, 0, 0, time.FixedZone("CET", 3600)))
	d := db(func(d *databasev1alpha1.MyDatabase) {
		d.Spec.PasswordRotation = &databasev1alpha1.PasswordRotationSpec{UserRequestedAt: &at}
	})
	if got := UserRotationRequest(d); got != "2026-11-30T20:00:00Z" {
		t.Errorf("user request %q", got)
	}
	if got := CredentialsSecret(d, "pw").Annotations[databasev1alpha1.AnnotationRotationRequest]; got != "2026-11-30T20:00:00Z" {
		t.Errorf("a new credentials Secret records request %q", got)
	}
	d.Spec.Credentials = &databasev1alpha1.CredentialsSpec{SecretName: "mine"}
	if got := UserRotationRequest(d); got != "" {
		t.Errorf("user request %q with a user-supplied Secret", got)
	}
	if _, ok := CredentialsSecret(db(), "pw").Annotations[databasev1alpha1.AnnotationRotationRequest]; ok {
		t.Error("a Secret without a request records one")
	}
}

func TestWithPassword(t *testing.T) {
	s := CredentialsSecret(db(), "old")
	got := WithPassword(s.Data, "new")
	if string(got[SecretPasswordKey]) != "new" || string(got[SecretURIKey]) != "postgresql://app:new@orders-rw.shop.svc:5432/app?sslmode=verify-full" {
		t.Errorf("password %q, uri %q", got[SecretPasswordKey], got[SecretURIKey])
	}
	if string(s.Data[SecretPasswordKey]) != "old" {
		t.Error("WithPassword changed its input")
	}
}

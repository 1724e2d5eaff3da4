package specs

import (
	"maps"
	"net/url"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// StagingSecretName is the Secret that carries a new password of a
// generated Secret until PostgreSQL accepts it (docs/password-rotation.md).
func StagingSecretName(secret string) string { return secret + "-rotation" }

// UserRotationRequest is the spec.passwordRotation request in the form
// recorded on the Secret (AnnotationRotationRequest), "" when none.
func UserRotationRequest(db *databasev1alpha1.MyDatabase) string {
	if db.Spec.PasswordRotation == nil || UserSuppliedCredentials(db) {
		return ""
	}
	return formatRequest(db.Spec.PasswordRotation.UserRequestedAt)
}

func formatRequest(t *metav1.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// StagingSecret carries the new password of role for the Secret named
// target, and the request it fulfils. The instance managers read it (never
// the operator's cache of it), the primary's sets it in PostgreSQL, and the
// operator copies it into target only once every ready instance reports
// that its server accepts it. It has the owners of the Secret it feeds, so
// that under Retain a rotation cut short by a deletion is finished by the
// next MyDatabase of the same name.
func StagingSecret(db *databasev1alpha1.MyDatabase, target, role, password, request string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      StagingSecretName(target),
			Namespace: db.Namespace,
			Labels:    Labels(db, ComponentCredentials),
			Annotations: map[string]string{
				databasev1alpha1.AnnotationRole:            role,
				databasev1alpha1.AnnotationRotationRequest: request,
			},
			OwnerReferences: SecretOwnerReferences(db),
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{SecretPasswordKey: []byte(password)},
	}
}

// WithPassword is the generated Secret's data with password in place of
// the old one: the password key, and the URI's password for the
// credentials Secret.
func WithPassword(data map[string][]byte, password string) map[string][]byte {
	out := make(map[string][]byte, len(data))
	maps.Copy(out, data)
	out[SecretPasswordKey] = []byte(password)
	if raw, ok := data[SecretURIKey]; ok {
		if u, err := url.Parse(string(raw)); err == nil && u.User != nil {
			u.User = url.UserPassword(u.User.Username(), password)
			out[SecretURIKey] = []byte(u.String())
		}
	}
	return out
}

// PasswordSources is the environment variable PASSWORD_SECRETS of the
// database container: role=Secret pairs, the Secrets whose password the
// instance manager of the primary sets on the role whenever they exist and
// PostgreSQL does not accept it yet. For a generated Secret that is its
// staging Secret; for a user-supplied one the Secret itself. The
// application's role is the only one with a password.
func PasswordSources(db *databasev1alpha1.MyDatabase) string {
	return db.Spec.User + "=" + passwordSource(db)
}

// PasswordSecretNames are the Secrets an instance manager may read: the
// sources above, the declared roles' (RolePasswordSecretName) and the
// declared subscriptions' (SubscriptionSecretName).
func PasswordSecretNames(db *databasev1alpha1.MyDatabase) []string {
	names := []string{passwordSource(db)}
	add := func(name string) {
		if name != "" && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	for _, r := range DeclaredRoles(db) {
		add(RolePasswordSecretName(db, r))
	}
	for _, d := range db.Spec.Databases {
		for _, s := range d.Subscriptions {
			add(SubscriptionSecretName(s)) // absent too: its drop connects
		}
	}
	return names
}

func passwordSource(db *databasev1alpha1.MyDatabase) string {
	if UserSuppliedCredentials(db) {
		return db.Spec.Credentials.SecretName
	}
	return StagingSecretName(GeneratedCredentialsSecretName(db))
}

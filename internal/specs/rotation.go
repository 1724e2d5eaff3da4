package specs

import (
	"maps"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// ReplicationRole is the PostgreSQL role the replicas stream as.
const ReplicationRole = "replicator"

// StagingSecretName is the Secret that carries a new password of a
// generated Secret until PostgreSQL accepts it (docs/password-rotation.md).
func StagingSecretName(secret string) string { return secret + "-rotation" }

// UserRotationRequest and ReplicationRotationRequest are the
// spec.passwordRotation requests in the form recorded on the Secrets
// (AnnotationRotationRequest), "" when none.
func UserRotationRequest(db *databasev1alpha1.MyDatabase) string {
	if db.Spec.PasswordRotation == nil || UserSuppliedCredentials(db) {
		return ""
	}
	return formatRequest(db.Spec.PasswordRotation.UserRequestedAt)
}

func ReplicationRotationRequest(db *databasev1alpha1.MyDatabase) string {
	if db.Spec.PasswordRotation == nil {
		return ""
	}
	return formatRequest(db.Spec.PasswordRotation.ReplicationRequestedAt)
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
// staging Secret; for a user-supplied one the Secret itself.
func PasswordSources(db *databasev1alpha1.MyDatabase) string {
	user := StagingSecretName(GeneratedCredentialsSecretName(db))
	if UserSuppliedCredentials(db) {
		user = db.Spec.Credentials.SecretName
	}
	return strings.Join([]string{
		db.Spec.User + "=" + user,
		ReplicationRole + "=" + StagingSecretName(ReplicationSecretName(db)),
	}, ",")
}

// PasswordSecretNames are the Secrets an instance manager may read: the
// sources above and the replication Secret (a replica's password file).
func PasswordSecretNames(db *databasev1alpha1.MyDatabase) []string {
	user := StagingSecretName(GeneratedCredentialsSecretName(db))
	if UserSuppliedCredentials(db) {
		user = db.Spec.Credentials.SecretName
	}
	return []string{user, ReplicationSecretName(db), StagingSecretName(ReplicationSecretName(db))}
}

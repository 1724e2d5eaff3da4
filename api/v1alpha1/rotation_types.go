package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// PasswordRotationSpec asks for new passwords. Each field is a request:
// setting it to a new value (the current time, by convention) asks for one
// new password of that role; the value is recorded on the Secret that
// receives the password, so a request is carried out once, whatever
// happens in between. The new password is set in PostgreSQL before the
// Secret changes (docs/password-rotation.md).
type PasswordRotationSpec struct {
	// userRequestedAt asks for a new password of spec.user in the generated
	// credentials Secret. Not allowed with spec.credentials.secretName:
	// change the password in that Secret instead, and the operator sets it
	// in PostgreSQL.
	// +optional
	UserRequestedAt *metav1.Time `json:"userRequestedAt,omitempty"`
}

// PasswordStatus is where the password of one role stands.
type PasswordStatus struct {
	// role is the PostgreSQL role: spec.user.
	Role string `json:"role"`

	// secret holds the password clients (or the servers) read.
	Secret string `json:"secret"`

	// lastRotationTime is when the Secret last received a new password
	// through a rotation; absent when it still holds its first.
	// +optional
	LastRotationTime *metav1.Time `json:"lastRotationTime,omitempty"`

	// rotating says what a rotation under way waits for; absent when none is.
	// +optional
	Rotating string `json:"rotating,omitempty"`
}

// Rotation reasons and keys.
const (
	// ReasonRotatingPassword: a new password is being set in PostgreSQL,
	// after which the Secret receives it.
	ReasonRotatingPassword = "RotatingPassword"
	// ReasonPasswordNotApplied: the password of a user-supplied Secret
	// cannot be applied as it is (see the message).
	ReasonPasswordNotApplied = "PasswordNotApplied"

	// AnnotationRotationRequest on a password Secret (the generated one and
	// its staging Secret) is the spec.passwordRotation value it fulfils.
	AnnotationRotationRequest = "database.example.com/rotation-request"
	// AnnotationRotatedAt on a generated Secret is when it last received a
	// rotated password.
	AnnotationRotatedAt = "database.example.com/rotated-at"
	// AnnotationRole on a staging Secret names the role whose password it
	// carries.
	AnnotationRole = "database.example.com/role"
)

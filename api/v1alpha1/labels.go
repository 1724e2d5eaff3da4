package v1alpha1

// The label, annotation and finalizer keys users see on a MyDatabase and its
// children. They are part of the API: selectors, policies and dashboards are
// written against them, so they change only with a new API version.
const (
	// Finalizer runs the deletion policy before a MyDatabase goes away.
	Finalizer = "database.example.com/finalizer"

	// The Kubernetes recommended labels, on every child.
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelComponent = "app.kubernetes.io/component"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedBy is the value of app.kubernetes.io/managed-by on every child;
	// the operator's cache only holds objects with this label.
	ManagedBy = "myoperator"

	// LabelOwnerUID carries the UID of the MyDatabase that owns the object.
	// Cleanup selects by it, never by name alone, so a new MyDatabase of the
	// same name never loses what belongs to it.
	LabelOwnerUID = "database.example.com/owner-uid"
	// LabelRole is on each pod: RolePrimary on the holder of the
	// MyDatabase's primary Lease, RoleReplica on the others. The instance
	// manager sets it on its own pod when its role changes, the operator on
	// every pod; both read the Lease. The read-write and read-only Services
	// select by it.
	LabelRole   = "database.example.com/role"
	RolePrimary = "primary"
	RoleReplica = "replica"

	// AnnotationSpecHash is the hash of the applied configuration of a child;
	// the operator skips the write when it and the live object agree.
	AnnotationSpecHash = "database.example.com/spec-hash"
	// AnnotationConfigHash on the pod template rolls the pods when the
	// PostgreSQL configuration changes.
	AnnotationConfigHash = "database.example.com/config-hash"
	// AnnotationPoolerConfig on a pooler's pod (never its template) is the
	// hash of the configuration in the pooler's ConfigMap. The operator
	// sets it when the configuration changes: a change of the pod makes
	// the kubelet refresh the ConfigMap's volume at once, where it would
	// otherwise wait for its periodic sync (a minute or more).
	AnnotationPoolerConfig = "database.example.com/pooler-config"
	// AnnotationPasswordDigest on a generated Secret is the SHA-256 of the
	// password it was created with. A password of 190 random bits cannot be
	// recovered from it; it lets the operator notice an edited Secret.
	// Removing it accepts the Secret's current password.
	AnnotationPasswordDigest = "database.example.com/password-digest"
	// AnnotationCertificateSeal on a certificate Secret the operator
	// issued vouches for its last check, so that a restarted operator need
	// not parse and verify the certificate again (internal/pki.Seal).
	// Removing or editing it costs one check and a rewrite.
	AnnotationCertificateSeal = "database.example.com/certificate-seal"
	// AnnotationPodTemplate on the servers' pod template (and so on every
	// pod) is the digest of that template but the instance manager's
	// image: when a new operator finds it unchanged, the template keeps the
	// image the pods were made from, and the instance managers are
	// replaced in place (spec.instanceManagerUpdate).
	AnnotationPodTemplate = "database.example.com/pod-template"
)

package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// RoleSpec is a PostgreSQL role the primary's instance manager keeps as
// declared: created when missing, altered when it differs, its
// memberships granted and revoked to match inRoles, dropped only when
// ensure is absent. A role that exists but is not declared is left alone;
// removing an entry from spec.roles drops nothing.
// +kubebuilder:validation:XValidation:rule="!self.name.startsWith('pg_')",message="role names starting with pg_ are reserved by PostgreSQL"
// +kubebuilder:validation:XValidation:rule="!(self.name in ['postgres', 'replicator', 'public', 'none']) && !self.name.startsWith('mydatabase_')",message="postgres, replicator, public, none and the names starting with mydatabase_ are the operator's or PostgreSQL's own roles"
// +kubebuilder:validation:XValidation:rule="!has(self.superuser) || !self.superuser",message="superuser roles are not managed: a superuser can switch off the fence (synchronous_commit) and read every file; connect as postgres through kubectl exec for administration"
// +kubebuilder:validation:XValidation:rule="!has(self.replication) || !self.replication",message="replication roles are not managed: replication authenticates with the operator's client certificates (spec.tls), not passwords"
// +kubebuilder:validation:XValidation:rule="!has(self.inRoles) || !(self.name in self.inRoles)",message="a role cannot be a member of itself"
// +kubebuilder:validation:XValidation:rule="!has(self.inRoles) || self.inRoles.all(r, !(r in ['postgres', 'replicator']) && !r.startsWith('mydatabase_'))",message="inRoles may not name postgres, replicator or a role starting with mydatabase_: a member could SET ROLE to them and hold their powers"
// +kubebuilder:validation:XValidation:rule="self.ensure != 'absent' || !has(self.passwordSecret)",message="passwordSecret with ensure: absent: a role being dropped has no password"
type RoleSpec struct {
	// name is the role's name in PostgreSQL.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	Name string `json:"name"`

	// ensure is present (default): the role exists as declared; or
	// absent: the role is dropped (refused, and reported, while it owns
	// objects).
	// +kubebuilder:default=present
	// +optional
	Ensure Ensure `json:"ensure,omitempty"`

	// login lets the role connect. Default true.
	// +kubebuilder:default=true
	// +optional
	Login *bool `json:"login,omitempty"`

	// createdb lets the role create databases.
	// +optional
	CreateDB bool `json:"createdb,omitempty"`

	// createrole lets the role create, alter and drop other roles.
	// +optional
	CreateRole bool `json:"createrole,omitempty"`

	// inherit makes the role use the privileges of the roles it is a
	// member of without SET ROLE. Default true.
	// +kubebuilder:default=true
	// +optional
	Inherit *bool `json:"inherit,omitempty"`

	// connectionLimit is how many connections the role may hold at once;
	// -1 (default) for no limit.
	// +kubebuilder:default=-1
	// +kubebuilder:validation:Minimum=-1
	// +optional
	ConnectionLimit *int32 `json:"connectionLimit,omitempty"`

	// validUntil is when the role's password stops being accepted; absent
	// for never.
	// +optional
	ValidUntil *metav1.Time `json:"validUntil,omitempty"`

	// inRoles are the roles this one is a member of. Memberships granted
	// by the operator and no longer listed are revoked.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z_][a-z0-9_]*$`
	// +listType=set
	// +optional
	InRoles []string `json:"inRoles,omitempty"`

	// comment is the role's COMMENT.
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.contains('\\u0000')",message="comment must not hold a NUL character: PostgreSQL's text cannot"
	// +optional
	Comment string `json:"comment,omitempty"`

	// passwordSecret names a Secret in the MyDatabase's namespace whose
	// "password" key is the role's password; the instance manager sets
	// it (as a SCRAM-SHA-256 verifier computed in the pod) and sets it
	// again whenever the Secret changes. Absent with login: the operator
	// generates <mydatabase>-role-<name> once and never regenerates it.
	// +optional
	PasswordSecret *SecretReference `json:"passwordSecret,omitempty"`

	// superuser is refused: see the rule above.
	// +optional
	Superuser *bool `json:"superuser,omitempty"`

	// replication is refused: see the rule above.
	// +optional
	Replication *bool `json:"replication,omitempty"`
}

// SecretReference names a Secret in the MyDatabase's namespace.
type SecretReference struct {
	// name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// Ensure says whether a declared object must exist.
// +kubebuilder:validation:Enum=present;absent
type Ensure string

// The values of Ensure.
const (
	EnsurePresent Ensure = "present"
	EnsureAbsent  Ensure = "absent"
)

// ConditionRolesApplied is True once the primary has applied every
// declared role (spec.roles) as it is now declared, False with the roles
// it could not apply and why, or while it has not yet; absent without
// spec.roles. No effect on Ready: the database serves either way.
const ConditionRolesApplied = "RolesApplied"

// The reasons of ConditionRolesApplied.
const (
	ReasonRolesApplied   = "RolesApplied"
	ReasonRoleNotApplied = "RoleNotApplied"
	ReasonRolesPending   = "RolesPending"
)

// RoleStatus is where one declared role stands.
type RoleStatus struct {
	// name of the role.
	Name string `json:"name"`

	// applied is true when the primary's role matches the declaration.
	Applied bool `json:"applied"`

	// message is PostgreSQL's error, in plain words, when it does not.
	// +optional
	Message string `json:"message,omitempty"`

	// passwordSecret is the Secret the role's password comes from.
	// +optional
	PasswordSecret string `json:"passwordSecret,omitempty"`
}

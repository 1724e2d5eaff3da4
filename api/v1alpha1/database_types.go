package v1alpha1

// DatabaseSpec is a PostgreSQL database the primary's instance manager
// keeps as declared: created when missing (encoding, locale and template
// apply then), its owner and comment kept, its extensions kept, dropped
// only when ensure is absent. A database that exists but is not declared
// is left alone; removing an entry from spec.databases drops nothing.
// +kubebuilder:validation:XValidation:rule="!(self.name in ['postgres', 'template0', 'template1'])",message="postgres, template0 and template1 are PostgreSQL's own databases"
// +kubebuilder:validation:XValidation:rule="has(self.encoding) == has(oldSelf.encoding) && (!has(self.encoding) || self.encoding == oldSelf.encoding)",message="encoding applies when the database is created and cannot change"
// +kubebuilder:validation:XValidation:rule="has(self.locale) == has(oldSelf.locale) && (!has(self.locale) || self.locale == oldSelf.locale)",message="locale applies when the database is created and cannot change"
// +kubebuilder:validation:XValidation:rule="has(self.template) == has(oldSelf.template) && (!has(self.template) || self.template == oldSelf.template)",message="template applies when the database is created and cannot change"
// +kubebuilder:validation:XValidation:rule="self.ensure != 'absent' || !has(self.extensions) || self.extensions.all(e, e.ensure == 'absent')",message="a database with ensure: absent is dropped with its extensions: declare none present"
// +kubebuilder:validation:XValidation:rule="self.ensure != 'absent' || !has(self.publications) || self.publications.all(p, p.ensure == 'absent')",message="a database with ensure: absent is dropped with its publications: declare none present"
// +kubebuilder:validation:XValidation:rule="self.ensure != 'absent' || !has(self.subscriptions) || self.subscriptions.all(s, s.ensure == 'absent')",message="a database with ensure: absent is dropped with its subscriptions: declare none present"
type DatabaseSpec struct {
	// name is the database's name in PostgreSQL.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	Name string `json:"name"`

	// ensure is present (default): the database exists as declared; or
	// absent: it is dropped (refused, and reported, while anyone is
	// connected to it).
	// +kubebuilder:default=present
	// +optional
	Ensure Ensure `json:"ensure,omitempty"`

	// owner is the role that owns the database: spec.user (default) or a
	// role declared present in spec.roles.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	// +optional
	Owner string `json:"owner,omitempty"`

	// encoding of a new database, such as UTF8; the server's default
	// (UTF8) if absent.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_]+$`
	// +optional
	Encoding string `json:"encoding,omitempty"`

	// locale of a new database (LC_COLLATE and LC_CTYPE), such as C or
	// en_US.UTF-8; the server's default if absent.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.@-]+$`
	// +optional
	Locale string `json:"locale,omitempty"`

	// template a new database is copied from; template1 if absent.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	// +optional
	Template string `json:"template,omitempty"`

	// comment is the database's COMMENT.
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.contains('\\u0000')",message="comment must not hold a NUL character: PostgreSQL's text cannot"
	// +optional
	Comment string `json:"comment,omitempty"`

	// extensions are kept in the database as declared: created when
	// missing, updated to version, moved to schema, dropped only when
	// ensure is absent (refused, and reported, while objects depend on
	// them). One the image does not hold is reported on its own; the
	// rest are applied.
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	// +optional
	Extensions []ExtensionSpec `json:"extensions,omitempty"`

	// publications are kept in the database as declared (logical
	// replication; they need spec.replication.logical): created when
	// missing, their tables set to those listed, dropped only when
	// ensure is absent.
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=name
	// +optional
	Publications []PublicationSpec `json:"publications,omitempty"`

	// subscriptions are kept in the database as declared (logical
	// replication into it from a publication of another MyDatabase, or
	// of any PostgreSQL server): created when missing, their
	// publications, connection and enabled state kept, dropped only when
	// ensure is absent.
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	// +optional
	Subscriptions []SubscriptionSpec `json:"subscriptions,omitempty"`
}

// SubscriptionSpec is a PostgreSQL subscription of a declared database.
// Its replication slot on the publisher is named after it.
// +kubebuilder:validation:XValidation:rule="self.ensure == 'absent' || (has(self.publications) && size(self.publications) > 0)",message="a subscription names the publications it receives"
// +kubebuilder:validation:XValidation:rule="has(self.source.myDatabase) != has(self.source.secretName)",message="a subscription's source is a MyDatabase (source.myDatabase) or a Secret (source.secretName), one of the two"
// +kubebuilder:validation:XValidation:rule="self.failover == oldSelf.failover",message="failover applies when the subscription is created and cannot change; declare it absent, then again"
type SubscriptionSpec struct {
	// name of the subscription, and of its slot on the publisher.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	Name string `json:"name"`

	// ensure is present (default) or absent (dropped, with its slot on
	// the publisher, which must be reachable then; a slot the publisher
	// lost, before PostgreSQL 17 at every failover, is not waited for).
	// +kubebuilder:default=present
	// +optional
	Ensure Ensure `json:"ensure,omitempty"`

	// publications received, by their names on the publisher.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z_][a-z0-9_]*$`
	// +listType=set
	// +optional
	Publications []string `json:"publications,omitempty"`

	// source is the publisher.
	Source SubscriptionSource `json:"source"`

	// enabled: the subscription receives changes (default); false stops
	// it and keeps its place.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// copyData: a new subscription first copies the tables' rows that
	// exist (default); applies at creation.
	// +kubebuilder:default=true
	// +optional
	CopyData *bool `json:"copyData,omitempty"`

	// failover (default true) makes the subscription's slot on the
	// publisher a failover slot (PostgreSQL 17 on both sides): a
	// publisher that is a MyDatabase with replicas keeps it on them, and
	// the subscription continues on its new primary after a failover or a
	// switchover. Ignored when this server runs PostgreSQL before 17; set
	// it false for a publisher before 17. Applies at creation.
	// +kubebuilder:default=true
	// +optional
	Failover *bool `json:"failover,omitempty"`
}

// SubscriptionSource is the publisher of a subscription: another
// MyDatabase, or a Secret with a connection.
type SubscriptionSource struct {
	// myDatabase is a MyDatabase in this namespace with
	// spec.replication.logical: the subscription connects to its primary
	// (its -rw Service) as its operator role mydatabase_logical, with the
	// password and CA of that role's Secret (<name>-role-mydatabase-logical),
	// verify-full.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	MyDatabase string `json:"myDatabase,omitempty"`

	// secretName is a Secret in this namespace with the key uri (a
	// postgresql:// URI of the publisher: host, port, user, database,
	// sslmode) and, optionally, password (else the URI's) and ca.crt (the
	// CA that verifies the publisher), as the Secrets the operator
	// generates for roles have them. The password never enters
	// PostgreSQL's catalog: the subscription reads it from a file the
	// instance manager writes.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +optional
	SecretName string `json:"secretName,omitempty"`

	// database on the publisher: by default the one the source names (a
	// MyDatabase's spec.databaseName, the path of the Secret's uri).
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	// +optional
	Database string `json:"database,omitempty"`
}

// PublicationSpec is a PostgreSQL publication of a declared database:
// what logical replication sends of it.
// +kubebuilder:validation:XValidation:rule="self.ensure == 'absent' || (has(self.allTables) && self.allTables) != (has(self.tables) && size(self.tables) > 0)",message="a publication lists its tables or sets allTables, one of the two"
type PublicationSpec struct {
	// name of the publication.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	Name string `json:"name"`

	// ensure is present (default) or absent (dropped).
	// +kubebuilder:default=present
	// +optional
	Ensure Ensure `json:"ensure,omitempty"`

	// allTables publishes every table of the database, those made later
	// too.
	// +optional
	AllTables bool `json:"allTables,omitempty"`

	// tables published, as table or schema.table (public when no schema
	// is given), each name at most 63 characters; a table that does not
	// exist yet is reported, and added once it does.
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=127
	// +kubebuilder:validation:items:Pattern=`^([a-z_][a-z0-9_]{0,62}\.)?[a-z_][a-z0-9_]{0,62}$`
	// +listType=set
	// +optional
	Tables []string `json:"tables,omitempty"`
}

// ExtensionSpec is a PostgreSQL extension of a declared database.
type ExtensionSpec struct {
	// name of the extension, as pg_available_extensions lists it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_-]*$`
	Name string `json:"name"`

	// ensure is present (default) or absent (dropped).
	// +kubebuilder:default=present
	// +optional
	Ensure Ensure `json:"ensure,omitempty"`

	// version to create or update to; the extension's default version
	// when created, and left as it is afterwards, if absent.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.-]+$`
	// +optional
	Version string `json:"version,omitempty"`

	// schema the extension's objects live in; the database's first schema
	// on the search path when created, and left as it is afterwards, if
	// absent.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	// +optional
	Schema string `json:"schema,omitempty"`
}

// ConditionDatabasesApplied is True once the primary has applied every
// declared database, extension, publication and subscription
// (spec.databases) as it is now declared,
// False with those it could not apply and why, or while it has not yet;
// absent without spec.databases. No effect on Ready.
const ConditionDatabasesApplied = "DatabasesApplied"

// The reasons of ConditionDatabasesApplied.
const (
	ReasonDatabasesApplied   = "DatabasesApplied"
	ReasonDatabaseNotApplied = "DatabaseNotApplied"
	ReasonDatabasesPending   = "DatabasesPending"
)

// DatabaseStatus is where one declared database stands.
type DatabaseStatus struct {
	// name of the database.
	Name string `json:"name"`

	// applied is true when the primary's database matches the
	// declaration (its extensions aside).
	Applied bool `json:"applied"`

	// message is PostgreSQL's error, in plain words, when it does not.
	// +optional
	Message string `json:"message,omitempty"`

	// extensions is where each declared extension stands.
	// +listType=map
	// +listMapKey=name
	// +optional
	Extensions []ItemStatus `json:"extensions,omitempty"`

	// publications is where each declared publication stands.
	// +listType=map
	// +listMapKey=name
	// +optional
	Publications []ItemStatus `json:"publications,omitempty"`

	// subscriptions is where each declared subscription stands.
	// +listType=map
	// +listMapKey=name
	// +optional
	Subscriptions []ItemStatus `json:"subscriptions,omitempty"`
}

// ItemStatus is where one declared extension, publication or
// subscription stands.
type ItemStatus struct {
	// name of the extension, publication or subscription.
	Name string `json:"name"`

	// applied is true when it is as declared.
	Applied bool `json:"applied"`

	// message says why it is not.
	// +optional
	Message string `json:"message,omitempty"`
}

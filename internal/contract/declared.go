package contract

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// AnnotationDeclared on the primary Lease is what the MyDatabase declares
// inside PostgreSQL (Declared, JSON: spec.roles and spec.databases), which
// the primary's instance manager applies: there, as for the quorum, a
// change reaches it without a pod restart, and a new primary applies it
// after a failover. It holds no password, only the names of the Secrets
// that hold them.
const AnnotationDeclared = "database.example.com/declared"

// LogicalRole is the operator's role for logical replication
// (spec.replication.logical): it logs in, may replicate, and reads every
// table; the primary lets it connect to each database with a publication.
const LogicalRole = "mydatabase_logical"

// Declared is the value of AnnotationDeclared.
type Declared struct {
	Roles     []Role     `json:"roles,omitempty"`
	Databases []Database `json:"databases,omitempty"`
	// Pooler is set while a MyDatabasePooler leads to this MyDatabase:
	// the primary keeps PoolerRole and PoolerLookup in every database.
	Pooler bool `json:"pooler,omitempty"`
}

// Role is a declared role as the instance manager applies it
// (spec.roles[] with its defaults resolved).
type Role struct {
	Name   string `json:"name"`
	Absent bool   `json:"absent,omitempty"`

	Login      bool `json:"login,omitempty"`
	CreateDB   bool `json:"createdb,omitempty"`
	CreateRole bool `json:"createrole,omitempty"`
	// Replication is for the operator's own role, mydatabase_logical:
	// spec.roles refuses it.
	Replication     bool       `json:"replication,omitempty"`
	Inherit         bool       `json:"inherit,omitempty"`
	ConnectionLimit int32      `json:"connectionLimit"`
	ValidUntil      *time.Time `json:"validUntil,omitempty"`
	InRoles         []string   `json:"inRoles,omitempty"`
	Comment         string     `json:"comment,omitempty"`
	// PasswordSecret names the Secret whose "password" key is the role's
	// password; "" for none.
	PasswordSecret string `json:"passwordSecret,omitempty"`
}

// Database is a declared database as the instance manager applies it
// (spec.databases[] with its defaults resolved: Owner is always set).
type Database struct {
	Name   string `json:"name"`
	Absent bool   `json:"absent,omitempty"`
	Owner  string `json:"owner,omitempty"`
	// Encoding, Locale and Template apply when the database is created;
	// "" for the server's default.
	Encoding      string         `json:"encoding,omitempty"`
	Locale        string         `json:"locale,omitempty"`
	Template      string         `json:"template,omitempty"`
	Comment       string         `json:"comment,omitempty"`
	Extensions    []Extension    `json:"extensions,omitempty"`
	Publications  []Publication  `json:"publications,omitempty"`
	Subscriptions []Subscription `json:"subscriptions,omitempty"`
}

// Subscription is a declared subscription of a database.
type Subscription struct {
	Name         string   `json:"name"`
	Absent       bool     `json:"absent,omitempty"`
	Publications []string `json:"publications,omitempty"`
	// Secret names the Secret of the publisher's connection: the keys
	// SubscriptionURIKey and, optionally, SubscriptionPasswordKey and
	// SubscriptionCAKey.
	Secret string `json:"secret,omitempty"`
	// Database on the publisher; "" for the URI's.
	Database string `json:"database,omitempty"`
	Enabled  bool   `json:"enabled,omitempty"`
	CopyData bool   `json:"copyData,omitempty"`
	Failover bool   `json:"failover,omitempty"`
}

// The keys of a subscription's Secret (Subscription.Secret), as the
// Secrets the operator generates for roles have them.
const (
	SubscriptionURIKey      = "uri"
	SubscriptionPasswordKey = "password"
	SubscriptionCAKey       = "ca.crt"
)

// Publication is a declared publication of a database: AllTables, or
// Tables (schema.table, or table in public).
type Publication struct {
	Name      string   `json:"name"`
	Absent    bool     `json:"absent,omitempty"`
	AllTables bool     `json:"allTables,omitempty"`
	Tables    []string `json:"tables,omitempty"`
}

// Extension is a declared extension of a database.
type Extension struct {
	Name   string `json:"name"`
	Absent bool   `json:"absent,omitempty"`
	// Version and Schema are "" for the extension's default.
	Version string `json:"version,omitempty"`
	Schema  string `json:"schema,omitempty"`
}

// The keys of a report's Declared outcome.

// RoleKey is a declared role's.
func RoleKey(name string) string { return "role/" + name }

// PoolerKey is the poolers' lookup's (Declared.Pooler).
const PoolerKey = "pooler"

// DatabaseKey is a declared database's.
func DatabaseKey(name string) string { return "database/" + name }

// ExtensionKey is a declared extension's, in its database.
func ExtensionKey(database, name string) string { return "database/" + database + "/extension/" + name }

// PublicationKey is a declared publication's, in its database.
func PublicationKey(database, name string) string {
	return "database/" + database + "/publication/" + name
}

// SubscriptionKey is a declared subscription's, in its database.
func SubscriptionKey(database, name string) string {
	return "database/" + database + "/subscription/" + name
}

func (d Declared) String() string {
	b, _ := json.Marshal(d) // Declared always marshals
	return string(b)
}

// DeclaredDigest names a declaration (the annotation's value) in a
// report: what the outcome there is of.
func DeclaredDigest(annotation string) string {
	sum := sha256.Sum256([]byte(annotation))
	return hex.EncodeToString(sum[:8])
}

// ParseDeclared reads AnnotationDeclared; an empty value declares
// nothing, and one it refuses reads as the zero Declared.
func ParseDeclared(s string) (Declared, error) {
	var d Declared
	if s == "" {
		return d, nil
	}
	if err := json.Unmarshal([]byte(s), &d); err != nil {
		return Declared{}, fmt.Errorf("the Lease's %s annotation: %w", AnnotationDeclared, err)
	}
	return d, nil
}

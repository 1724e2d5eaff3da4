package specs

import (
	"cmp"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
)

// ComponentRole labels the Secrets the operator generates for declared
// roles (spec.roles).
const ComponentRole = "role"

// RolePasswordSecretName is the Secret a declared role's password comes
// from: its passwordSecret, or the one the operator generates for a role
// that logs in, <mydatabase>-role-<name> (a role name's underscores, which
// a Secret name cannot hold, as dashes: role names hold no dash, so two
// roles never share one); "" for none.
func RolePasswordSecretName(db *databasev1alpha1.MyDatabase, r databasev1alpha1.RoleSpec) string {
	switch {
	case r.Ensure == databasev1alpha1.EnsureAbsent:
		return ""
	case r.PasswordSecret != nil:
		return r.PasswordSecret.Name
	case ptr.Deref(r.Login, true):
		return GeneratedRoleSecretName(db, r.Name)
	}
	return ""
}

// LogicalRole is the operator's role for logical replication.
const LogicalRole = contract.LogicalRole

// DeclaredRoles are the roles the primary keeps: spec.roles, and with
// spec.replication.logical the operator's LogicalRole (whose attributes
// spec.roles refuses).
func DeclaredRoles(db *databasev1alpha1.MyDatabase) []databasev1alpha1.RoleSpec {
	if !db.Spec.Replication.Logical {
		return db.Spec.Roles
	}
	return append(slices.Clone(db.Spec.Roles), databasev1alpha1.RoleSpec{Name: LogicalRole, Replication: ptr.To(true),
		InRoles: []string{"pg_read_all_data"}, Comment: "the MyDatabase operator's role for logical replication (spec.replication.logical)"})
}

// GeneratedRoleSecretName is the Secret the operator generates for role.
func GeneratedRoleSecretName(db *databasev1alpha1.MyDatabase, role string) string {
	return generatedRoleSecretName(db.Name, role)
}

func generatedRoleSecretName(mydatabase, role string) string {
	return mydatabase + "-role-" + strings.ReplaceAll(role, "_", "-")
}

// SubscriptionSecretName is the Secret a subscription connects with: its
// source's secretName, or the LogicalRole Secret of its source MyDatabase.
func SubscriptionSecretName(s databasev1alpha1.SubscriptionSpec) string {
	if s.Source.MyDatabase != "" {
		return generatedRoleSecretName(s.Source.MyDatabase, LogicalRole)
	}
	return s.Source.SecretName
}

// GeneratedRoles are the declared roles whose Secret the operator
// generates.
func GeneratedRoles(db *databasev1alpha1.MyDatabase) []databasev1alpha1.RoleSpec {
	var out []databasev1alpha1.RoleSpec
	for _, r := range DeclaredRoles(db) {
		if RolePasswordSecretName(db, r) == GeneratedRoleSecretName(db, r.Name) {
			out = append(out, r)
		}
	}
	return out
}

// DeclaredOf is spec.roles and spec.databases as the primary's instance
// manager applies them (contract.AnnotationDeclared on the Lease), the
// defaults resolved, and whether a MyDatabasePooler leads to db (pooled);
// nil when there is none of these.
func DeclaredOf(db *databasev1alpha1.MyDatabase, pooled bool) *contract.Declared {
	roles := DeclaredRoles(db)
	if len(roles) == 0 && len(db.Spec.Databases) == 0 && !pooled {
		return nil
	}
	d := &contract.Declared{Pooler: pooled}
	for _, r := range roles {
		c := contract.Role{Name: r.Name, Absent: r.Ensure == databasev1alpha1.EnsureAbsent,
			Login: ptr.Deref(r.Login, true), CreateDB: r.CreateDB, CreateRole: r.CreateRole, Replication: ptr.Deref(r.Replication, false),
			Inherit:         ptr.Deref(r.Inherit, true),
			ConnectionLimit: ptr.Deref(r.ConnectionLimit, -1), InRoles: r.InRoles, Comment: r.Comment,
			PasswordSecret: RolePasswordSecretName(db, r)}
		if r.ValidUntil != nil {
			c.ValidUntil = ptr.To(r.ValidUntil.UTC())
		}
		d.Roles = append(d.Roles, c)
	}
	for _, s := range db.Spec.Databases {
		c := contract.Database{Name: s.Name, Absent: s.Ensure == databasev1alpha1.EnsureAbsent, Owner: cmp.Or(s.Owner, db.Spec.User),
			Encoding: s.Encoding, Locale: s.Locale, Template: s.Template, Comment: s.Comment}
		for _, e := range s.Extensions {
			c.Extensions = append(c.Extensions, contract.Extension{Name: e.Name, Absent: e.Ensure == databasev1alpha1.EnsureAbsent,
				Version: e.Version, Schema: e.Schema})
		}
		for _, p := range s.Publications {
			c.Publications = append(c.Publications, contract.Publication{Name: p.Name, Absent: p.Ensure == databasev1alpha1.EnsureAbsent,
				AllTables: p.AllTables, Tables: p.Tables})
		}
		for _, sub := range s.Subscriptions {
			c.Subscriptions = append(c.Subscriptions, contract.Subscription{Name: sub.Name, Absent: sub.Ensure == databasev1alpha1.EnsureAbsent,
				Publications: sub.Publications, Secret: SubscriptionSecretName(sub), Database: sub.Source.Database,
				Enabled: ptr.Deref(sub.Enabled, true), CopyData: ptr.Deref(sub.CopyData, true), Failover: ptr.Deref(sub.Failover, true)})
		}
		d.Databases = append(d.Databases, c)
	}
	return d
}

// RoleSecret is the generated Secret of a declared role: its name,
// password, a connection URI to the primary's database
// (spec.databaseName) and the CA that verifies the servers, as the
// credentials Secret has them.
func RoleSecret(db *databasev1alpha1.MyDatabase, role, password string, caCert []byte) *corev1.Secret {
	uri := url.URL{
		Scheme:   "postgresql",
		User:     url.UserPassword(role, password),
		Host:     net.JoinHostPort(ReadWriteHost(db), strconv.Itoa(int(ServicePort(db)))),
		Path:     "/" + db.Spec.DatabaseName,
		RawQuery: "sslmode=verify-full",
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:            GeneratedRoleSecretName(db, role),
			Namespace:       db.Namespace,
			Labels:          Labels(db, ComponentRole),
			OwnerReferences: SecretOwnerReferences(db),
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{SecretUsernameKey: []byte(role), SecretPasswordKey: []byte(password), SecretURIKey: []byte(uri.String()),
			CACertKey: caCert},
	}
}

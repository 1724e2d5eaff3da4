package mydatabase

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
)

// TestDeclaredRoles: the operator's part of spec.roles and
// spec.databases. The declaration goes on the Lease, the instance managers
// may read the roles' Secrets, a role that logs in without a
// passwordSecret gets a generated Secret (once), and status.roles,
// status.databases, RolesApplied and DatabasesApplied say what the primary
// reports of the declaration as it is now, never of an older one.
func TestDeclaredRolesAndDatabases(t *testing.T) {
	ns := namespace(t)
	db := newDB(ns, "roles")
	db.Spec.Roles = []databasev1alpha1.RoleSpec{
		{Name: "analyst", InRoles: []string{"pg_read_all_data"}},
		{Name: "migrator", PasswordSecret: &databasev1alpha1.SecretReference{Name: "migrator-password"}},
		{Name: "nobody", Login: ptr.To(false)},
	}
	db.Spec.Databases = []databasev1alpha1.DatabaseSpec{
		{Name: "reports", Owner: "analyst", Extensions: []databasev1alpha1.ExtensionSpec{{Name: "vector"}},
			Subscriptions: []databasev1alpha1.SubscriptionSpec{{Name: "stock", Publications: []string{"stock"},
				Source: databasev1alpha1.SubscriptionSource{MyDatabase: "shop"}}}},
	}
	db = create(t, db)
	rotationPods(t, db, 1)

	generated := secretOf(t, ns, "roles-role-analyst")
	if len(generated.Data[specs.SecretPasswordKey]) == 0 || string(generated.Data[specs.SecretUsernameKey]) != "analyst" {
		t.Errorf("generated Secret %v", generated.Data)
	}
	if len(generated.Data[specs.CACertKey]) == 0 {
		t.Error("the generated Secret has no ca.crt: a subscriber verifies the servers with it")
	}
	first := string(generated.Data[specs.SecretPasswordKey])
	if err := get(ns, "roles-role-nobody", &corev1.Secret{}); err == nil {
		t.Error("a Secret was generated for a role that does not log in")
	}
	lease := &coordinationv1.Lease{}
	eventually(t, "the roles and databases on the Lease", func() error {
		if err := get(ns, specs.LeaseName(db), lease); err != nil {
			return err
		}
		d, err := contract.ParseDeclared(lease.Annotations[contract.AnnotationDeclared])
		roles := d.Roles
		if err != nil || len(roles) != 3 || roles[0].PasswordSecret != "roles-role-analyst" || !roles[0].Login ||
			roles[1].PasswordSecret != "migrator-password" || roles[2].Login || roles[2].PasswordSecret != "" ||
			len(d.Databases) != 1 || d.Databases[0].Owner != "analyst" || len(d.Databases[0].Extensions) != 1 ||
			len(d.Databases[0].Subscriptions) != 1 || d.Databases[0].Subscriptions[0].Secret != "shop-role-mydatabase-logical" ||
			!d.Databases[0].Subscriptions[0].Enabled || !d.Databases[0].Subscriptions[0].Failover {
			return fmt.Errorf("%s: %v", lease.Annotations[contract.AnnotationDeclared], err)
		}
		return nil
	})
	eventually(t, "the instance Role reading the roles' and the subscription's Secrets", func() error {
		role := &rbacv1.Role{}
		if err := get(ns, specs.InstanceAccessName(db), role); err != nil {
			return err
		}
		for _, rule := range role.Rules {
			if slices.Contains(rule.Resources, "secrets") && slices.Contains(rule.ResourceNames, "roles-role-analyst") &&
				slices.Contains(rule.ResourceNames, "migrator-password") && slices.Contains(rule.ResourceNames, "shop-role-mydatabase-logical") {
				return nil
			}
		}
		return fmt.Errorf("rules %+v", role.Rules)
	})
	waitFor(t, db, "RolesApplied pending", rolesCondition(databasev1alpha1.ReasonRolesPending, "analyst, migrator, nobody"))

	// The primary applied an older declaration: still pending.
	declared := lease.Annotations[contract.AnnotationDeclared]
	publishReport(t, ns, "roles-0", contract.Report{Role: databasev1alpha1.RolePrimary, Ready: true, Time: time.Now().UTC(),
		Declared: map[string]string{"role/analyst": ""}, DeclaredOf: contract.DeclaredDigest("{}")})
	waitFor(t, db, "RolesApplied still pending", rolesCondition(databasev1alpha1.ReasonRolesPending, "analyst, migrator, nobody"))
	// This one: one role could not be applied.
	publishReport(t, ns, "roles-0", contract.Report{Role: databasev1alpha1.RolePrimary, Ready: true, Time: time.Now().UTC(),
		Declared: map[string]string{"role/analyst": "", "role/migrator": "reading Secret migrator-password: not found", "role/nobody": "",
			"database/reports": "", "database/reports/extension/vector": "the image holds no extension", "database/reports/subscription/stock": ""},
		DeclaredOf: contract.DeclaredDigest(declared)})
	waitFor(t, db, "RolesApplied false", rolesCondition(databasev1alpha1.ReasonRoleNotApplied, "migrator: reading Secret migrator-password: not found"))
	if c := condition(db, databasev1alpha1.ConditionDatabasesApplied); c == nil || c.Reason != databasev1alpha1.ReasonDatabaseNotApplied ||
		c.Message != "the primary could not apply reports extension vector: the image holds no extension; change spec.databases or the database, and it tries again" {
		t.Errorf("DatabasesApplied %+v", c)
	}
	if ds := db.Status.Databases; len(ds) != 1 || !ds[0].Applied || len(ds[0].Extensions) != 1 || ds[0].Extensions[0].Applied ||
		ds[0].Extensions[0].Message != "the image holds no extension" || len(ds[0].Subscriptions) != 1 || !ds[0].Subscriptions[0].Applied {
		t.Errorf("status.databases %+v", ds)
	}
	got := db // as waitFor read it
	if len(got.Status.Roles) != 3 || !got.Status.Roles[0].Applied || got.Status.Roles[1].Applied ||
		got.Status.Roles[0].PasswordSecret != "roles-role-analyst" || got.Status.Roles[2].PasswordSecret != "" {
		t.Errorf("status.roles %+v", got.Status.Roles)
	}
	if c := condition(got, databasev1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Ready %+v: a role not applied must not take the database out of service", c)
	}
	publishReport(t, ns, "roles-0", contract.Report{Role: databasev1alpha1.RolePrimary, Ready: true, Time: time.Now().UTC(),
		Declared: map[string]string{"role/analyst": "", "role/migrator": "", "role/nobody": "", "database/reports": "", "database/reports/extension/vector": "",
			"database/reports/subscription/stock": ""},
		DeclaredOf: contract.DeclaredDigest(declared)})
	waitFor(t, db, "RolesApplied", rolesCondition(databasev1alpha1.ReasonRolesApplied, "the 3 declared roles"))
	if c := condition(db, databasev1alpha1.ConditionDatabasesApplied); c == nil || c.Status != metav1.ConditionTrue ||
		c.Message != "the primary applied the 3 declared databases, extensions, publications and subscriptions" {
		t.Errorf("DatabasesApplied %+v", c)
	}

	// The generated Secret is never rewritten.
	if again := secretOf(t, ns, "roles-role-analyst"); string(again.Data[specs.SecretPasswordKey]) != first {
		t.Error("the generated Secret was rewritten")
	}

	// Under Delete the role Secrets go with the MyDatabase: the generated
	// one, and one a deleted MyDatabase of the name retained for a role no
	// longer declared (adopted).
	retained := specs.RoleSecret(db, "old_app", "old-password", nil)
	retained.Labels[databasev1alpha1.LabelOwnerUID] = "uid-of-a-deleted-mydatabase"
	retained.OwnerReferences = nil
	if err := k8s.Create(t.Context(), retained); err != nil {
		t.Fatal(err)
	}
	update(t, db, func(db *databasev1alpha1.MyDatabase) { db.Spec.DeletionPolicy = databasev1alpha1.DeletionPolicyDelete })
	for _, name := range []string{"roles-role-analyst", "roles-role-old-app"} {
		eventually(t, name+" owned by the MyDatabase", func() error {
			s := &corev1.Secret{}
			if err := get(ns, name, s); err != nil {
				return err
			}
			if s.Labels[databasev1alpha1.LabelOwnerUID] != string(db.UID) || len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != db.UID {
				return fmt.Errorf("labels %v, owners %v", s.Labels, s.OwnerReferences)
			}
			// One made without the CA (retained from before) is given it.
			if !bytes.Equal(s.Data[specs.CACertKey], generated.Data[specs.CACertKey]) {
				return fmt.Errorf("ca.crt %q, want the servers' CA", s.Data[specs.CACertKey])
			}
			return nil
		})
	}
}

func rolesCondition(reason, says string) func(*databasev1alpha1.MyDatabase) error {
	return func(db *databasev1alpha1.MyDatabase) error {
		c := condition(db, databasev1alpha1.ConditionRolesApplied)
		if c == nil || c.Reason != reason || !strings.Contains(c.Message, says) || c.ObservedGeneration != db.Generation {
			return fmt.Errorf("RolesApplied %+v, want %s saying %q", c, reason, says)
		}
		return nil
	}
}

// TestPoolerLookupCondition: PoolerLookupApplied follows the primary's
// outcome for the poolers' lookup while a pooler leads to the MyDatabase,
// stays True while a primary has not reported it again (a failover, a new
// declaration: the role and function stay in the catalog), and is absent
// otherwise.
func TestPoolerLookupCondition(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	applied, failed := "", "database shop: permission denied"
	for name, tc := range map[string]struct {
		keeps  bool
		before metav1.ConditionStatus // "" for no condition before
		lookup *string
		want   metav1.ConditionStatus // "" for none
		reason string
	}{
		"no pooler":                          {before: metav1.ConditionTrue},
		"a pooler, nothing reported yet":     {keeps: true, want: metav1.ConditionFalse, reason: databasev1alpha1.ReasonPoolerLookupPending},
		"made":                               {keeps: true, before: metav1.ConditionFalse, lookup: &applied, want: metav1.ConditionTrue, reason: databasev1alpha1.ReasonPoolerLookupApplied},
		"made before, not reported since":    {keeps: true, before: metav1.ConditionTrue, want: metav1.ConditionTrue, reason: databasev1alpha1.ReasonPoolerLookupApplied},
		"pending before, not reported since": {keeps: true, before: metav1.ConditionFalse, want: metav1.ConditionFalse, reason: databasev1alpha1.ReasonPoolerLookupPending},
		"failed":                             {keeps: true, before: metav1.ConditionTrue, lookup: &failed, want: metav1.ConditionFalse, reason: databasev1alpha1.ReasonPoolerLookupNotApplied},
	} {
		t.Run(name, func(t *testing.T) {
			db := &databasev1alpha1.MyDatabase{ObjectMeta: metav1.ObjectMeta{Generation: 4}}
			if tc.before != "" {
				db.Status.Conditions = []metav1.Condition{{Type: databasev1alpha1.ConditionPoolerLookupApplied, Status: tc.before,
					Reason: "Before", ObservedGeneration: 3}}
			}
			setPoolerLookupCondition(db, tc.keeps, tc.lookup, now)
			c := meta.FindStatusCondition(db.Status.Conditions, databasev1alpha1.ConditionPoolerLookupApplied)
			switch {
			case tc.want == "" && c != nil:
				t.Errorf("condition %+v, want none", c)
			case tc.want == "":
			case c == nil || c.Status != tc.want || c.Reason != tc.reason || c.ObservedGeneration != 4:
				t.Errorf("condition %+v, want %s %s of generation 4", c, tc.want, tc.reason)
			case tc.lookup == &failed && !strings.Contains(c.Message, failed):
				t.Errorf("message %q does not say why", c.Message)
			}
		})
	}
}

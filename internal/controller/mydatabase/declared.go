package mydatabase

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
)

// setDeclaredStatus writes status.roles, status.databases and their
// conditions (RolesApplied, DatabasesApplied) from the primary's report:
// an item is applied once the primary reports it so for the declaration
// as it is now.
func setDeclaredStatus(db *databasev1alpha1.MyDatabase, primary *contract.Report, pooled bool, now time.Time) {
	st := &db.Status
	current := false
	if d := specs.DeclaredOf(db, pooled); d != nil && primary != nil {
		current = primary.DeclaredOf == contract.DeclaredDigest(d.String())
	}
	// outcome is the primary's for the item of key: why it is not
	// applied, and whether it said.
	outcome := func(key string) (string, bool) {
		if !current {
			return "", false
		}
		why, reported := primary.Declared[key]
		return why, reported
	}

	st.Roles = nil
	var roles tally
	for _, r := range specs.DeclaredRoles(db) {
		rs := databasev1alpha1.RoleStatus{Name: r.Name, PasswordSecret: specs.RolePasswordSecretName(db, r)}
		why, reported := outcome(contract.RoleKey(r.Name))
		rs.Applied, rs.Message = roles.add(r.Name, why, reported)
		st.Roles = append(st.Roles, rs)
	}
	roles.setCondition(db, now, databasev1alpha1.ConditionRolesApplied, "roles", "spec.roles",
		databasev1alpha1.ReasonRolesApplied, databasev1alpha1.ReasonRoleNotApplied, databasev1alpha1.ReasonRolesPending)

	st.Databases = nil
	var databases tally
	for _, d := range db.Spec.Databases {
		ds := databasev1alpha1.DatabaseStatus{Name: d.Name}
		why, reported := outcome(contract.DatabaseKey(d.Name))
		ds.Applied, ds.Message = databases.add(d.Name, why, reported)
		item := func(kind, name, key string) databasev1alpha1.ItemStatus {
			why, reported := outcome(key)
			is := databasev1alpha1.ItemStatus{Name: name}
			is.Applied, is.Message = databases.add(d.Name+" "+kind+" "+name, why, reported)
			return is
		}
		for _, e := range d.Extensions {
			ds.Extensions = append(ds.Extensions, item("extension", e.Name, contract.ExtensionKey(d.Name, e.Name)))
		}
		for _, p := range d.Publications {
			ds.Publications = append(ds.Publications, item("publication", p.Name, contract.PublicationKey(d.Name, p.Name)))
		}
		for _, sub := range d.Subscriptions {
			ds.Subscriptions = append(ds.Subscriptions, item("subscription", sub.Name, contract.SubscriptionKey(d.Name, sub.Name)))
		}
		st.Databases = append(st.Databases, ds)
	}
	databases.setCondition(db, now, databasev1alpha1.ConditionDatabasesApplied, "databases, extensions, publications and subscriptions", "spec.databases",
		databasev1alpha1.ReasonDatabasesApplied, databasev1alpha1.ReasonDatabaseNotApplied, databasev1alpha1.ReasonDatabasesPending)

	var lookup *string // the primary's outcome for the poolers' lookup, if it reported one
	if primary != nil {
		if why, reported := primary.Declared[contract.PoolerKey]; reported {
			lookup = &why
		}
	}
	setPoolerLookupCondition(db, pooled && modeOf(db).replica == nil, lookup, now)
}

// setPoolerLookupCondition sets ConditionPoolerLookupApplied while the
// primary keeps the poolers' lookup (keeps: a pooler leads to db, and db's
// servers are writable), from the primary's last outcome for it (nil when
// it reported none); it removes the condition otherwise. The role and the
// function, once made, stay in the catalog through a new declaration or a
// failover, so a True condition stays True until a primary reports that
// it could not keep them: a pooler's Ready (which waits for it) does not
// flap while a new primary applies the declaration for the first time.
func setPoolerLookupCondition(db *databasev1alpha1.MyDatabase, keeps bool, lookup *string, now time.Time) {
	if !keeps {
		meta.RemoveStatusCondition(&db.Status.Conditions, databasev1alpha1.ConditionPoolerLookupApplied)
		return
	}
	cond := metav1.Condition{Type: databasev1alpha1.ConditionPoolerLookupApplied, Status: metav1.ConditionTrue,
		Reason:             databasev1alpha1.ReasonPoolerLookupApplied,
		Message:            "the primary keeps the poolers' role and, in every database, their password lookup",
		ObservedGeneration: db.Generation, LastTransitionTime: metav1.NewTime(now)}
	switch {
	case lookup != nil && *lookup != "":
		cond.Status, cond.Reason = metav1.ConditionFalse, databasev1alpha1.ReasonPoolerLookupNotApplied
		cond.Message = "the primary could not make the poolers' role and password lookup: " + *lookup + "; it tries again every Lease duration"
	case lookup == nil && !meta.IsStatusConditionTrue(db.Status.Conditions, cond.Type):
		cond.Status, cond.Reason = metav1.ConditionFalse, databasev1alpha1.ReasonPoolerLookupPending
		cond.Message = "waiting for the primary to make the poolers' role and, in every database, their password lookup"
	}
	meta.SetStatusCondition(&db.Status.Conditions, cond)
}

// tally counts declared items by where they stand, for a condition.
type tally struct {
	count           int
	failed, pending []string
}

// add counts the item name, given the primary's outcome for it (why it
// is not applied, and whether it reported one), and returns its status'
// applied and message.
func (t *tally) add(name, why string, reported bool) (bool, string) {
	t.count++
	switch {
	case !reported:
		t.pending = append(t.pending, name)
		return false, ""
	case why != "":
		t.failed = append(t.failed, name+": "+why)
		return false, why
	}
	return true, ""
}

// setCondition sets the condition of type kind from the tally: True
// (applied) when every item is applied, False with the items that failed
// (notApplied) or, else, that the primary has not reported yet (pending);
// no condition without items.
func (t *tally) setCondition(db *databasev1alpha1.MyDatabase, now time.Time, kind, what, field, applied, notApplied, pending string) {
	if t.count == 0 {
		meta.RemoveStatusCondition(&db.Status.Conditions, kind)
		return
	}
	cond := metav1.Condition{Type: kind, Status: metav1.ConditionTrue, Reason: applied,
		Message:            fmt.Sprintf("the primary applied the %d declared %s", t.count, what),
		ObservedGeneration: db.Generation, LastTransitionTime: metav1.NewTime(now)}
	switch {
	case len(t.failed) > 0:
		slices.Sort(t.failed)
		cond.Status, cond.Reason = metav1.ConditionFalse, notApplied
		cond.Message = "the primary could not apply " + strings.Join(t.failed, "; ") + "; change " + field + " or the database, and it tries again"
	case len(t.pending) > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, pending
		cond.Message = "waiting for the primary to apply " + strings.Join(t.pending, ", ")
	}
	meta.SetStatusCondition(&db.Status.Conditions, cond)
}

package mydatabase

import (
	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// A MyDatabase's modes change what many of its features do: paused,
// hibernating, a replica of another database, a pooler in front. Each is
// worked out once a pass, here, into the scope (scope.mode): a component
// reads the mode, never the spec fields behind it, and only this file
// reads spec.paused, spec.hibernate and spec.replica (TestModesAreReadOnce).
// The status functions, which run after the components, ask modeOf and
// hibernated too.
type mode struct {
	// paused: spec.paused; the pass only observes.
	paused bool
	// hibernate: spec.hibernate asks every server stopped; the hibernation
	// component carries it out, and status.hibernation says how far it got.
	hibernate bool
	// replica is spec.replica, nil for a MyDatabase that takes its own
	// writes from the start.
	replica *databasev1alpha1.ReplicaSpec
	// followsSource: a replica MyDatabase that still follows its source
	// (specs.FollowsSource).
	followsSource bool
	// pooled: a MyDatabasePooler leads to the MyDatabase; its primary then
	// keeps the poolers' role and lookup (contract.Declared.Pooler). Only
	// observe can tell, from the poolers of the namespace.
	pooled bool
}

// modeOf is the mode db's spec asks for (all but pooled).
func modeOf(db *databasev1alpha1.MyDatabase) mode {
	return mode{
		paused:        db.Spec.Paused,
		hibernate:     db.Spec.Hibernate,
		replica:       specs.Replica(db),
		followsSource: specs.FollowsSource(db),
	}
}

// hibernated tells whether no server runs for spec.hibernate, as
// db.Status.Hibernation says: the status functions ask it once the pass's
// hibernation status is in.
func hibernated(db *databasev1alpha1.MyDatabase) bool {
	h := db.Status.Hibernation
	return db.Spec.Hibernate && h != nil && h.Phase == databasev1alpha1.HibernationHibernated
}

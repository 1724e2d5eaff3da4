package mydatabase

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

func TestStatusWritesSkipOnlyWhatTheCacheHasNotShownYet(t *testing.T) {
	key := types.NamespacedName{Namespace: "shop", Name: "orders"}
	at := func(rv string) *databasev1alpha1.MyDatabase {
		return &databasev1alpha1.MyDatabase{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv}}
	}
	ready := databasev1alpha1.MyDatabaseStatus{ObservedGeneration: 2, Phase: databasev1alpha1.PhaseReady}
	updating := databasev1alpha1.MyDatabaseStatus{ObservedGeneration: 2, Phase: databasev1alpha1.PhaseUpdating}

	var w statusWrites
	if w.repeats(key, at("10"), ready) {
		t.Fatal("nothing written yet, but a write counts as a repeat")
	}
	w.remember(key, at("10"), ready)
	if !w.repeats(key, at("10"), ready) {
		t.Error("the same status over the same stale object is not a repeat")
	}
	if w.repeats(key, at("10"), updating) {
		t.Error("another status over the same object counts as a repeat")
	}
	if w.repeats(key, at("11"), ready) {
		t.Error("once the cache shows a newer object, the write still counts as a repeat")
	}
	if w.repeats(key, at("10"), ready) {
		t.Error("the write was not forgotten when the cache caught up")
	}
	w.remember(key, at("12"), ready)
	w.forget(key)
	if w.repeats(key, at("12"), ready) {
		t.Error("a deleted MyDatabase's write was not forgotten")
	}
}

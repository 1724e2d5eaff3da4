package mydatabase

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// BenchmarkConvergedPass is one pass over a converged MyDatabase of three
// servers: what a restarted operator, a resync or an unrelated event costs
// it. It fails if a pass writes anything. For its profile:
//
//	go test ./internal/controller/mydatabase -run '^$' -bench ConvergedPass -cpuprofile pass.prof
func BenchmarkConvergedPass(b *testing.B) {
	ns := namespace(b)
	db := create(b, newDB(ns, "bench", func(db *databasev1alpha1.MyDatabase) { db.Spec.Replicas = ptr.To[int32](3) }))
	eventually(b, "the StatefulSet", exists(ns, "bench", &appsv1.StatefulSet{}))
	markReady(b, db)
	waitFor(b, db, "Ready", phaseIs(databasev1alpha1.PhaseReady))
	time.Sleep(time.Second) // let the watch events of the last writes drain

	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)}
	before := fmt.Sprint(writes.WritesIn(ns))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := reconciler.Reconcile(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
	if after := fmt.Sprint(writes.WritesIn(ns)); after != before {
		b.Fatalf("a converged MyDatabase was written to:\nbefore %s\nafter  %s", before, after)
	}
}

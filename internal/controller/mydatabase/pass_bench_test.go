package mydatabase

import (
	"context"
	"fmt"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// BenchmarkConvergedPass is one pass over a converged MyDatabase of three
// servers: what a restarted operator, a resync or an unrelated event costs
// it. It fails if a pass writes anything. For its profile:
//
//	go test ./internal/controller/mydatabase -run '^$' -bench ConvergedPass -cpuprofile pass.prof
func BenchmarkConvergedPass(b *testing.B) {
	ns := namespace(b)
	db := convergedDB(b, ns, "bench")
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

// BenchmarkFirstPass is BenchmarkConvergedPass for a reconciler that has
// just started: it remembers nothing (certificate verdicts, status
// writes), as after an operator's restart.
func BenchmarkFirstPass(b *testing.B) {
	ns := namespace(b)
	db := convergedDB(b, ns, "first")
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)}
	before := fmt.Sprint(writes.WritesIn(ns))
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		fresh := &MyDatabaseReconciler{Client: reconciler.Client, APIReader: reconciler.APIReader, Recorder: reconciler.Recorder,
			NewPassword: reconciler.NewPassword, Clock: reconciler.Clock, Metrics: reconciler.Metrics, StallRetry: reconciler.StallRetry}
		b.StartTimer()
		if _, err := fresh.Reconcile(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
	if after := fmt.Sprint(writes.WritesIn(ns)); after != before {
		b.Fatalf("a converged MyDatabase was written to:\nbefore %s\nafter  %s", before, after)
	}
}

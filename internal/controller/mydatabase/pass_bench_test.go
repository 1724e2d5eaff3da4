package mydatabase

import (
	"context"
	"fmt"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// BenchmarkConvergedPass is one pass over a converged MyDatabase of three
// servers: what a resync or an unrelated event costs the operator. It
// fails if a pass writes anything. For its profile:
//
//	go test ./internal/controller/mydatabase -run '^$' -bench ConvergedPass -cpuprofile pass.prof
func BenchmarkConvergedPass(b *testing.B) {
	benchmarkPass(b, "bench", func() *Reconciler { return reconciler })
}

// BenchmarkFirstPass is the same pass by a reconciler that has just
// started and remembers nothing (certificate checks, status writes): what
// each MyDatabase costs a restarted operator.
func BenchmarkFirstPass(b *testing.B) {
	benchmarkPass(b, "first", func() *Reconciler {
		return &Reconciler{Client: reconciler.Client, APIReader: reconciler.APIReader, Recorder: reconciler.Recorder,
			NewPassword: reconciler.NewPassword, Clock: reconciler.Clock, Metrics: reconciler.Metrics, StallRetry: reconciler.StallRetry}
	})
}

// benchmarkPass times passes over a converged MyDatabase, each by the
// reconciler next returns (made outside the timing).
func benchmarkPass(b *testing.B, name string, next func() *Reconciler) {
	ns := namespace(b)
	db := convergedDB(b, ns, name)
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)}
	before := fmt.Sprint(writes.WritesIn(ns))
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		r := next()
		b.StartTimer()
		if _, err := r.Reconcile(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
	if after := fmt.Sprint(writes.WritesIn(ns)); after != before {
		b.Fatalf("a converged MyDatabase was written to:\nbefore %s\nafter  %s", before, after)
	}
}

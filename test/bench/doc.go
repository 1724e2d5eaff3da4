// Package bench measures the operator against a real kube-apiserver and etcd
// (envtest, see internal/testenv): time to converge against a raw client
// doing the same writes, writes and reconciles per MyDatabase, steady-state
// writes on resync and restart, heap per MyDatabase and against unrelated
// objects, and the latency of a spec edit. cmd/bench runs it and writes
// docs/benchmarks.md, docs/benchmarks.json and a chart (make bench); the test
// in this package runs it small, so that `make test` keeps the harness
// working.
//
// The operator runs in this process, wired like cmd/main.go (same cache
// options, client QPS/burst, workers); the API server and etcd are separate
// processes. Every timed run of the convergence benchmark gets a fresh
// control plane, so runs never see each other's objects.
//
// B7, the full tier (full.go), runs instead on a KWOK cluster of its own
// per run (kwok.go: kwokctl's binary runtime, a real kube-controller-manager
// and kube-scheduler, fake nodes, cmd/dev-provisioner for volumes) and times
// MyDatabases to Ready with their pods Running, against the raw client's
// writes with the StatefulSet controller alone.
package bench

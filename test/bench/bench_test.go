package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestHarness runs every benchmark small (20 MyDatabases, one round; the
// full tier with 3 of 2 servers each, on two KWOK clusters) so that `make test-bench-harness`
// (part of `make test-heavy` and `make test-all`, not of `make test`) keeps
// the harness working. It asserts what must hold at any size, never a timing:
// everything converges, the raw client makes exactly its writes, a
// converged operator writes nothing, on a quiet period, across a resync and
// after a restart, and on KWOK every pod ends Running and Ready.
func TestHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three control planes")
	}
	opts := DefaultOptions()
	opts.N, opts.Rounds = 20, 1
	opts.SteadyN = 20
	opts.Resync, opts.QuietWindow, opts.Settle = 2*time.Second, 2*time.Second, time.Second
	opts.Unrelated, opts.UnrelatedSize = 40, 1024
	opts.Edits, opts.EditRate = 10, 50
	opts.FullN, opts.FullReplicas, opts.FullRounds = 3, 2, 1
	opts.Timeout = 40 * time.Second
	opts.Log = testLog{t}

	res, err := RunAll(opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Converge) != 2 {
		t.Fatalf("got %d convergence runs, want an operator and a raw one", len(res.Converge))
	}
	for _, run := range res.Converge {
		if run.Converged != opts.N || run.Seconds <= 0 || len(run.Curve) != opts.N {
			t.Errorf("%s run: %d of %d converged in %.2fs", run.Mode, run.Converged, opts.N, run.Seconds)
		}
		switch run.Mode {
		case "raw":
			// create the MyDatabase, finalizer, four Secrets (passwords, CA,
			// server certificate), eight applies (ConfigMap, two Services,
			// the instance managers' ServiceAccount, Role, RoleBinding and
			// Lease, StatefulSet), status
			if want := 15 * opts.N; run.Requests.Writes != want || run.Requests.Conflicts != 0 {
				t.Errorf("raw run: %d writes (%d conflicts), want %d: %v", run.Requests.Writes, run.Requests.Conflicts, want, run.Requests.ByRequest)
			}
		case "operator":
			if run.Requests.Writes < 12*opts.N || len(run.WritesByKind) == 0 || run.Reconciles < float64(opts.N) {
				t.Errorf("operator run: %d writes %v, %.0f reconciles: the probes see too little", run.Requests.Writes, run.WritesByKind, run.Reconciles)
			}
			// Two reads around the cache per new MyDatabase (its first data
			// volume, its server certificate); a few more when the cache
			// lags behind a Secret just created. Four before the finalizer
			// was patched over the pass's baseline.
			if run.Requests.LiveReads > 3*opts.N {
				t.Errorf("operator run: %d live reads for %d MyDatabases: %v", run.Requests.LiveReads, opts.N, run.Requests.ByRequest)
			}
		}
	}

	if len(res.Full) != 2 {
		t.Fatalf("got %d full-tier runs, want an operator and a raw one", len(res.Full))
	}
	for _, run := range res.Full {
		if run.Done != opts.FullN || run.PodsReady != opts.FullN*opts.FullReplicas || run.Seconds <= 0 {
			t.Errorf("full tier, %s run: %d of %d reached %q, %d pods Running and Ready, in %.2fs", run.Mode, run.Done, opts.FullN,
				run.target(), run.PodsReady, run.Seconds)
		}
		// With replicas the raw client also writes the read-only Service and
		// the PodDisruptionBudget, as the operator does.
		if want := 17 * opts.FullN; run.Mode == modeRaw && run.Requests.Writes != want {
			t.Errorf("full tier, raw run: %d writes, want %d: %v", run.Requests.Writes, want, run.Requests.ByRequest)
		}
		if run.Mode == modeOperator && len(run.ReadyLag) != opts.FullN {
			t.Errorf("full tier, operator run: Ready lag of %d MyDatabases, want %d", len(run.ReadyLag), opts.FullN)
		}
		_, kcm := run.CPU["kube-controller-manager"]
		if _, prov := run.CPU["dev-provisioner"]; !kcm || !prov {
			t.Errorf("full tier, %s run: no CPU figures of the cluster: %v", run.Mode, run.CPU)
		}
	}

	st := res.Steady
	if st == nil {
		t.Fatal("no steady-state results")
	}
	if st.QuietWrites != 0 || st.QuietRequests.Writes != 0 || st.QuietRequests.EventWrites != 0 {
		t.Errorf("converged and idle, the operator wrote: client %d, requests %v", st.QuietWrites, st.QuietRequests.ByRequest)
	}
	if st.ResyncReconciles < float64(opts.SteadyN) {
		t.Errorf("resync window: %.0f reconciles, want at least %d (did the informers resync?)", st.ResyncReconciles, opts.SteadyN)
	}
	if st.ResyncWrites != 0 || st.ResyncRequests.Writes != 0 || st.ResyncRequests.EventWrites != 0 {
		t.Errorf("on resync the operator wrote: client %d, requests %v", st.ResyncWrites, st.ResyncRequests.ByRequest)
	}
	if st.RestartReconciled != opts.SteadyN {
		t.Errorf("after a restart %d of %d MyDatabases were reconciled", st.RestartReconciled, opts.SteadyN)
	}
	if st.RestartSyncCPU.Process <= 0 || st.RestartPassesCPU.Process <= 0 || st.RestartPassesCPU.GC > st.RestartPassesCPU.Process {
		t.Errorf("the restart's CPU was not measured: until synced %+v, passes %+v", st.RestartSyncCPU, st.RestartPassesCPU)
	}
	if st.RestartWrites != 0 || st.RestartRequests.Writes != 0 || st.RestartRequests.EventWrites != 0 {
		t.Errorf("after a restart the operator wrote: client %d, requests %v", st.RestartWrites, st.RestartRequests.ByRequest)
	}
	if st.UnrelatedReqs.Writes != 0 || st.UnrelatedReqs.LiveReads != 0 {
		t.Errorf("unrelated objects made the operator call the API server: %v", st.UnrelatedReqs.ByRequest)
	}
	if st.HeapEmpty == 0 || st.HeapConverged == 0 {
		t.Errorf("heap not measured: %+v", st)
	}
	if len(st.EditLatencyMs) != opts.Edits || st.EditMissed != 0 {
		t.Errorf("edits: %d latencies, %d missed, want %d", len(st.EditLatencyMs), st.EditMissed, opts.Edits)
	}

	// The report renders.
	dir := t.TempDir()
	if err := WriteReport(res, dir, "go test ./test/bench"); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"B1", "B2", "B3", "B4", "B5", "B6", "B7"} {
		if !strings.Contains(string(md), "| "+want) {
			t.Errorf("benchmarks.md has no %s row", want)
		}
	}
	if !strings.Contains(string(md), "## B7: full tier") {
		t.Error("benchmarks.md has no B7 section")
	}
	for _, f := range []string{"benchmarks.json", "benchmarks-converge.png", "benchmarks-full.png"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}

	// The scale tiers render into the same report (these small figures
	// stand in for them), and a later `make bench` keeps them.
	merged, command, err := MergeScale(dir, res, "scale command")
	if err != nil || command != "go test ./test/bench" || merged.Scale != res {
		t.Fatalf("merging the scale figures: %v, command %q", err, command)
	}
	if err := WriteReport(merged, dir, command); err != nil {
		t.Fatal(err)
	}
	again := &Results{Options: res.Options}
	KeepScale(dir, again)
	if again.Scale == nil || again.Scale.Commands != (TierCommands{"scale command", "scale command", "scale command"}) || len(again.Scale.Converge) != len(res.Converge) {
		t.Fatalf("make bench lost the scale figures: %+v", again.Scale)
	}
	// A scale run of B9 alone keeps B8's figures.
	b9 := &Results{Options: res.Options, Full: res.Full}
	merged, command, err = MergeScale(dir, b9, "b9 command")
	if err != nil {
		t.Fatal(err)
	}
	if sc := merged.Scale; len(sc.Converge) != len(res.Converge) || sc.Steady == nil || len(sc.Full) != len(res.Full) ||
		sc.Commands != (TierCommands{"scale command", "scale command", "b9 command"}) {
		t.Fatalf("a run of B9 alone lost B8: %d convergence runs, steady %v, commands %+v", len(sc.Converge), sc.Steady != nil, sc.Commands)
	}
	if err := WriteReport(merged, dir, command); err != nil {
		t.Fatal(err)
	}
	md, err = os.ReadFile(filepath.Join(dir, "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| B8 |", "| B9 |", "- Commands: B8's convergence `scale command`; B8's steady state `scale command`; B9 `b9 command`.", "| `b9 command` |\n", "| `scale command` |\n", "## B9: full tier",
		"benchmarks-scale-converge.png", "benchmarks-scale-full.png"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("benchmarks.md has no %q", want)
		}
	}
	for _, f := range []string{"benchmarks-scale-converge.png", "benchmarks-scale-full.png"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// A reconcile reads its MyDatabase more than once, under one reconcile ID:
// it counts once. Reads outside a reconcile (no ID) count each.
func TestReconcileLogCountsReconcileIDs(t *testing.T) {
	l := newReconcileLog()
	key := types.NamespacedName{Namespace: "shop", Name: "orders"}
	for _, id := range []types.UID{"a", "a", "b", "b", "a", "", ""} {
		l.add(key, id)
	}
	if got := l.snapshot()[key]; got != 5 || l.total.Load() != 5 {
		t.Errorf("reads under a, a, b, b, a, none, none: %d reconciles (total %d), want 5", got, l.total.Load())
	}
}

// The machine-wide CPU figures come from /proc/stat: a machine running this
// test has been busy.
func TestMachineCPU(t *testing.T) {
	busy, stolen := machineCPU()
	if busy <= 0 || stolen < 0 {
		t.Errorf("busy %s, stolen %s", busy, stolen)
	}
	if o := readCPU().other(); o < 0 {
		t.Errorf("other processes' CPU %s", o)
	}
}

// Command bench runs the operator's benchmarks against a control plane of
// its own and writes docs/benchmarks.md, docs/benchmarks.json and
// docs/benchmarks-converge.png. `make bench` runs it; see test/bench.
// With -scale it runs the scale tiers (B8, B9) instead, at
// bench.ScaleOptions' sizes, and replaces only their section of the report
// (`make bench-scale`).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"

	"example.com/myoperator/internal/testenv"
	"example.com/myoperator/test/bench"
)

func main() {
	// -scale changes the defaults of the other flags, so it is looked for
	// before they are defined.
	scale := scaleRequested(os.Args[1:])
	opts, defaultSettings := bench.DefaultOptions(), "default,4/50/100,16/100/200"
	if scale {
		opts, defaultSettings = bench.ScaleOptions(), "default"
	}
	flag.Bool("scale", false, "run the scale tiers B8 (-n and -steady-n MyDatabases, default 10000) and B9 (-full-n MyDatabases of -full-replicas servers, default 1000 of 3) instead of B1-B7, and replace only their section of the report")
	settings := flag.String("settings", defaultSettings,
		"operator settings to compare in B1/B2/B6, comma-separated: workers/qps/burst, workers/off (no client-side limit) or default (cmd/main.go's defaults; 4/50/100 were the defaults before the benchmarks, 16/100/200 tests more workers); experiments: +cachedreads (the reconciler's APIReader reads the cache)")
	steady := flag.String("steady-settings", "default", "operator settings for B3, B4 and B5")
	heap := flag.String("heap-settings", "", "further operator settings (e.g. default+cachedreads) whose heap per MyDatabase is measured at -steady-n, comma-separated")
	flag.IntVar(&opts.N, "n", opts.N, "MyDatabases per convergence run (B1, B2, B6)")
	flag.IntVar(&opts.Rounds, "rounds", opts.Rounds, "rounds of convergence runs; medians are reported")
	flag.IntVar(&opts.SteadyN, "steady-n", opts.SteadyN, "MyDatabases present for B3, B4, B5")
	flag.DurationVar(&opts.Resync, "resync", opts.Resync, "informer resync period for the B3 resync window (0: no resync window)")
	flag.DurationVar(&opts.QuietWindow, "idle", opts.QuietWindow, "how long a converged operator is watched for writes (B3)")
	flag.IntVar(&opts.Unrelated, "unrelated", opts.Unrelated, "unrelated Secrets and ConfigMaps for B4 (0: skip)")
	flag.IntVar(&opts.UnrelatedSize, "unrelated-size", opts.UnrelatedSize, "bytes of data in each unrelated object")
	flag.IntVar(&opts.Edits, "edits", opts.Edits, "spec edits for B5 (0: skip)")
	flag.Float64Var(&opts.EditRate, "edit-rate", opts.EditRate, "spec edits per second for B5")
	flag.BoolVar(&opts.SkipSteady, "skip-steady", false, "skip B3, B4 and B5")
	flag.IntVar(&opts.FullN, "full-n", opts.FullN, "MyDatabases per full-tier run (B7: a KWOK cluster, pods Ready); 0: skip B7")
	flag.IntVar(&opts.FullReplicas, "full-replicas", opts.FullReplicas, "servers of each MyDatabase of the full tier (0: the CRD's default, one)")
	flag.IntVar(&opts.FullRounds, "full-rounds", opts.FullRounds, "rounds of full-tier runs (an operator run and a raw run each, a KWOK cluster per run); medians are reported")
	flag.IntVar(&opts.FullNodes, "full-nodes", opts.FullNodes, "fake nodes of the full tier's KWOK clusters (0: one per 50 pods, at least 3)")
	flag.Float64Var(&opts.FullLimits.QPS, "full-qps", opts.FullLimits.QPS, "--kube-api-qps of the full tier's kube-controller-manager and kube-scheduler")
	flag.IntVar(&opts.FullLimits.Burst, "full-burst", opts.FullLimits.Burst, "--kube-api-burst of the full tier's kube-controller-manager and kube-scheduler")
	flag.IntVar(&opts.FullLimits.StatefulSetSyncs, "full-sts-syncs", opts.FullLimits.StatefulSetSyncs, "--concurrent-statefulset-syncs of the full tier's kube-controller-manager")
	flag.BoolVar(&opts.FullKeepLogs, "full-keep-logs", false, "keep the work dirs of the full tier's KWOK clusters (component logs) under "+filepath.Join(os.TempDir(), "myoperator-bench-kwok"))
	flag.DurationVar(&opts.Timeout, "timeout", opts.Timeout, "bound of every wait for convergence")
	out := flag.String("out", filepath.Join(testenv.RepoRoot(), "docs"), "directory of benchmarks.md, benchmarks.json and the chart")
	command := flag.String("command", "", "the command to print in the report (default: this one)")
	flag.StringVar(&opts.HeapProfile, "heapprofile", "", "write a heap profile with the steady-state MyDatabases converged to this file")
	flag.StringVar(&opts.SyncProfile, "syncprofile", "", "write a CPU profile of the restart's cache sync (B3, B8: from the new operator's start until its caches synced) to this file")
	flag.StringVar(&opts.RestartProfile, "restartprofile", "", "write a CPU profile of the restart's passes (B3, B8: from the caches synced until every MyDatabase was reconciled) to this file")
	flag.StringVar(&opts.APIServerProfiles, "apiserverprofiles", "", "write a CPU profile of kube-apiserver during every convergence run (B1) into this directory, as MODE-roundR.prof")
	flag.IntVar(&opts.APIServerProfileSeconds, "apiserverprofile-seconds", opts.APIServerProfileSeconds, "seconds of each -apiserverprofiles profile, from the first create")
	fromJSON := flag.String("from-json", "", "only render the report again from this benchmarks.json (no benchmark runs)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the harness process (operator included) to this file")
	flag.Parse()
	if *fromJSON != "" {
		res, cmd, err := bench.ReadResults(*fromJSON)
		if err != nil {
			fail(err)
		}
		if err := bench.WriteReport(res, *out, cmd); err != nil {
			fail(err)
		}
		return
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fail(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fail(err)
		}
		defer pprof.StopCPUProfile()
	}

	opts.Settings = nil
	for v := range strings.SplitSeq(*settings, ",") {
		s, err := bench.ParseSettings(v)
		if err != nil {
			fail(err)
		}
		if !slices.Contains(opts.Settings, s) {
			opts.Settings = append(opts.Settings, s)
		}
	}
	s, err := bench.ParseSettings(*steady)
	if err != nil {
		fail(err)
	}
	opts.SteadySettings = s
	for v := range strings.SplitSeq(*heap, ",") {
		if v == "" {
			continue
		}
		s, err := bench.ParseSettings(v)
		if err != nil {
			fail(err)
		}
		opts.HeapSettings = append(opts.HeapSettings, s)
	}
	if opts.Defaults, err = bench.CmdMainDefaults(); err != nil {
		fail(err)
	}
	if *command == "" {
		*command = "go run ./test/bench/cmd/bench " + strings.Join(os.Args[1:], " ")
	}

	res, err := bench.RunAll(opts)
	if err != nil {
		if res != nil {
			_ = bench.WriteReport(res, os.TempDir(), *command+" (failed)")
			fmt.Fprintf(os.Stderr, "partial results in %s\n", filepath.Join(os.TempDir(), "benchmarks.json"))
		}
		fail(err)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fail(err)
	}
	if scale {
		if res, *command, err = bench.MergeScale(*out, res, *command); err != nil {
			fail(err)
		}
	} else {
		bench.KeepScale(*out, res)
	}
	if err := bench.WriteReport(res, *out, *command); err != nil {
		fail(err)
	}
	fmt.Printf("wrote %s in %.0f s\n", filepath.Join(*out, "benchmarks.md"), res.Seconds)
}

func fail(err error) {
	pprof.StopCPUProfile()
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

// scaleRequested finds -scale among the arguments, in any of the flag
// package's spellings (-scale, --scale, -scale=true).
func scaleRequested(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != "scale" {
			continue
		}
		if !hasValue {
			return true
		}
		on, err := strconv.ParseBool(value)
		return err == nil && on
	}
	return false
}

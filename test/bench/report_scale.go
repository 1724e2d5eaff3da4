package bench

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ScaleOptions are the sizes of `make bench-scale`: B8, ten thousand
// MyDatabases on the envtest control plane (convergence against the raw
// client, then heap, restart and spec edits on one control plane), and B9,
// the full tier with a thousand MyDatabases of three servers each.
func ScaleOptions() Options {
	o := DefaultOptions()
	o.N, o.Rounds, o.Settings = 10000, 3, []Settings{o.Defaults}
	o.SteadyN, o.SteadySettings = 10000, o.Defaults
	// At this size an informer resync is a burst of reconciles that the
	// resync window of B3 already measures at 1,000; unrelated objects
	// are B4's question, not one of size.
	o.Resync, o.Unrelated = 0, 0
	o.FullN, o.FullReplicas, o.FullRounds = 1000, 3, 3
	o.Timeout = 40 * time.Minute
	return o
}

// The targets at scale (issue #18).
const (
	targetScaleRatio     = 1.2
	targetScaleHeapPerDB = 25 << 10
	targetScaleReverify  = 15 * time.Second
	targetScaleFullRatio = 1.1
)

// scaleRows are the summary rows of B8 and B9; none without scale figures.
func scaleRows(sc *Results) []Row {
	if sc == nil {
		return nil
	}
	var rows []Row
	if s := mainSummary(sc, summarize(sc)); s != nil {
		rows = append(rows, Row{
			ID:       "B8",
			Metric:   fmt.Sprintf("time to converge %d MyDatabases (%s), %s", sc.Options.N, s.Settings, medianOf(s.Rounds)),
			Ours:     fmt.Sprintf("%.1f s", s.OursSeconds),
			Baseline: fmt.Sprintf("%.1f s (raw client, %d workers)", s.RawSeconds, s.Settings.Workers),
			Ratio:    fmt.Sprintf("%.2f× (rounds: %s)", s.Ratio, joinRatios(s.Ratios)),
			Target:   fmt.Sprintf("≤ %.1f× raw", targetScaleRatio),
			Result:   verdict(s.Ratio <= targetScaleRatio, fmt.Sprintf("by %.0f%%", (s.Ratio/targetScaleRatio-1)*100)),
		}, Row{
			ID:       "B8",
			Metric:   fmt.Sprintf("API writes per MyDatabase to converge %d", sc.Options.N),
			Ours:     fmt.Sprintf("%.2f (+ %.1f event writes; %.2f%% conflicts)", s.WritesPerDB, s.EventsPerDB, s.ConflictRate*100),
			Baseline: fmt.Sprintf("%.2f", s.RawWritesPerDB),
			Ratio:    fmt.Sprintf("%.2f×", s.WritesPerDB/s.RawWritesPerDB),
			Target:   fmt.Sprintf("≤ %d (12 children + 2)", targetWritesPerDB),
			Result:   verdict(s.WritesPerDB <= targetWritesPerDB, fmt.Sprintf("by %.2f writes", s.WritesPerDB-targetWritesPerDB)),
		})
	}
	for i := range rows {
		rows[i].Command = sc.Commands.Converge
	}
	if st := sc.Steady; st != nil {
		restartWrites := st.RestartRequests.Writes + st.RestartRequests.EventWrites
		rows = append(rows, Row{
			ID: "B8",
			Metric: fmt.Sprintf("operator live heap, %d converged: per MyDatabase marginal (heap with %d − heap with %d); average; in total",
				st.N, st.N, st.N/2),
			Ours:   fmt.Sprintf("%.1f KiB; %.1f KiB; %s", st.HeapPerDBMarginal/1024, st.HeapPerDB/1024, mib(st.HeapConverged)),
			Target: fmt.Sprintf("≤ %d KiB", targetScaleHeapPerDB>>10),
			Result: verdict(st.HeapPerDBMarginal <= targetScaleHeapPerDB,
				fmt.Sprintf("by %.1f KiB", (st.HeapPerDBMarginal-targetScaleHeapPerDB)/1024)),
		}, Row{
			ID:     "B8",
			Metric: fmt.Sprintf("restarted operator: every one of %d MyDatabases re-verified (cache sync %.1f s included); writes", st.N, st.RestartStartSeconds),
			Ours:   fmt.Sprintf("%.1f s (%d of %d); %d writes", st.RestartReverifySeconds, st.RestartReconciled, st.N, restartWrites),
			Target: fmt.Sprintf("≤ %.0f s, 0 writes", targetScaleReverify.Seconds()),
			Result: verdict(st.RestartReconciled == st.N && restartWrites == 0 && st.RestartReverifySeconds <= targetScaleReverify.Seconds(),
				fmt.Sprintf("by %.1f s", st.RestartReverifySeconds-targetScaleReverify.Seconds())),
		})
		if st.Edits > 0 {
			p99 := percentile(st.EditLatencyMs, 99)
			rows = append(rows, Row{
				ID:     "B8",
				Metric: fmt.Sprintf("spec edit → status at the new generation, %d present, %d edits at %.0f/s: p50 / p99 / max", st.N, st.Edits, st.EditRate),
				Ours: fmt.Sprintf("%.0f / %.0f / %.0f ms (%d missed)", percentile(st.EditLatencyMs, 50), p99,
					percentile(st.EditLatencyMs, 100), st.EditMissed),
				Target: "p99 < 1 s",
				Result: verdict(st.EditMissed == 0 && p99 < float64(targetEditP99.Milliseconds()), fmt.Sprintf("by %.0f ms", p99-1000)),
			})
		}
	}
	for i := range rows {
		rows[i].Command = cmp.Or(rows[i].Command, sc.Commands.Steady)
	}
	b9 := fullRow(sc, summarizeFull(sc), "B9", targetScaleFullRatio)
	b9.Command = sc.Commands.Full
	return append(rows, b9)
}

// scaleMarkdown is the section of B8 and B9; empty without scale figures.
func scaleMarkdown(sc *Results) string {
	if sc == nil {
		return ""
	}
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("## B8, B9: ten times the scale\n\n")
	p("- Commands: %s.\n", sc.Commands)
	p("- Latest run %s, took %s. Machine: %d CPUs (shared; load average %s before, %s after), %s. `make bench-scale` replaces the tiers it measures (B8's convergence rounds, B8's steady state, B9) and keeps the others; `make bench` keeps this section.\n",
		sc.Started.UTC().Format("2006-01-02 15:04 MST"), time.Duration(sc.Seconds*float64(time.Second)).Round(time.Second),
		sc.Machine.CPUs, sc.Machine.LoadBefore, sc.Machine.LoadAfter, sc.Machine.GoVersion)
	p("- B8 is B1–B5 at %d MyDatabases: the same harness, control plane and baseline; no resync window and no unrelated objects.\n\n", sc.Options.N)
	if sums := summarize(sc); len(sums) > 0 {
		s := mainSummary(sc, sums)
		p("### B8: convergence of %d MyDatabases (%s), %s\n\n", sc.Options.N, s.Settings.Flags(), medianOf(s.Rounds))
		p("- Ours %.1f s, raw %.1f s: %.2f× (rounds %s). %.2f writes, %.2f event writes, %.2f live reads and %.2f reconciles per MyDatabase (raw: %.2f writes); client-side throttling wait %.1f s.\n",
			s.OursSeconds, s.RawSeconds, s.Ratio, joinRatios(s.Ratios), s.WritesPerDB, s.EventsPerDB, s.LiveReadsPerDB,
			s.ReconcilesQuiet, s.RawWritesPerDB, s.ThrottleSeconds)
		p("- CPU until converged: etcd+apiserver %.1f s (raw run %.1f s); harness process %.1f s (raw run %.1f s).\n\n",
			s.ControlPlaneCPU, s.RawControlPlaneCPU, s.ProcessCPU, s.RawProcessCPU)
		p("![B8: MyDatabases converged over time](benchmarks-scale-converge.png)\n\n")
		p("%s\n", runsTable(sc.Converge))
	}
	if st := sc.Steady; st != nil {
		p("### B8: %d converged MyDatabases (operator %s)\n\n%s\n", st.N, st.Settings.Flags(), steadyMarkdown(st))
	}
	b.WriteString(fullMarkdown(sc, summarizeFull(sc), "B9", "benchmarks-scale-full.png"))
	return b.String()
}

// scaleCharts draws the charts of B8 and B9 into dir.
func scaleCharts(sc *Results, dir string) error {
	if sc == nil {
		return nil
	}
	if err := chart(summarize(sc), filepath.Join(dir, "benchmarks-scale-converge.png")); err != nil {
		return err
	}
	if full := summarizeFull(sc); full != nil {
		return fullChart(full, "B9", filepath.Join(dir, "benchmarks-scale-full.png"))
	}
	return nil
}

// MergeScale returns the results of the report in dir (its
// benchmarks.json) and its command, with the scale figures replaced by sc
// made by command. A tier sc skipped (no convergence rounds, no steady
// state, no full tier) keeps its earlier figures, so that B8 and B9 can be
// run apart. Without a report in dir, the scale figures stand alone.
func MergeScale(dir string, sc *Results, command string) (*Results, string, error) {
	if len(sc.Converge) > 0 {
		sc.Commands.Converge = command
	}
	if sc.Steady != nil {
		sc.Commands.Steady = command
	}
	if len(sc.Full) > 0 {
		sc.Commands.Full = command
	}
	res, cmd, err := ReadResults(filepath.Join(dir, "benchmarks.json"))
	if os.IsNotExist(err) {
		return &Results{Options: sc.Options, Started: sc.Started, Machine: sc.Machine, Scale: sc}, command, nil
	}
	if err != nil {
		return nil, "", err
	}
	if old := res.Scale; old != nil {
		keepSkipped(sc, old)
	}
	res.Scale = sc
	return res, cmd, nil
}

// keepSkipped gives sc the tiers of old that sc did not measure, with
// their sizes and commands.
func keepSkipped(sc, old *Results) {
	if len(sc.Converge) == 0 && len(old.Converge) > 0 {
		sc.Converge, sc.Commands.Converge = old.Converge, old.Commands.Converge
		sc.Options.N, sc.Options.Rounds, sc.Options.Settings = old.Options.N, old.Options.Rounds, old.Options.Settings
	}
	if sc.Steady == nil && old.Steady != nil {
		sc.Steady, sc.Commands.Steady, sc.Options.SteadyN = old.Steady, old.Commands.Steady, old.Options.SteadyN
	}
	if len(sc.Full) == 0 && len(old.Full) > 0 {
		sc.Full, sc.Commands.Full = old.Full, old.Commands.Full
		o := &sc.Options
		o.FullN, o.FullReplicas, o.FullRounds, o.FullNodes, o.FullLimits =
			old.Options.FullN, old.Options.FullReplicas, old.Options.FullRounds, old.Options.FullNodes, old.Options.FullLimits
	}
}

// String lists the commands of the tiers that have one.
func (c TierCommands) String() string {
	var parts []string
	for _, t := range []struct{ tier, cmd string }{
		{"B8's convergence", c.Converge}, {"B8's steady state", c.Steady}, {"B9", c.Full},
	} {
		if t.cmd != "" {
			parts = append(parts, fmt.Sprintf("%s `%s`", t.tier, t.cmd))
		}
	}
	return strings.Join(parts, "; ")
}

// KeepScale carries the scale figures of the report in dir (if any) over
// into res, which `make bench` made.
func KeepScale(dir string, res *Results) {
	if old, _, err := ReadResults(filepath.Join(dir, "benchmarks.json")); err == nil {
		res.Scale = old.Scale
	}
}

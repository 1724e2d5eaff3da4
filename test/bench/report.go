package bench

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Row is one line of the summary table.
type Row struct {
	ID       string `json:"id"`
	Metric   string `json:"metric"`
	Ours     string `json:"ours"`
	Baseline string `json:"baseline"`
	Ratio    string `json:"ratio"`
	Target   string `json:"target"`
	Result   string `json:"result"`
	// Command made the figures, when not the report's own.
	Command string `json:"command,omitempty"`
}

// SettingsSummary is B1, B2 and B6 for one operator setting: medians over
// the rounds.
type SettingsSummary struct {
	Settings        Settings  `json:"settings"`
	Rounds          int       `json:"rounds"`
	OursSeconds     float64   `json:"ours_seconds"`
	RawSeconds      float64   `json:"raw_seconds"`
	Ratio           float64   `json:"ratio"` // median of per-round ratios
	Ratios          []float64 `json:"ratios"`
	WritesPerDB     float64   `json:"writes_per_db"`
	RawWritesPerDB  float64   `json:"raw_writes_per_db"` // MyDatabase creates excluded
	EventsPerDB     float64   `json:"event_writes_per_db"`
	LiveReadsPerDB  float64   `json:"live_reads_per_db"`
	ConflictRate    float64   `json:"conflict_rate"`
	ReconcilesConv  float64   `json:"reconciles_per_db_until_converged"`
	ReconcilesQuiet float64   `json:"reconciles_per_db_until_quiet"`
	ThrottleSeconds float64   `json:"throttle_wait_seconds"`
	Throttled25     float64   `json:"throttled_requests_over_25ms"`
	ThrottleLogs    float64   `json:"throttle_log_lines"`
	// ThrottleSync is the wait of requests other than events (which the
	// event recorder sends in the background): what slows reconciles.
	ThrottleSync float64 `json:"throttle_wait_seconds_reconciles"`
	// CPU seconds until converged: this process (operator included) and
	// etcd + kube-apiserver, operator runs and raw runs.
	ProcessCPU         float64        `json:"process_cpu_seconds"`
	RawProcessCPU      float64        `json:"raw_process_cpu_seconds"`
	ControlPlaneCPU    float64        `json:"control_plane_cpu_seconds"`
	RawControlPlaneCPU float64        `json:"raw_control_plane_cpu_seconds"`
	Stalled            float64        `json:"stalled_seen"`
	WritesByVerb       map[string]int `json:"writes_by_verb_median_round"`
	ApplyLog           map[string]int `json:"apply_log_median_round"`
	ReconcilesPerDB    []int          `json:"reconciles_per_db_p50_p99_max_median_round"`
	medianRun          *Run
	medianRaw          *Run
}

func summarize(res *Results) []*SettingsSummary {
	var out []*SettingsSummary
	for _, s := range res.Options.Settings {
		sum := &SettingsSummary{Settings: s}
		var ours, raws, ratios, writes, rawWrites, events, reads, conflicts, rc, rq, thr, thr25, thrLog, thrSync, stalled []float64
		var pcpu, rawPCPU, cpcpu, rawCPCPU []float64
		var runs []*Run
		for _, run := range res.Converge {
			if run.Mode != modeOperator || run.Settings != s {
				continue
			}
			var raw *Run
			for _, r := range res.Converge {
				if r.Mode == modeRaw && r.Round == run.Round && r.Settings.Workers == s.Workers {
					raw = r
				}
			}
			n := float64(run.N)
			runs = append(runs, run)
			ours = append(ours, run.Seconds)
			writes = append(writes, float64(run.Requests.Writes)/n)
			events = append(events, float64(run.Requests.EventWrites)/n)
			reads = append(reads, float64(run.Requests.LiveReads)/n)
			conflicts = append(conflicts, float64(run.Requests.Conflicts)/float64(max(run.Requests.Writes, 1)))
			rc = append(rc, run.ReconcilesAtConverged/n)
			rq = append(rq, run.Reconciles/n)
			thr = append(thr, run.ThrottleWaitSeconds)
			thr25 = append(thr25, float64(run.ThrottledOver25ms))
			thrLog = append(thrLog, float64(run.ThrottleLogLines))
			sync := 0.0
			for k, v := range run.ThrottleByRequest {
				if !strings.HasSuffix(k, " events") {
					sync += v
				}
			}
			thrSync = append(thrSync, sync)
			stalled = append(stalled, float64(run.Stalled))
			pcpu, cpcpu = append(pcpu, run.ProcessCPU), append(cpcpu, run.ControlPlaneCPU)
			if raw != nil {
				raws = append(raws, raw.Seconds)
				rawPCPU, rawCPCPU = append(rawPCPU, raw.ProcessCPU), append(rawCPCPU, raw.ControlPlaneCPU)
				ratios = append(ratios, run.Seconds/raw.Seconds)
				rawWrites = append(rawWrites, float64(raw.Requests.Writes-raw.Requests.WritesByVerb["CREATE mydatabases"])/float64(raw.N))
			}
		}
		if len(runs) == 0 {
			continue
		}
		sum.Rounds = len(runs)
		sum.OursSeconds, sum.RawSeconds, sum.Ratio, sum.Ratios = median(ours), median(raws), median(ratios), ratios
		sum.WritesPerDB, sum.RawWritesPerDB, sum.EventsPerDB, sum.LiveReadsPerDB = median(writes), median(rawWrites), median(events), median(reads)
		sum.ConflictRate, sum.ReconcilesConv, sum.ReconcilesQuiet = median(conflicts), median(rc), median(rq)
		sum.ThrottleSeconds, sum.Throttled25, sum.ThrottleLogs, sum.Stalled = median(thr), median(thr25), median(thrLog), median(stalled)
		sum.ThrottleSync = median(thrSync)
		sum.ProcessCPU, sum.RawProcessCPU = median(pcpu), median(rawPCPU)
		sum.ControlPlaneCPU, sum.RawControlPlaneCPU = median(cpcpu), median(rawCPCPU)
		// The round whose time is the median stands for the others in the
		// breakdowns and the chart.
		slices.SortFunc(runs, func(a, b *Run) int { return cmp.Compare(a.Seconds, b.Seconds) })
		m := runs[(len(runs)-1)/2]
		sum.medianRun = m
		sum.WritesByVerb, sum.ApplyLog, sum.ReconcilesPerDB = m.Requests.WritesByVerb, m.ApplyLog, m.ReconcilesPerDB
		for _, r := range res.Converge {
			if r.Mode == modeRaw && r.Round == m.Round && r.Settings.Workers == s.Workers {
				sum.medianRaw = r
			}
		}
		out = append(out, sum)
	}
	return out
}

// ReadResults reads the results and command of a benchmarks.json that
// WriteReport wrote, to render the report again.
func ReadResults(path string) (*Results, string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	var doc struct {
		Command string `json:"command"`
		*Results
	}
	doc.Results = &Results{}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	return doc.Results, doc.Command, nil
}

// WriteReport writes benchmarks.md, benchmarks.json and
// benchmarks-converge.png into dir. command is how the figures were made.
// The block between the notes markers of an existing benchmarks.md is kept.
func WriteReport(res *Results, dir, command string) error {
	sums := summarize(res)
	full := summarizeFull(res)
	rows := summaryRows(res, sums)
	raw, err := json.MarshalIndent(struct {
		Command  string             `json:"command"`
		Summary  []Row              `json:"summary"`
		Settings []*SettingsSummary `json:"by_settings"`
		Full     *FullSummary       `json:"full_tier,omitempty"`
		*Results
	}{command, rows, sums, full, res}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "benchmarks.json"), append(raw, '\n'), 0o644); err != nil {
		return err
	}
	if err := chart(sums, filepath.Join(dir, "benchmarks-converge.png")); err != nil {
		return err
	}
	if full != nil {
		if err := fullChart(full, "B7", filepath.Join(dir, "benchmarks-full.png")); err != nil {
			return err
		}
	}
	if err := scaleCharts(res.Scale, dir); err != nil {
		return err
	}
	mdPath := filepath.Join(dir, "benchmarks.md")
	notes := defaultNotes
	if old, err := os.ReadFile(mdPath); err == nil {
		if i, j := bytes.Index(old, []byte(notesBegin)), bytes.Index(old, []byte(notesEnd)); i >= 0 && j > i {
			notes = string(old[i+len(notesBegin) : j])
		}
	}
	return os.WriteFile(mdPath, []byte(markdown(res, sums, rows, command, notes)), 0o644)
}

const (
	notesBegin   = "<!-- notes: kept by make bench -->"
	notesEnd     = "<!-- end of notes -->"
	defaultNotes = "\n(No notes yet.)\n"
)

// The targets.
const (
	targetRatio          = 1.15
	targetWritesPerDB    = 12 + 2 // twelve children (four Secrets) + finalizer + status
	targetConflicts      = 0.01
	targetReverify       = 10 * time.Second
	targetHeapPerDB      = 30 << 10
	targetUnrelated      = 5_000_000
	targetEditP99        = time.Second
	targetReconcilesPerD = 4
)

// mainSummary is the summary of cmd/main.go's defaults, or of the first
// settings if they were not measured.
func mainSummary(res *Results, sums []*SettingsSummary) *SettingsSummary {
	for _, s := range sums {
		if s.Settings == res.Options.Defaults {
			return s
		}
	}
	if len(sums) > 0 {
		return sums[0]
	}
	return nil
}

func verdict(met bool, missedBy string) string {
	if met {
		return "met"
	}
	return "**missed** " + missedBy
}

func summaryRows(res *Results, sums []*SettingsSummary) []Row {
	var rows []Row
	for _, s := range sums {
		label := "operator " + s.Settings.Flags()
		if s.Settings == res.Options.Defaults {
			label = "cmd/main.go defaults " + s.Settings.String()
		}
		rows = append(rows, Row{
			ID:       "B1",
			Metric:   fmt.Sprintf("time to converge %d MyDatabases (%s), %s", res.Options.N, label, medianOf(s.Rounds)),
			Ours:     fmt.Sprintf("%.1f s", s.OursSeconds),
			Baseline: fmt.Sprintf("%.1f s (raw client, %d workers)", s.RawSeconds, s.Settings.Workers),
			Ratio:    fmt.Sprintf("%.2f× (rounds: %s)", s.Ratio, joinRatios(s.Ratios)),
			Target:   fmt.Sprintf("≤ %.2f× raw", targetRatio),
			Result:   verdict(s.Ratio <= targetRatio, fmt.Sprintf("by %.0f%%", (s.Ratio/targetRatio-1)*100)),
		})
	}
	if s := mainSummary(res, sums); s != nil {
		rows = append(rows, Row{
			ID:       "B2",
			Metric:   fmt.Sprintf("API writes per MyDatabase to converge (%s); by verb below", s.Settings),
			Ours:     fmt.Sprintf("%.2f (+ %.1f event writes)", s.WritesPerDB, s.EventsPerDB),
			Baseline: fmt.Sprintf("%.2f", s.RawWritesPerDB),
			Ratio:    fmt.Sprintf("%.2f×", s.WritesPerDB/s.RawWritesPerDB),
			Target:   fmt.Sprintf("≤ %d (12 children + 2)", targetWritesPerDB),
			Result:   verdict(s.WritesPerDB <= targetWritesPerDB, fmt.Sprintf("by %.2f writes", s.WritesPerDB-targetWritesPerDB)),
		}, Row{
			ID:       "B2",
			Metric:   "conflicts (409) per write",
			Ours:     fmt.Sprintf("%.2f%%", s.ConflictRate*100),
			Baseline: "0%",
			Ratio:    "",
			Target:   "< 1%",
			Result:   verdict(s.ConflictRate < targetConflicts, ""),
		})
	}
	if st := res.Steady; st != nil {
		rows = append(rows, Row{
			ID:     "B3",
			Metric: fmt.Sprintf("writes by a converged operator, %d MyDatabases: %.0f s idle / resync window %.0f s (%.0f reconciles) / after restart", st.N, st.QuietSeconds, st.ResyncSeconds, st.ResyncReconciles),
			Ours: fmt.Sprintf("%d / %d / %d", st.QuietRequests.Writes+st.QuietRequests.EventWrites,
				st.ResyncRequests.Writes+st.ResyncRequests.EventWrites, st.RestartRequests.Writes+st.RestartRequests.EventWrites),
			Baseline: "0",
			Target:   "0",
			Result: verdict(st.QuietRequests.Writes+st.QuietRequests.EventWrites+st.ResyncRequests.Writes+
				st.ResyncRequests.EventWrites+st.RestartRequests.Writes+st.RestartRequests.EventWrites == 0, ""),
		}, Row{
			ID:       "B3",
			Metric:   fmt.Sprintf("after a restart, every one of %d MyDatabases reconciled (from manager start, cache sync %.1f s included)", st.N, st.RestartStartSeconds),
			Ours:     fmt.Sprintf("%.1f s (%d of %d)", st.RestartReverifySeconds, st.RestartReconciled, st.N),
			Baseline: "",
			Target:   fmt.Sprintf("≤ %.0f s", targetReverify.Seconds()),
			Result: verdict(st.RestartReconciled == st.N && st.RestartReverifySeconds <= targetReverify.Seconds(),
				fmt.Sprintf("by %.1f s", st.RestartReverifySeconds-targetReverify.Seconds())),
		}, Row{
			ID: "B4",
			Metric: fmt.Sprintf("operator live heap per managed MyDatabase, %d converged: marginal (heap with %d − heap with %d, per MyDatabase); "+
				"average over all %d (one-time allocations included); average after a restart", st.N, st.N, st.N/2, st.N),
			Ours:   fmt.Sprintf("%.1f KiB; %.1f KiB; %.1f KiB", st.HeapPerDBMarginal/1024, st.HeapPerDB/1024, st.HeapPerDBAfterRestart/1024),
			Target: "≤ 30 KiB",
			Result: verdict(st.HeapPerDBMarginal <= targetHeapPerDB,
				fmt.Sprintf("by %.1f KiB", (st.HeapPerDBMarginal-targetHeapPerDB)/1024)),
		})
		for _, h := range res.Heap {
			rows = append(rows, Row{
				ID:     "B4",
				Metric: fmt.Sprintf("operator live heap per managed MyDatabase with %s, %d converged (control plane of its own): marginal; average", h.Settings.Flags(), h.N),
				Ours:   fmt.Sprintf("%.1f KiB; %.1f KiB", h.HeapPerDBMarginal/1024, h.HeapPerDB/1024),
				Target: "≤ 30 KiB",
				Result: "experiment: " + verdict(h.HeapPerDBMarginal <= targetHeapPerDB, fmt.Sprintf("by %.1f KiB", (h.HeapPerDBMarginal-targetHeapPerDB)/1024)),
			})
		}
		if st.Unrelated > 0 {
			rows = append(rows, Row{
				ID:     "B4",
				Metric: fmt.Sprintf("heap growth from %d unrelated %d KiB Secrets and ConfigMaps in other namespaces", st.Unrelated, st.UnrelatedBytes>>10),
				Ours:   fmt.Sprintf("%+.2f MB", float64(st.UnrelatedGrowth)/1e6),
				Target: "< 5 MB",
				Result: verdict(st.UnrelatedGrowth < targetUnrelated, fmt.Sprintf("by %.1f MB", float64(st.UnrelatedGrowth-targetUnrelated)/1e6)),
			})
		}
		if st.Edits > 0 {
			p99 := percentile(st.EditLatencyMs, 99)
			rows = append(rows, Row{
				ID: "B5",
				Metric: fmt.Sprintf("spec edit → status at the new generation (Ready condition), %d MyDatabases present, %d edits at %.0f/s: p50 / p99 / max",
					st.N, st.Edits, st.EditRate),
				Ours: fmt.Sprintf("%.0f / %.0f / %.0f ms (%d missed)", percentile(st.EditLatencyMs, 50), p99,
					percentile(st.EditLatencyMs, 100), st.EditMissed),
				Target: "p99 < 1 s",
				Result: verdict(st.EditMissed == 0 && p99 < float64(targetEditP99.Milliseconds()), fmt.Sprintf("by %.0f ms", p99-1000)),
			})
		}
	} else {
		for _, id := range []string{"B3", "B4", "B5"} {
			rows = append(rows, Row{ID: id, Metric: "steady state", Ours: "not measured (skipped)", Result: "not measured"})
		}
	}
	if s := mainSummary(res, sums); s != nil {
		rows = append(rows, Row{
			ID:     "B6",
			Metric: fmt.Sprintf("reconciles per MyDatabase until converged (controller_runtime_reconcile_total, %s); until quiet", s.Settings),
			Ours:   fmt.Sprintf("%.2f; %.2f (per DB p50/p99/max %s)", s.ReconcilesConv, s.ReconcilesQuiet, joinInts(s.ReconcilesPerDB)),
			Target: fmt.Sprintf("≤ %d", targetReconcilesPerD),
			Result: verdict(s.ReconcilesConv <= targetReconcilesPerD, fmt.Sprintf("by %.2f", s.ReconcilesConv-targetReconcilesPerD)),
		})
	}
	rows = append(rows, fullRow(res, summarizeFull(res), "B7", 0))
	return append(rows, scaleRows(res.Scale)...)
}

func markdown(res *Results, sums []*SettingsSummary, rows []Row, command, notes string) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	o := res.Options
	p("# Benchmarks\n\n")
	p("Generated by `make bench` (test/bench): do not edit by hand, except between the notes markers at the end.\n\n")
	p("- Command: `%s`\n", command)
	p("- Run %s, took %s. Machine: %d CPUs (shared; load average %s before, %s after), %s.\n",
		res.Started.UTC().Format("2006-01-02 15:04 MST"), time.Duration(res.Seconds*float64(time.Second)).Round(time.Second),
		res.Machine.CPUs, res.Machine.LoadBefore, res.Machine.LoadAfter, res.Machine.GoVersion)
	p("- Control plane: etcd and kube-apiserver (envtest, binaries from hack/k8s-binaries.sh), a fresh one for every convergence run; no StatefulSet controller, so \"converged\" means every child exists and the status describes the current generation (the Ready condition's observedGeneration: status.observedGeneration itself moves only at Ready, phase Provisioning here, never Stalled).\n")
	p("- The operator runs in the harness process, wired as in cmd/main.go (same cache options, client QPS/burst per `--kube-api-qps`/`--kube-api-burst`, uncompressed answers per `--kube-api-compression=false`, workers). Its requests are counted at the HTTP transport, its writes by the counting client, its reconciles by controller-runtime's metrics.\n")
	p("- Baseline: a raw client making the same writes from the same builders (create the MyDatabase, finalizer patch, two Secret creates, eight applies: ConfigMap, two Services, the instance managers' ServiceAccount, Role, RoleBinding and Lease, StatefulSet; status patch) with as many goroutines as the operator has workers, no client-side rate limit, in the same round.\n")
	p("- Medians of %d rounds; ratios are taken within a round (operator and raw runs alternate order between rounds).\n", o.Rounds)
	if len(res.Full) > 0 {
		p("- B7 alone runs on a whole simulated cluster (KWOK, real kube-controller-manager and kube-scheduler, pods Running and Ready): see its section.\n")
	}
	p("\n")

	p("## Summary\n\n")
	p("| | metric | ours | baseline | ratio | target | result | command |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		p("| %s | %s | %s | %s | %s | %s | %s | `%s` |\n", r.ID, r.Metric, r.Ours, r.Baseline, r.Ratio, r.Target, r.Result,
			cmp.Or(r.Command, command))
	}
	p("\n![MyDatabases converged over time](benchmarks-converge.png)\n\n")

	if len(sums) > 0 {
		p("## B1, B2, B6 by operator settings (workers/QPS/burst)\n\n")
		p("cmd/main.go's defaults are %s. Medians over rounds, N = %d.\n\n", o.Defaults.Flags(), o.N)
		p("| settings | ours | raw | ratio | writes/DB | event writes/DB | live reads/DB | reconciles/DB (converged; quiet) | client-side throttling: total wait, requests > 25 ms, log lines; wait outside events | CPU until converged: etcd+apiserver; harness process (raw run) | Stalled seen |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, s := range sums {
			p("| %s | %.1f s | %.1f s | %.2f× | %.2f | %.2f | %.2f | %.2f; %.2f | %.1f s, %.0f, %.0f; %.1f s | %.1f s (%.1f s); %.1f s (%.1f s) | %.0f |\n",
				s.Settings.Flags(), s.OursSeconds, s.RawSeconds, s.Ratio, s.WritesPerDB, s.EventsPerDB, s.LiveReadsPerDB,
				s.ReconcilesConv, s.ReconcilesQuiet, s.ThrottleSeconds, s.Throttled25, s.ThrottleLogs, s.ThrottleSync,
				s.ControlPlaneCPU, s.RawControlPlaneCPU, s.ProcessCPU, s.RawProcessCPU, s.Stalled)
		}
		p("\n\"Client-side throttling\" is the summed wait in client-go's rate limiters (rest_client_rate_limiter_duration_seconds; only the operator's client is rate-limited in this process), the requests that waited over 25 ms, and client-go's \"Waited before sending request\" log lines (waits over 50 ms); \"wait outside events\" sums, from those log lines, the waits of every request but the event recorder's, which it sends in the background: that is the part that slows reconciles. \"CPU until converged\" is the user+system time of etcd and kube-apiserver together (from /proc) and of the harness process (the operator, the tracker's watches, the creating client; in raw runs the raw client), from the first create until the last MyDatabase converged; the two CPUs of the machine are shared with other work. controller-runtime gives every kind its own rate limiter, so --kube-api-qps applies per kind, and the event recorder has its own.\n\n")

		s := mainSummary(res, sums)
		p("### B2: writes per MyDatabase by request (%s, median round)\n\n", s.Settings.Flags())
		p("| request | per MyDatabase |\n|---|---|\n")
		for _, k := range sortedKeys(s.WritesByVerb) {
			p("| %s | %.2f |\n", k, float64(s.WritesByVerb[k])/float64(o.N))
		}
		if s.medianRun != nil {
			p("| events (CREATE/PATCH events) | %.2f |\n", float64(s.medianRun.Requests.EventWrites)/float64(o.N))
			p("\nWhy the reconciler applied (its V(1) log, per MyDatabase): ")
			parts := make([]string, 0, len(s.ApplyLog))
			for _, k := range sortedKeys(s.ApplyLog) {
				parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(s.ApplyLog[k])/float64(o.N)))
			}
			p("%s.\n\nAll requests of the median round (verb resource code: count): %s.\n\n", strings.Join(parts, ", "), countsString(s.medianRun.Requests.ByRequest))
		}
	}

	if st := res.Steady; st != nil {
		p("## B3, B4, B5: %d converged MyDatabases (operator %s, informer resync period %s)\n\n", st.N, st.Settings.Flags(), st.Resync)
		b.WriteString(steadyMarkdown(st))
		p("\n")
	}

	b.WriteString(fullMarkdown(res, summarizeFull(res), "B7", "benchmarks-full.png"))

	if res.TrackerRelists > 0 {
		var inRuns int64
		for _, r := range res.Converge {
			inRuns += r.TrackerRelists
		}
		p("Note: %d times a tracker saw no watch event for a while although MyDatabases had not all converged, and read the state with lists instead (%d of them in the convergence runs below, whose times then include that wait; the others in the steady-state or heap phases, whose convergence times are not targets).\n\n",
			res.TrackerRelists, inRuns)
	}
	p("## Every convergence run\n\n%s\n", runsTable(res.Converge))
	p("CPU from the first create until the last MyDatabase converged: etcd and kube-apiserver; this process; every other process of the machine; and the time the hypervisor gave this machine's CPUs to others while they had work (steal, from /proc/stat). The last two slow a run without being part of it.\n\n")
	b.WriteString(scaleMarkdown(res.Scale))
	p("\n## Notes\n\n%s%s%s\n", notesBegin, notes, notesEnd)
	return b.String()
}

// runsTable lists convergence runs.
func runsTable(runs []*Run) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("| round | mode | settings | load | seconds | CPU s: etcd+apiserver; harness; other processes; stolen | writes | event writes | reconciles (converged; quiet) | reconcile errors | throttle wait (outside events, by request) | Stalled seen |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		settings := r.Settings.String()
		if r.Mode == modeRaw {
			settings = fmt.Sprintf("%d workers", r.Settings.Workers)
		}
		waits := make([]string, 0, len(r.ThrottleByRequest))
		for _, k := range sortedKeys(r.ThrottleByRequest) {
			waits = append(waits, fmt.Sprintf("%s %.1f s", k, r.ThrottleByRequest[k]))
		}
		p("| %d | %s | %s | %s | %.1f | %.1f; %.1f; %.1f; %.1f | %d | %d | %.0f; %.0f | %.0f | %.1f s (%s) | %d |\n", r.Round, r.Mode, settings, r.Load, r.Seconds,
			r.ControlPlaneCPU, r.ProcessCPU, r.OtherCPU, r.StolenCPU, r.Requests.Writes, r.Requests.EventWrites, r.ReconcilesAtConverged, r.Reconciles, r.ReconcileErrors,
			r.ThrottleWaitSeconds, strings.Join(waits, ", "), r.Stalled)
	}
	return b.String()
}

// steadyMarkdown is the list of a steady-state section (B3–B5, B8).
func steadyMarkdown(st *Steady) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("- Converged in %.1f s (one control plane for all of this section): %.2f writes, %.2f event writes and %.2f reconciles per MyDatabase, %d conflicts; client-side throttling wait %.1f s.\n",
		st.ConvergeSeconds, float64(st.ConvergeRequests.Writes)/float64(st.N), float64(st.ConvergeRequests.EventWrites)/float64(st.N),
		st.ConvergeReconciles/float64(st.N), st.ConvergeRequests.Conflicts, st.ConvergeThrottle)
	p("- Heap (runtime/metrics /gc/heap/live:bytes after two runtime.GC, the harness idle): %s synced with no MyDatabase, %s with %d converged, %s with %d: %.1f KiB per MyDatabase of the second half (marginal), %.1f KiB on average over all %d. After the restart: %s (%.1f KiB per MyDatabase against the same empty baseline).\n",
		mib(st.HeapEmpty), mib(st.HeapHalf), st.N/2, mib(st.HeapConverged), st.N, st.HeapPerDBMarginal/1024, st.HeapPerDB/1024, st.N,
		mib(st.HeapAfterRestart), st.HeapPerDBAfterRestart/1024)
	p("- Idle %.0f s: %d writes, %d event writes, %d reads.\n", st.QuietSeconds, st.QuietRequests.Writes, st.QuietRequests.EventWrites, st.QuietRequests.LiveReads)
	if st.ResyncSeconds > 0 {
		p("- Resync: the operator restarted with this resync period and was watched from the end of its start-up reconciles until 2.3 periods after it started, and for at least 1.2 periods (%.0f s), so that every informer resynced at least once (periods are jittered ±10%%, and a handler registered just after its informer started is first due on the second tick): %.0f reconciles, %d writes, %d event writes, %d reads.\n",
			st.ResyncSeconds, st.ResyncReconciles, st.ResyncRequests.Writes, st.ResyncRequests.EventWrites, st.ResyncRequests.LiveReads)
	}
	p("- Restart: informers synced %.1f s after the manager started; all %d MyDatabases reconciled %.1f s after it started (%d reconciles); %d writes, %d event writes; requests: %s.\n",
		st.RestartStartSeconds, st.RestartReconciled, st.RestartReverifySeconds, st.RestartReconciles, st.RestartRequests.Writes, st.RestartRequests.EventWrites, countsString(st.RestartRequests.ByRequest))
	if st.RestartSyncCPU.Process > 0 {
		p("- Restart CPU (process: getrusage, its collector's share: runtime/metrics /cpu/classes/gc/total, etcd+apiserver: /proc): until synced, process %s; from synced until all were reconciled (%.1f s), process %s.\n",
			st.RestartSyncCPU, st.RestartReverifySeconds-st.RestartStartSeconds, st.RestartPassesCPU)
	}
	if st.Unrelated > 0 {
		p("- Unrelated objects: %d Secrets and ConfigMaps of %d KiB in 10 other namespaces, labelled managed-by=someone-else, created by a separate client in %.0f s: live heap %s before, %s after (%+.2f MB); the operator made %d requests meanwhile.\n",
			st.Unrelated, st.UnrelatedBytes>>10, st.UnrelatedSeconds, mib(st.HeapBeforeUnrel), mib(st.HeapAfterUnrel), float64(st.UnrelatedGrowth)/1e6, st.UnrelatedReqs.Writes+st.UnrelatedReqs.LiveReads)
	}
	if st.Edits > 0 {
		p("- Spec edits: %d MyDatabases got spec.parameters.work_mem changed, %.0f per second; latency from sending the patch to the watch event whose status describes the new generation: p50 %.0f ms, p90 %.0f ms, p99 %.0f ms, max %.0f ms, %d missed. Writes: %s (%.0f reconciles); client-side throttling wait %.2f s.\n",
			st.Edits, st.EditRate, percentile(st.EditLatencyMs, 50), percentile(st.EditLatencyMs, 90), percentile(st.EditLatencyMs, 99),
			percentile(st.EditLatencyMs, 100), st.EditMissed, countsString(st.EditWrites), st.EditReconciles, st.EditThrottle)
	}
	return b.String()
}

// chart draws, for the settings that are not experiments, the median
// round of the operator (solid) and the raw client with as many workers in
// the same round (dashed, grey).
func chart(sums []*SettingsSummary, path string) error {
	p := plot.New()
	p.Title.Text = "MyDatabases converged over time (median round of each setting)"
	p.X.Label.Text = "seconds since the first MyDatabase was created"
	p.Y.Label.Text = "MyDatabases converged"
	p.Add(plotter.NewGrid())
	colors := []color.RGBA{{R: 0xd6, G: 0x27, B: 0x28, A: 255}, {R: 0x1f, G: 0x77, B: 0xb4, A: 255},
		{R: 0x2c, G: 0xa0, B: 0x2c, A: 255}, {R: 0x94, G: 0x67, B: 0xbd, A: 255}}
	greys := []color.RGBA{{A: 255}, {R: 0x80, G: 0x80, B: 0x80, A: 255}}
	add := func(run *Run, name string, c color.Color, dashes []vg.Length) error {
		return addCurve(p, run.Curve, name, c, dashes)
	}
	rawDrawn := map[int]bool{}
	drawn := 0
	for _, s := range sums {
		if s.Settings.CachedReads || s.medianRun == nil || drawn == len(colors) {
			continue
		}
		if err := add(s.medianRun, fmt.Sprintf("operator %s: %.1f s", s.Settings, s.medianRun.Seconds), colors[drawn], nil); err != nil {
			return err
		}
		drawn++
		if r := s.medianRaw; r != nil && !rawDrawn[r.Settings.Workers] {
			grey := greys[len(rawDrawn)%len(greys)]
			rawDrawn[r.Settings.Workers] = true
			if err := add(r, fmt.Sprintf("raw client, %d workers (round %d): %.1f s", r.Settings.Workers, r.Round, r.Seconds), grey,
				[]vg.Length{vg.Points(6), vg.Points(3)}); err != nil {
				return err
			}
		}
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(10), vg.Points(-5)
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func countsString(m map[string]int) string {
	parts := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// joinRatios lists per-round ratios.
func joinRatios(v []float64) string {
	parts := make([]string, len(v))
	for i, f := range v {
		parts[i] = fmt.Sprintf("%.2f", f)
	}
	return strings.Join(parts, ", ")
}

func joinInts(v []int) string {
	parts := make([]string, len(v))
	for i, n := range v {
		parts[i] = fmt.Sprint(n)
	}
	return strings.Join(parts, "/")
}

// medianOf says over how many rounds a figure is taken.
func medianOf(rounds int) string {
	if rounds == 1 {
		return "one round"
	}
	return fmt.Sprintf("median of %d rounds", rounds)
}

package bench

import (
	"cmp"
	"fmt"
	"image/color"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// FullSummary is B7: medians over the rounds of the full tier.
type FullSummary struct {
	N                 int           `json:"n"`
	Replicas          int           `json:"replicas"`
	Nodes             int           `json:"nodes"`
	Rounds            int           `json:"rounds"`
	Settings          Settings      `json:"settings"`
	Limits            ClusterLimits `json:"cluster_limits"`
	ProvisionerLimits string        `json:"provisioner_limits"`
	OursSeconds       float64       `json:"ours_seconds"`
	RawSeconds        float64       `json:"raw_seconds"`
	Ratio             float64       `json:"ratio"` // median of per-round ratios
	Ratios            []float64     `json:"ratios"`
	// ProvisionerThrottle is the median, over every run, of the
	// provisioner's client-side throttling wait.
	ProvisionerThrottle float64 `json:"provisioner_throttle_wait_seconds"`
	medianRun           *FullRun
	medianRaw           *FullRun
}

// summarizeFull pairs the operator and raw runs of each round; nil when
// no round has both.
func summarizeFull(res *Results) *FullSummary {
	var ours, raws, ratios, throttle []float64
	var runs []*FullRun
	for _, run := range res.Full {
		throttle = append(throttle, run.ProvisionerThrottleSeconds)
		if run.Mode != modeOperator {
			continue
		}
		raw := fullRaw(res, run.Round)
		if raw == nil {
			continue
		}
		runs = append(runs, run)
		ours, raws = append(ours, run.Seconds), append(raws, raw.Seconds)
		ratios = append(ratios, run.Seconds/raw.Seconds)
	}
	if len(runs) == 0 {
		return nil
	}
	first := runs[0]
	sum := &FullSummary{N: first.N, Replicas: first.Replicas, Nodes: first.Nodes, Rounds: len(runs), Settings: first.Settings,
		Limits: first.Limits, ProvisionerLimits: first.ProvisionerLimits,
		OursSeconds: median(ours), RawSeconds: median(raws), Ratio: median(ratios), Ratios: ratios,
		ProvisionerThrottle: median(throttle)}
	slices.SortFunc(runs, func(a, b *FullRun) int { return cmp.Compare(a.Seconds, b.Seconds) })
	sum.medianRun = runs[(len(runs)-1)/2]
	sum.medianRaw = fullRaw(res, sum.medianRun.Round)
	return sum
}

func fullRaw(res *Results, round int) *FullRun {
	for _, r := range res.Full {
		if r.Mode == modeRaw && r.Round == round {
			return r
		}
	}
	return nil
}

// fullRow is the summary row of a full tier: id B7, or B9 at scale with
// its target ratio (0: only reported).
func fullRow(res *Results, s *FullSummary, id string, target float64) Row {
	targetText := "report"
	if target > 0 {
		targetText = fmt.Sprintf("≤ %.1f× raw", target)
	}
	if s == nil {
		reason := "not measured (-full-n 0)"
		if len(res.Full) > 0 {
			reason = "not measured: no round with both runs done (see the runs below)"
		}
		return Row{ID: id, Metric: "full tier on a KWOK cluster (StatefulSet controller, pods Ready)",
			Ours: "not measured", Target: targetText, Result: reason}
	}
	label := "operator " + s.Settings.Flags()
	if s.Settings == res.Options.Defaults {
		label = "cmd/main.go defaults " + s.Settings.String()
	}
	result := "reported"
	if target > 0 {
		result = verdict(s.Ratio <= target, fmt.Sprintf("by %.0f%%", (s.Ratio/target-1)*100))
	}
	if s.ProvisionerThrottle > 0 {
		result += fmt.Sprintf("; dev-provisioner throttled %.0f s by its client's limit (%s): see %s below", s.ProvisionerThrottle, s.ProvisionerLimits, id)
	}
	servers := "server"
	if s.Replicas > 1 {
		servers = "servers"
	}
	return Row{
		ID: id,
		Metric: fmt.Sprintf("full tier: time until %d MyDatabases (%d "+servers+" each) are Ready, pods Running and Ready on %d KWOK nodes "+
			"(real kube-controller-manager and kube-scheduler at %s; dev-provisioner volumes; %s), %s",
			s.N, s.Replicas, s.Nodes, s.Limits, label, medianOf(s.Rounds)),
		Ours:     fmt.Sprintf("%.1f s", s.OursSeconds),
		Baseline: fmt.Sprintf("%.1f s (raw client, %d workers, and the StatefulSet controller alone: until every readyReplicas == replicas)", s.RawSeconds, s.Settings.Workers),
		Ratio:    fmt.Sprintf("%.2f× (rounds: %s)", s.Ratio, joinRatios(s.Ratios)),
		Target:   targetText,
		Result:   result,
	}
}

// fullMarkdown is the section of a full tier (B7, or B9 at scale), whose
// chart is the file chartFile.
func fullMarkdown(res *Results, s *FullSummary, id, chartFile string) string {
	if len(res.Full) == 0 {
		return ""
	}
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	o := res.Options
	p("## %s: full tier on a KWOK cluster (%d MyDatabases of %d servers)\n\n", id, o.FullN, o.fullReplicas())
	p("- Every run has a KWOK cluster of its own (kwokctl, binary runtime, the binaries of hack/k8s-binaries.sh): etcd, kube-apiserver, a real kube-controller-manager (StatefulSet, PV binder, garbage collector, ...) and kube-scheduler, kwok-controller with %d fake nodes of 110 pods, on which pods are marked Running and Ready (no container runs). kube-controller-manager and kube-scheduler run with %s (instead of their defaults, 20/30 and 50/100, so that they are not the bottleneck). Volumes: cmd/dev-provisioner as a process (hostPath PersistentVolumes, WaitForFirstConsumer), client limits: %s.\n",
		fullNodes(o), o.FullLimits, provisionerLimitsOf(res))
	p("- Before the clock starts: one MyDatabase in another namespace through the raw client's writes until its StatefulSet is ready (the first claim, volume, pod and StatefulSet of a fresh cluster are slow), and in operator runs the operator started and idle.\n")
	p("- Ours: the operator in this process (%s) and %d MyDatabases created by as many goroutines as it has workers; done when every MyDatabase has condition Ready=True, which it sets once its StatefulSet runs the current template with every pod ready. Baseline: no operator; the raw client of B1 makes the same writes from the same builders, and the StatefulSet controller, scheduler, provisioner and KWOK do the rest; done when every StatefulSet has readyReplicas == replicas.\n",
		o.Defaults.Flags(), o.FullN)
	rounds := fmt.Sprintf("%d rounds", o.FullRounds)
	if o.FullRounds == 1 {
		rounds = "One round"
	}
	p("- Milestones are the times the harness's own informers saw each object get there, from the first create. %s (a run takes one to several minutes with its cluster); ratios are taken within a round, and operator and raw runs alternate order between rounds.\n\n", rounds)
	if s != nil {
		if s.ProvisionerThrottle > 0 && s.ProvisionerLimits == "" {
			p("**What paces both runs: dev-provisioner.** It takes no flag for its client's limits, so client-go's default 5 QPS, burst 10 applies to its PersistentVolume creates and events together: it waited %.0f s on its rate limiter per run (median; summed over its workers), and claims were bound at a steady %.1f per second in the median raw run. The ratio therefore compares two runs paced by the volumes, not the operator against the StatefulSet controller. Given --kube-api-qps and --kube-api-burst flags, the harness passes it -full-qps/-full-burst (it checks its -h).\n\n",
				s.ProvisionerThrottle, claimRate(s.medianRaw))
		}
		p("![%s: the full tier over time](%s)\n\n", id, chartFile)
	}
	p("| round | mode | load | set-up s | last PVC Bound | last pod scheduled | last pod Running and Ready | last StatefulSet ready | last MyDatabase Ready | MyDatabase Ready after its StatefulSet: p50 / p99 / max | done | writes (+ events) | operator: reconciles; mean queue wait, mean reconcile; client-side throttling | provisioner throttling: waits, s | CPU s by process |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range res.Full {
		dbReady, lag, reconciles := "—", "—", "—"
		if r.Mode == modeOperator {
			reconciles = fmt.Sprintf("%.0f (%.0f errors); %.2f s, %.0f ms; %.1f s", r.Reconciles, r.ReconcileErrors, r.QueueWaitMean,
				r.ReconcileTimeMean*1000, r.ThrottleWaitSeconds)
			dbReady = fmt.Sprintf("%.1f", r.last(milestoneDBReady))
			lag = fmt.Sprintf("%.1f / %.1f / %.1f s", percentile(r.ReadyLag, 50), percentile(r.ReadyLag, 99), percentile(r.ReadyLag, 100))
		}
		p("| %d | %s | %s | %.0f | %.1f | %.1f | %.1f | %.1f | %s | %s | %d/%d in %.1f s | %d (+%d) | %s | %d, %.1f | %s |\n",
			r.Round, r.Mode, r.Load, r.SetupSeconds, r.last(milestonePVCBound), r.last(milestonePodScheduled), r.last(milestonePodReady),
			r.last(milestoneSTSReady), dbReady, lag, r.Done, r.N, r.Seconds, r.Requests.Writes, r.Requests.EventWrites, reconciles,
			r.ProvisionerThrottleWaits, r.ProvisionerThrottleSeconds, cpuString(r.CPU))
	}
	p("\nTimes are seconds since the first create. \"MyDatabase Ready after its StatefulSet\" is, per MyDatabase, the time from its StatefulSet's readyReplicas == replicas to its condition Ready=True, both as the harness's informers saw them: the latency of the operator's status. \"CPU s by process\" is user+system time from the first create until done (from /proc): the cluster's components, dev-provisioner, and \"harness\", this process (with the operator in operator runs). \"Provisioner throttling\" sums the waits over 50 ms that client-go logged in dev-provisioner (run at -v=3).\n\n")
	return b.String()
}

// claimRate is how many claims per second were bound in a run.
func claimRate(r *FullRun) float64 {
	if r == nil || r.last(milestonePVCBound) <= 0 {
		return 0
	}
	return float64(len(r.Milestones[milestonePVCBound])) / r.last(milestonePVCBound)
}

func provisionerLimitsOf(res *Results) string {
	if len(res.Full) == 0 {
		return ""
	}
	return res.Full[0].ProvisionerLimits
}

// fullChart draws the median round of B7: when the MyDatabases were Ready
// and their StatefulSets ready with the operator, when the StatefulSets
// were ready with the raw client, and when each run's claims were bound.
func fullChart(s *FullSummary, id, path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: %d MyDatabases of %d servers on a KWOK cluster (round %d)", id, s.N, s.Replicas, s.medianRun.Round)
	p.X.Label.Text = "seconds since the first MyDatabase was created"
	p.Y.Label.Text = "objects"
	p.Add(plotter.NewGrid())
	red, grey := color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 255}, color.RGBA{A: 255}
	lightRed, lightGrey := color.RGBA{R: 0xf0, G: 0xa0, B: 0xa0, A: 255}, color.RGBA{R: 0xa0, G: 0xa0, B: 0xa0, A: 255}
	dashed, dotted := []vg.Length{vg.Points(6), vg.Points(3)}, []vg.Length{vg.Points(2), vg.Points(2)}
	type line struct {
		run     *FullRun
		m, name string
		c       color.Color
		dashes  []vg.Length
	}
	lines := []line{
		{s.medianRun, milestoneDBReady, "operator: MyDatabases Ready", red, nil},
		{s.medianRun, milestoneSTSReady, "operator: StatefulSets ready", red, dotted},
		{s.medianRun, milestonePVCBound, "operator: PVCs Bound", lightRed, dotted},
		{s.medianRaw, milestoneSTSReady, "raw client: StatefulSets ready", grey, dashed},
		{s.medianRaw, milestonePVCBound, "raw client: PVCs Bound", lightGrey, dotted},
	}
	for _, l := range lines {
		if l.run == nil {
			continue
		}
		if err := addCurve(p, l.run.Milestones[l.m], fmt.Sprintf("%s (last %.1f s)", l.name, l.run.last(l.m)), l.c, l.dashes); err != nil {
			return err
		}
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(10), vg.Points(-5)
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}

// addCurve draws a cumulative curve: how many objects were done at each
// time.
func addCurve(p *plot.Plot, curve []float64, name string, c color.Color, dashes []vg.Length) error {
	pts := make(plotter.XYs, 0, len(curve)+1)
	pts = append(pts, plotter.XY{X: 0, Y: 0})
	for j, t := range curve {
		pts = append(pts, plotter.XY{X: t, Y: float64(j + 1)})
	}
	l, err := plotter.NewLine(pts)
	if err != nil {
		return err
	}
	l.Color, l.Width, l.Dashes = c, vg.Points(1.5), dashes
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}

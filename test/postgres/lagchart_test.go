package postgres

import (
	"bytes"
	"fmt"
	"math"
	"time"
)

// lagSample is one scrape of the primary and the replica during
// TestMetrics's pause and resume.
type lagSample struct {
	at                         float64 // seconds since the first scrape
	primaryBytes, replicaBytes float64
	replicaSecs, paused        float64
}

// lagChart draws the samples as an SVG: the lag in bytes (the primary's
// and the replica's view) above, the replica's lag in seconds below, the
// scrapes with replay paused shaded.
func lagChart(samples []lagSample, major int) []byte {
	const width, plotH, left, top, gap = 760.0, 150.0, 70.0, 64.0, 50.0
	plotW := width - left - 20
	end := samples[len(samples)-1].at
	x := func(s float64) float64 { return left + s/end*plotW }
	var b bytes.Buffer
	height := top + 2*plotH + gap + 50
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="20" font-size="14">Replication lag while the replica's replay is paused, then resumed</text>`+"\n", left)
	fmt.Fprintf(&b, `<text x="%.0f" y="38">TestMetrics (test/postgres): PostgreSQL %d, %d scrapes of each server's /metrics, %s</text>`+"\n",
		left, major, len(samples), time.Now().UTC().Format("2006-01-02"))
	plot := func(y0 float64, title, unit string, series []struct {
		name, color string
		v           func(lagSample) float64
	}) {
		peak := 0.0
		for _, s := range samples {
			for _, se := range series {
				peak = math.Max(peak, se.v(s))
			}
		}
		if peak == 0 {
			peak = 1
		}
		y := func(v float64) float64 { return y0 + plotH - v/peak*plotH }
		for i, s := range samples {
			if s.paused == 1 && i > 0 {
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.0f" width="%.1f" height="%.0f" fill="#eee"/>`+"\n", x(samples[i-1].at), y0, x(s.at)-x(samples[i-1].at), plotH)
			}
		}
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", left, y0+plotH, left+plotW, y0+plotH)
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", left, y0, left, y0+plotH)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">%.4g</text>`+"\n", left-4, y0+8, peak/unitScale(unit))
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">0</text>`+"\n", left-4, y0+plotH)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">%s (%s)</text>`+"\n", left+4, y0-6, title, unit)
		for i, se := range series {
			var pts bytes.Buffer
			for _, s := range samples {
				fmt.Fprintf(&pts, "%.1f,%.1f ", x(s.at), y(se.v(s)))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", se.color, pts.String())
			fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="%s">%s</text>`+"\n", left+10, y0+16+float64(i)*16, se.color, se.name)
		}
	}
	type series = struct {
		name, color string
		v           func(lagSample) float64
	}
	plot(top, "lag", "KiB", []series{
		{"mydatabase_pg_replication_lag_bytes (primary)", "#1f77b4", func(s lagSample) float64 { return s.primaryBytes }},
		{"mydatabase_pg_replica_replay_lag_bytes (replica)", "#ff7f0e", func(s lagSample) float64 { return s.replicaBytes }},
	})
	plot(top+plotH+gap, "lag", "s", []series{
		{"mydatabase_pg_replica_replay_lag_seconds (replica)", "#2ca02c", func(s lagSample) float64 { return s.replicaSecs }},
	})
	axis := top + 2*plotH + gap
	for s := 0.0; s <= end; s++ {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%.0f</text>`+"\n", x(s), axis+16, s)
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">seconds since the first scrape; shaded: replay paused (pg_wal_replay_pause) while the primary writes</text>`+"\n", left, axis+36)
	b.WriteString("</svg>\n")
	return b.Bytes()
}

func unitScale(unit string) float64 {
	if unit == "KiB" {
		return 1024
	}
	return 1
}

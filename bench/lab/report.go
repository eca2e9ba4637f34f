package lab

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kvroute/kvroute/bench"
)

// Tables renders the result's tables (pure: the same Result gives the same tables).
func (r *Result) Tables() []bench.Table {
	pooled := r.Pooled.HitRate
	pts := bench.Table{Title: fmt.Sprintf("Arms × arrival speedup (%s, profile %s, %d workers)", r.Workload, r.Profile, r.Workers),
		Columns: []string{"arm", "arrival ×", "offered req/s", "hit rate", "of pooled", "placed, of pooled", "predicted", "TTFT p50", "TTFT p90", "TTFT p99",
			"ITL mean ms", "ITL p90 ms", "E2E mean", "imbalance", "utilization", "preempt", "failed"}}
	for _, p := range r.Points {
		of, placed := "–", "–"
		if pooled > 0 {
			of = bench.F(100*p.HitRate/pooled, 0) + " %"
			placed = bench.F(100*p.PlacedHitRate/pooled, 1) + " %"
		}
		pts.Rows = append(pts.Rows, []string{p.Arm, bench.F(p.ArrivalSpeedup, 2), bench.F(p.OfferedRPS, 2), bench.Pct(p.HitRate), of, placed,
			bench.Pct(p.PredictedHitRate), bench.F(p.TTFT.P50, 3), bench.F(p.TTFT.P90, 3), bench.F(p.TTFT.P99, 3),
			bench.F(1000*p.ITL.Mean, 1), bench.F(1000*p.ITL.P90, 1), bench.F(p.E2E.Mean, 2), bench.F(p.Imbalance, 2),
			bench.Pct(p.Utilization), fmt.Sprint(p.Preemptions), fmt.Sprint(p.Failed)})
	}
	gp := bench.Table{Title: "Goodput (highest swept offered req/s with TTFT p90 ≤ SLO there and below)", Columns: []string{"arm"}}
	for _, s := range r.SLOs {
		gp.Columns = append(gp.Columns, "p90 ≤ "+bench.FormatNum(s)+" s")
	}
	for _, p := range r.Points {
		if slices.ContainsFunc(gp.Rows, func(r []string) bool { return r[0] == p.Arm }) {
			continue
		}
		row := []string{p.Arm}
		for _, g := range r.Goodput[p.Arm] {
			row = append(row, bench.F(g, 2))
		}
		gp.Rows = append(gp.Rows, row)
	}
	out := []bench.Table{
		{Title: "Oracles", Columns: []string{"oracle", "capacity blocks", "hit rate"}, Rows: [][]string{
			{"unbounded", "–", bench.Pct(r.Unbounded.HitRate)},
			{"pooled", fmt.Sprint(r.Pooled.CapacityBlocks), bench.Pct(r.Pooled.HitRate)}}},
		pts, gp,
	}
	if len(r.Knees) > 0 {
		kt := bench.Table{Title: fmt.Sprintf("Goodput knee at TTFT p90 ≤ %s s (bisection over the arrival rate)", bench.FormatNum(r.KneeSLO)),
			Columns: []string{"arm", "passes at req/s", "TTFT p90 there", "fails at req/s", "runs"}}
		for _, k := range r.Knees {
			fail := "not found"
			if k.FailRPS > 0 {
				fail = bench.F(k.FailRPS, 2)
			}
			pass := "none"
			if k.PassRPS > 0 {
				pass = bench.F(k.PassRPS, 2)
			}
			kt.Rows = append(kt.Rows, []string{k.Arm, pass, bench.F(k.PassP90, 3), fail, fmt.Sprint(k.Runs)})
		}
		out = append(out, kt)
	}
	out = append(out, r.decisionTables()...)
	return append(out, r.timelineTables()...)
}

// Markdown is the tables as Markdown (deterministic).
func (r *Result) Markdown() string {
	var b strings.Builder
	for _, t := range r.Tables() {
		b.WriteString(bench.MarkdownTable(t))
		b.WriteString("\n")
	}
	return b.String()
}

// FillReport adds the result's tables, plots and notes to rep.
func FillReport(rep *bench.Report, r *Result) {
	rep.Tables = append(rep.Tables, r.Tables()...)
	rep.Data = r
	var arms []string
	for _, p := range r.Points {
		if !slices.Contains(arms, p.Arm) {
			arms = append(arms, p.Arm)
		}
	}
	lp := &bench.LinePlot{Title: "TTFT p90 against offered rate", XLabel: "offered req/s", YLabel: "TTFT p90 (s)"}
	hp := &bench.LinePlot{Title: "Engine hit rate against offered rate", XLabel: "offered req/s", YLabel: "hit rate"}
	for _, a := range arms {
		s := bench.Series{Name: a}
		h := bench.Series{Name: a}
		for _, p := range r.Points {
			if p.Arm == a {
				s.X, s.Y = append(s.X, p.OfferedRPS), append(s.Y, p.TTFT.P90)
				h.X, h.Y = append(h.X, p.OfferedRPS), append(h.Y, p.HitRate)
			}
		}
		lp.Series, hp.Series = append(lp.Series, s), append(hp.Series, h)
	}
	rep.AddPlot("ttft_p90.svg", lp.Title, lp.SVG())
	rep.AddPlot("hit_rate.svg", hp.Title, hp.SVG())
	r.addTimelinePlots(rep)
	rep.Notes = append(rep.Notes,
		"Virtual time: every figure is simulated model time; the run is deterministic (same seed and workload → the same tables and report.json data).",
		fmt.Sprintf("Hit rate = Σ engine cached_tokens / Σ prompt tokens; of pooled = hit rate / the pooled oracle's %s.", bench.Pct(r.Pooled.HitRate)),
		"TTFT p90 of a point with failed requests counts as missing every SLO.",
		"Windows group requests by arrival time; the calibration columns are the kvroute cost's learned fit t(K) = α·(1 + γ·K) seconds per prefill token on a worker with K active blocks (γ is what decisions use; α only scales).")
}

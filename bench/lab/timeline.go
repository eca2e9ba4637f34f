package lab

import (
	"fmt"
	"slices"

	"github.com/kvroute/kvroute/bench"
)

// A run's course over model time, beside its totals: the kvroute cost's learned coefficients sampled
// every CalibrationEvery (scoring/sched Machine.Calibration, the fit the router uses), and per Window of
// arrivals the engines' hit rate and the TTFT p90, so a change mid-run (Config.SpeedChanges) can be
// read off as before, during and after.

// Calibrated is implemented by a scheduler whose cost is learned online: the kvroute preset's machine.
// ok is false when the scheduler's decisions do not take the learned cost (another preset, a peer
// selector).
type Calibrated interface {
	Calibration() (c Calibration, ok bool)
}

// Calibration is one sample of the learned fit t(K) = α·(1 + γ·K) seconds per prefill token on a worker
// holding K active blocks (scoring.Calibrator).
type Calibration struct {
	// T is the model time of the sample, seconds from the first arrival.
	T float64 `json:"t_s"`
	// Alpha is seconds per prefill token on an idle worker; Beta the extra seconds per token per active
	// block; Gamma = β/α as the cost uses it (the prior until scoring.MinSamples observations).
	Alpha float64 `json:"alpha_s_per_token"`
	Beta  float64 `json:"beta_s_per_token_block"`
	Gamma float64 `json:"gamma_per_block"`
	// N counts the observations (prefill completions) so far.
	N int `json:"observations"`
	// DecodeB is the decode fit's extra seconds per generated token per context block decoded beside
	// a request, DecodeN its observations (completed requests) and MeanOutput the mean output length the
	// decode charge assumes (scoring/sched decode.go).
	DecodeB    float64 `json:"decode_b_s_per_token_block"`
	DecodeN    int     `json:"decode_observations"`
	MeanOutput float64 `json:"mean_output_tokens"`
}

// Window is what the requests arriving in [Start, Start+Window) saw.
type Window struct {
	Start    float64 `json:"start_s"`
	Requests int     `json:"requests"`
	Failed   int     `json:"failed,omitempty"`
	// HitRate is Σ engine cached tokens / Σ prompt tokens of the window's completed requests.
	HitRate float64 `json:"hit_rate"`
	// TTFTP90 is the window's TTFT p90 in seconds, failures counted at their time to failure.
	TTFTP90 float64 `json:"ttft_p90_s"`
}

// Timeline is one arm at one arrival speedup over model time.
type Timeline struct {
	Arm            string  `json:"arm"`
	ArrivalSpeedup float64 `json:"arrival_speedup"`
	// WindowS is the window length in seconds.
	WindowS float64  `json:"window_s"`
	Windows []Window `json:"windows"`
	// Calibration is empty for arms that learn nothing.
	Calibration []Calibration `json:"calibration,omitempty"`
	// Decisions explains the arm's decisions (arms whose cost is learned).
	Decisions *Decisions `json:"decisions,omitempty"`
}

// windows cuts a run's samples into windows of w seconds by arrival time.
func windows(samples []bench.E2ESample, w float64) []Window {
	if !(w > 0) || len(samples) == 0 {
		return nil
	}
	last := 0.0
	for i := range samples {
		last = max(last, samples[i].At)
	}
	n := int(last/w) + 1
	out := make([]Window, n)
	ttft := make([][]float64, n)
	prompt, cached := make([]int64, n), make([]int64, n)
	for i := range samples {
		s := &samples[i]
		k := min(int(s.At/w), n-1)
		out[k].Requests++
		ttft[k] = append(ttft[k], s.TTFT)
		if !s.OK() {
			out[k].Failed++
			continue
		}
		prompt[k] += int64(s.PromptTokens)
		cached[k] += int64(s.CachedTokens)
	}
	for k := range out {
		out[k].Start = float64(k) * w
		if prompt[k] > 0 {
			out[k].HitRate = float64(cached[k]) / float64(prompt[k])
		}
		slices.Sort(ttft[k])
		out[k].TTFTP90 = bench.Percentile(ttft[k], 0.9)
	}
	return out
}

// seriesName names a timeline in plots and tables: the arm, with its speedup when the run swept several.
func (r *Result) seriesName(tl *Timeline) string {
	for i := range r.Timelines {
		if r.Timelines[i].ArrivalSpeedup != tl.ArrivalSpeedup {
			return tl.Arm + " ×" + bench.FormatNum(tl.ArrivalSpeedup)
		}
	}
	return tl.Arm
}

// timelineTables are the windows per speedup (one row per window, hit rate and TTFT p90 per arm) and the
// learned calibration at each window's end (arms that learn).
func (r *Result) timelineTables() []bench.Table {
	var out []bench.Table
	var speedups []float64
	for _, tl := range r.Timelines {
		if !slices.Contains(speedups, tl.ArrivalSpeedup) {
			speedups = append(speedups, tl.ArrivalSpeedup)
		}
	}
	for _, x := range speedups {
		var tls []*Timeline
		for i := range r.Timelines {
			if r.Timelines[i].ArrivalSpeedup == x {
				tls = append(tls, &r.Timelines[i])
			}
		}
		if len(tls) == 0 || len(tls[0].Windows) == 0 {
			continue
		}
		w := tls[0].WindowS
		wt := bench.Table{Title: fmt.Sprintf("Windows of %s s by arrival time (arrival ×%s): hit rate / TTFT p90 (s)", bench.FormatNum(w), bench.FormatNum(x)),
			Columns: []string{"from s"}}
		ct := bench.Table{Title: fmt.Sprintf("Learned calibration at each window's end (arrival ×%s): γ per block / α µs per token / observations / decode b ns per token per block / mean output tokens", bench.FormatNum(x)),
			Columns: []string{"at s"}}
		var learners []*Timeline
		for _, tl := range tls {
			wt.Columns = append(wt.Columns, tl.Arm)
			if len(tl.Calibration) > 0 {
				learners = append(learners, tl)
				ct.Columns = append(ct.Columns, tl.Arm)
			}
		}
		rows := 0
		for _, tl := range tls {
			rows = max(rows, len(tl.Windows))
		}
		for k := range rows {
			row := []string{bench.FormatNum(float64(k) * w)}
			for _, tl := range tls {
				cell := "–"
				if k < len(tl.Windows) && tl.Windows[k].Requests > 0 {
					win := &tl.Windows[k]
					cell = bench.Pct(win.HitRate) + " / " + bench.F(win.TTFTP90, 3)
					if win.Failed > 0 {
						cell += fmt.Sprintf(" (%d failed)", win.Failed)
					}
				}
				row = append(row, cell)
			}
			wt.Rows = append(wt.Rows, row)
			if len(learners) == 0 {
				continue
			}
			end := float64(k+1) * w
			crow := []string{bench.FormatNum(end)}
			for _, tl := range learners {
				cell := "–"
				if c := calibrationAt(tl.Calibration, end); c != nil {
					cell = fmt.Sprintf("%.3g / %s / %d / %s / %s", c.Gamma, bench.F(1e6*c.Alpha, 2), c.N, bench.F(1e9*c.DecodeB, 2), bench.F(c.MeanOutput, 0))
				}
				crow = append(crow, cell)
			}
			ct.Rows = append(ct.Rows, crow)
		}
		out = append(out, wt)
		if len(learners) > 0 {
			out = append(out, ct)
		}
	}
	return out
}

// calibrationAt is the last sample at or before t, or nil.
func calibrationAt(cs []Calibration, t float64) *Calibration {
	var c *Calibration
	for i := range cs {
		if cs[i].T > t+1e-9 {
			break
		}
		c = &cs[i]
	}
	return c
}

// addTimelinePlots adds the learned γ and α over time and the windowed hit rate and TTFT p90.
func (r *Result) addTimelinePlots(rep *bench.Report) {
	gp := &bench.LinePlot{Title: "Learned slowdown γ per active block over model time", XLabel: "model time (s)", YLabel: "γ per block"}
	ap := &bench.LinePlot{Title: "Learned prefill time α per token over model time", XLabel: "model time (s)", YLabel: "α (µs per token)"}
	hp := &bench.LinePlot{Title: "Engine hit rate per window over model time", XLabel: "window start (s)", YLabel: "hit rate"}
	tp := &bench.LinePlot{Title: "TTFT p90 per window over model time", XLabel: "window start (s)", YLabel: "TTFT p90 (s)"}
	for i := range r.Timelines {
		tl := &r.Timelines[i]
		name := r.seriesName(tl)
		if len(tl.Calibration) > 0 {
			g, a := bench.Series{Name: name}, bench.Series{Name: name}
			for _, c := range tl.Calibration {
				g.X, g.Y = append(g.X, c.T), append(g.Y, c.Gamma)
				if c.Alpha > 0 {
					a.X, a.Y = append(a.X, c.T), append(a.Y, 1e6*c.Alpha)
				}
			}
			gp.Series = append(gp.Series, g)
			if len(a.X) > 0 {
				ap.Series = append(ap.Series, a)
			}
		}
		h, t := bench.Series{Name: name}, bench.Series{Name: name}
		for _, w := range tl.Windows {
			if w.Requests == 0 {
				continue
			}
			h.X, h.Y = append(h.X, w.Start), append(h.Y, w.HitRate)
			t.X, t.Y = append(t.X, w.Start), append(t.Y, w.TTFTP90)
		}
		hp.Series, tp.Series = append(hp.Series, h), append(tp.Series, t)
	}
	if len(gp.Series) > 0 {
		rep.AddPlot("calibration_gamma.svg", gp.Title, gp.SVG())
	}
	if len(ap.Series) > 0 {
		rep.AddPlot("calibration_alpha.svg", ap.Title, ap.SVG())
	}
	if len(hp.Series) > 0 {
		rep.AddPlot("window_hit_rate.svg", hp.Title, hp.SVG())
		rep.AddPlot("window_ttft_p90.svg", tp.Title, tp.SVG())
	}
}

package bench

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// ArmResult is one arm at one arrival speedup, computed from its ArmRun by SummarizeArm. Latencies and
// rates are in model time (wall time × the speedup ratio: what an engine at speedup 1 would take), so
// runs at different speedup ratios compare and the SLO means the same thing; WallSeconds and
// LatenessSeconds are wall time.
type ArmResult struct {
	Arm            string  `json:"arm"`
	ArrivalSpeedup float64 `json:"arrival_speedup"`
	OfferedRPS     float64 `json:"offered_rps"`
	// Requests were sent; Completed streamed to [DONE] without error; Failed = Requests − Completed.
	Requests  int `json:"requests"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	// Errors counts the failures by message (cut to 80 bytes).
	Errors map[string]int `json:"errors,omitempty"`
	// TTFT covers every sent request (a failed one counts with its time to failure, a lower bound);
	// ITL (per-request mean gap) and E2E cover completed requests.
	TTFT Summary `json:"ttft_s"`
	ITL  Summary `json:"itl_s"`
	E2E  Summary `json:"e2e_s"`
	// RequestsPerSec and OutputTokensPerSec are completed work over the span from the first arrival to
	// the last completion.
	RequestsPerSec     float64 `json:"requests_per_s"`
	OutputTokensPerSec float64 `json:"output_tokens_per_s"`
	// Token sums over completed requests; HitRate = CachedTokens / PromptTokens (the engines'
	// cached_tokens), PredictedHitRate = PredictedTokens / PromptTokens (the router's overlap).
	PromptTokens     int64   `json:"prompt_tokens"`
	CachedTokens     int64   `json:"cached_tokens"`
	PredictedTokens  int64   `json:"predicted_tokens"`
	OutputTokens     int64   `json:"output_tokens"`
	HitRate          float64 `json:"hit_rate"`
	PredictedHitRate float64 `json:"predicted_hit_rate"`
	// PlacedHitRate is the hit rate ideal LRU caches of the engines' capacity would get on the arm's
	// placement (Oracle.PlacedHitRate; the fleet lab's runs only).
	PlacedHitRate float64 `json:"placed_hit_rate,omitempty"`
	// Imbalance is the time average, over load samples with any request in flight, of max/mean
	// in-flight requests per worker; RequestImbalance is max/mean requests routed per worker.
	Imbalance        float64 `json:"imbalance"`
	RequestImbalance float64 `json:"request_imbalance"`
	WallSeconds      float64 `json:"wall_s"`
	LatenessSeconds  float64 `json:"replay_lateness_s"`
	// Engine counters summed over the fleet: Utilization = Σ simulated busy time / (workers × wall).
	Preemptions uint64  `json:"preemptions"`
	Evictions   uint64  `json:"evictions"`
	Utilization float64 `json:"utilization"`
	// Disaggregated arms: the prefill workers, the requests that took the prefill hop and those served
	// aggregated (conditional prefill), and the prefill engines' own hit rate (prefix-cache hits over
	// prompt tokens they were sent), which the prefill router's decisions make.
	PrefillWorkers int     `json:"prefill_workers,omitempty"`
	Disaggregated  uint64  `json:"disaggregated,omitempty"`
	Bypassed       uint64  `json:"bypassed,omitempty"`
	PrefillHitRate float64 `json:"prefill_hit_rate,omitempty"`
}

// SummarizeArm computes an arm's figures from its recorded samples (pure; the e2e test checks it).
func SummarizeArm(run *ArmRun) ArmResult {
	res := ArmResult{Arm: run.Arm, ArrivalSpeedup: run.ArrivalSpeedup, OfferedRPS: run.Offered,
		WallSeconds: run.Wall.Seconds(), LatenessSeconds: run.Lateness.Seconds()}
	k := run.TimeScale
	if !(k > 0) {
		k = 1
	}
	var ttft, itl, e2e []float64
	perWorker := make([]float64, len(run.Load))
	end := 0.0
	for i := range run.Samples {
		s := &run.Samples[i]
		if s.Err == errNotSent {
			continue
		}
		res.Requests++
		ttft = append(ttft, k*s.TTFT)
		if s.Worker >= 0 && s.Worker < len(perWorker) {
			perWorker[s.Worker]++
		}
		if !s.OK() {
			if res.Errors == nil {
				res.Errors = map[string]int{}
			}
			res.Errors[s.Err[:min(len(s.Err), 80)]]++
			continue
		}
		res.Completed++
		e2e = append(e2e, k*s.E2E)
		if s.OutputTokens > 1 {
			itl = append(itl, k*s.ITL)
		}
		res.PromptTokens += int64(s.PromptTokens)
		res.CachedTokens += int64(s.CachedTokens)
		res.PredictedTokens += int64(s.PredictedTokens)
		res.OutputTokens += int64(s.OutputTokens)
		end = max(end, k*(s.At+s.E2E))
	}
	res.Failed = res.Requests - res.Completed
	res.TTFT, res.ITL, res.E2E = Summarize(ttft), Summarize(itl), Summarize(e2e)
	if end > 0 {
		res.RequestsPerSec = float64(res.Completed) / end
		res.OutputTokensPerSec = float64(res.OutputTokens) / end
	}
	if res.PromptTokens > 0 {
		res.HitRate = float64(res.CachedTokens) / float64(res.PromptTokens)
		res.PredictedHitRate = float64(res.PredictedTokens) / float64(res.PromptTokens)
	}
	res.RequestImbalance = LoadImbalance(perWorker)
	var sum float64
	n := 0
	at := make([]float64, len(run.Load))
	for i := range run.LoadT {
		for w := range run.Load {
			at[w] = run.Load[w][i]
		}
		if im := LoadImbalance(at); im > 0 {
			sum += im
			n++
		}
	}
	if n > 0 {
		res.Imbalance = sum / float64(n)
	}
	var busy time.Duration
	for _, st := range run.Engine {
		res.Preemptions += st.Preemptions
		res.Evictions += st.Evictions
		busy += st.BusyTime
	}
	if len(run.Engine) > 0 && run.Wall > 0 {
		res.Utilization = busy.Seconds() / (float64(len(run.Engine)) * run.Wall.Seconds())
	}
	if run.Prefill > 0 {
		res.PrefillWorkers, res.Disaggregated, res.Bypassed = run.Prefill, run.Disaggregated, run.Bypassed
		var hits, queries uint64
		for _, st := range run.Engine[:min(run.Prefill, len(run.Engine))] {
			hits += st.PrefixHits
			queries += st.PrefixQueries
		}
		if queries > 0 {
			res.PrefillHitRate = float64(hits) / float64(queries)
		}
	}
	return res
}

// E2EResult is a whole e2e run: every arm at every arrival speedup, the oracles and the verdicts.
type E2EResult struct {
	Trace        TraceStats   `json:"trace"`
	Workers      int          `json:"workers"`
	BlockSize    int          `json:"block_size"`
	NumGPUBlocks int          `json:"num_gpu_blocks"`
	SpeedupRatio float64      `json:"speedup_ratio"`
	SLOTTFT      float64      `json:"slo_ttft_s"`
	Unbounded    OracleResult `json:"unbounded_oracle"`
	Pooled       OracleResult `json:"pooled_oracle"`
	Arms         []ArmResult  `json:"arms"`
	// Goodput per arm: the highest offered rate (requests/s) whose TTFT p90 is under the SLO, at that and
	// every lower sweep rate.
	Goodput    map[string]float64 `json:"goodput_rps"`
	Acceptance []Check            `json:"acceptance"`
}

// Check is one acceptance target and whether the run met it.
type Check struct {
	Target string `json:"target"`
	Value  string `json:"value"`
	Met    bool   `json:"met"`
	// Known is false when the run cannot decide (an arm missing, no saturation in the sweep).
	Known bool `json:"known"`
}

// byArm returns the arm's results sorted by offered rate.
func (r *E2EResult) byArm(arm string) []ArmResult {
	var out []ArmResult
	for _, a := range r.Arms {
		if a.Arm == arm {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b ArmResult) int { return cmpF(a.OfferedRPS, b.OfferedRPS) })
	return out
}

func cmpF(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (r *E2EResult) armNames() []string {
	var out []string
	for _, a := range r.Arms {
		if !slices.Contains(out, a.Arm) {
			out = append(out, a.Arm)
		}
	}
	return out
}

// Finish computes goodput per arm and the acceptance checks.
func (r *E2EResult) Finish() {
	r.Goodput = map[string]float64{}
	for _, arm := range r.armNames() {
		rs := r.byArm(arm)
		rates, p90 := make([]float64, len(rs)), make([]float64, len(rs))
		for i, a := range rs {
			rates[i], p90[i] = a.OfferedRPS, a.TTFT.P90
		}
		r.Goodput[arm] = Goodput(rates, p90, r.SLOTTFT)
	}
	r.Acceptance = r.checks()
}

func meanHit(rs []ArmResult) float64 {
	if len(rs) == 0 {
		return 0
	}
	s := 0.0
	for _, a := range rs {
		s += a.HitRate
	}
	return s / float64(len(rs))
}

func (r *E2EResult) checks() []Check {
	kv, rr := r.byArm(ArmKV), r.byArm(ArmRoundRobin)
	var out []Check
	// 1. kv ≥ 90 % of the pooled oracle, at every rate.
	c := Check{Target: "kv hit rate ≥ 90 % of the pooled oracle (every sweep rate)"}
	if len(kv) > 0 && r.Pooled.HitRate > 0 {
		c.Known, c.Met = true, true
		for i, a := range kv {
			f := a.HitRate / r.Pooled.HitRate
			if i > 0 {
				c.Value += ", "
			}
			c.Value += fmt.Sprintf("%s at %s req/s", Pct(f), FormatNum(a.OfferedRPS))
			c.Met = c.Met && f >= 0.9
		}
	}
	out = append(out, c)
	// 2. kv goodput ≥ 1.5 × round-robin's.
	c = Check{Target: "kv goodput ≥ 1.5 × round-robin"}
	if len(kv) > 0 && len(rr) > 0 {
		g, gr := r.Goodput[ArmKV], r.Goodput[ArmRoundRobin]
		c.Known = true
		c.Value = fmt.Sprintf("%s vs %s req/s", FormatNum(g), FormatNum(gr))
		switch {
		case gr > 0:
			c.Value += fmt.Sprintf(" (%.2f×)", g/gr)
			c.Met = g >= 1.5*gr
		default:
			c.Met = g > 0
		}
		if g == kv[len(kv)-1].OfferedRPS && kv[len(kv)-1].TTFT.P90 <= r.SLOTTFT {
			c.Value += "; kv met the SLO at the top sweep rate (a lower bound)"
		}
	}
	out = append(out, c)
	// 3. At the rate where round-robin saturates, kv TTFT p50 ≥ 3× better.
	c = Check{Target: "kv TTFT p50 ≥ 3× better where round-robin saturates"}
	if len(kv) > 0 && len(rr) > 0 {
		c.Value = "round-robin never exceeded the SLO in the sweep"
		for _, a := range rr {
			if a.TTFT.P90 <= r.SLOTTFT {
				continue
			}
			for _, k := range kv {
				if k.ArrivalSpeedup == a.ArrivalSpeedup {
					c.Known = true
					ratio := math.Inf(1)
					if k.TTFT.P50 > 0 {
						ratio = a.TTFT.P50 / k.TTFT.P50
					}
					c.Met = ratio >= 3
					c.Value = fmt.Sprintf("at %s req/s: round-robin p50 %s s, kv p50 %s s (%.2f×)", FormatNum(a.OfferedRPS),
						FormatNum(a.TTFT.P50), FormatNum(k.TTFT.P50), ratio)
				}
			}
			break
		}
	}
	out = append(out, c)
	// 4. kv beats both peers on goodput and hit rate.
	for _, peer := range []string{ArmLLMD, ArmSGLang} {
		ps := r.byArm(peer)
		c = Check{Target: "kv beats " + peer + " on goodput and hit rate"}
		if len(kv) > 0 && len(ps) > 0 {
			c.Known = true
			g, gp := r.Goodput[ArmKV], r.Goodput[peer]
			h, hp := meanHit(kv), meanHit(ps)
			c.Value = fmt.Sprintf("goodput %s vs %s req/s, mean hit rate %s vs %s", FormatNum(g), FormatNum(gp), Pct(h), Pct(hp))
			top := kv[len(kv)-1].OfferedRPS
			tie := g == gp && g == top
			if tie {
				c.Value += " (goodput tied at the top sweep rate)"
			}
			c.Met = (g > gp || tie) && h > hp
		}
		out = append(out, c)
	}
	return out
}

func ms(v float64) string { return F(1000*v, 0) }

func sec(v float64) string {
	if v < 10 {
		return F(v, 2)
	}
	return F(v, 1)
}

// FillE2EReport writes the tables, plots and data of an e2e run into rep.
func FillE2EReport(rep *Report, r *E2EResult, runs []*ArmRun) {
	lat := Table{Title: "Latency per arm (model time: TTFT and E2E in s, ITL in ms)", Columns: []string{"arm", "arrival ×", "offered req/s",
		"done/sent", "TTFT mean", "TTFT p50", "TTFT p90", "TTFT p99", "ITL mean", "ITL p50", "ITL p90", "ITL p99",
		"E2E mean", "E2E p50", "E2E p90", "E2E p99"}}
	thr := Table{Title: "Throughput, cache and balance per arm", Columns: []string{"arm", "arrival ×", "req/s", "output tok/s",
		"engine hit rate", "of pooled oracle", "predicted hit rate", "imbalance (in-flight max/mean)", "requests max/mean",
		"utilization", "preemptions", "replay lateness s", "wall s"}}
	for _, a := range r.Arms {
		lat.Rows = append(lat.Rows, []string{a.Arm, FormatNum(a.ArrivalSpeedup), F(a.OfferedRPS, 2),
			fmt.Sprintf("%d/%d", a.Completed, a.Requests), sec(a.TTFT.Mean), sec(a.TTFT.P50), sec(a.TTFT.P90), sec(a.TTFT.P99),
			ms(a.ITL.Mean), ms(a.ITL.P50), ms(a.ITL.P90), ms(a.ITL.P99), sec(a.E2E.Mean), sec(a.E2E.P50), sec(a.E2E.P90), sec(a.E2E.P99)})
		ofPooled := "—"
		if r.Pooled.HitRate > 0 {
			ofPooled = Pct(a.HitRate / r.Pooled.HitRate)
		}
		thr.Rows = append(thr.Rows, []string{a.Arm, FormatNum(a.ArrivalSpeedup), F(a.RequestsPerSec, 2), FormatNum(a.OutputTokensPerSec),
			Pct(a.HitRate), ofPooled, Pct(a.PredictedHitRate), F(a.Imbalance, 2), F(a.RequestImbalance, 2),
			Pct(a.Utilization), strconv.FormatUint(a.Preemptions, 10), F(a.LatenessSeconds, 2), F(a.WallSeconds, 0)})
	}
	or := Table{Title: "Oracles", Columns: []string{"oracle", "capacity (blocks)", "token hit rate"},
		Rows: [][]string{{"unbounded", "∞", Pct(r.Unbounded.HitRate)}, {"pooled", strconv.Itoa(r.Pooled.CapacityBlocks), Pct(r.Pooled.HitRate)}}}
	gp := Table{Title: fmt.Sprintf("Goodput (highest offered rate with TTFT p90 < %s s)", FormatNum(r.SLOTTFT)), Columns: []string{"arm", "goodput req/s"}}
	for _, arm := range r.armNames() {
		gp.Rows = append(gp.Rows, []string{arm, F(r.Goodput[arm], 2)})
	}
	acc := Table{Title: "Acceptance targets", Columns: []string{"target", "value", "met"}}
	for _, c := range r.Acceptance {
		met := "no"
		switch {
		case !c.Known:
			met = "undecided"
		case c.Met:
			met = "yes"
		}
		acc.Rows = append(acc.Rows, []string{c.Target, c.Value, met})
	}
	rep.Tables = append(rep.Tables, lat, thr, or, gp, acc)
	pd := Table{Title: "Disaggregated serving (prefill engines' hit rate: hits over the prompt tokens sent to prefill workers)",
		Columns: []string{"arm", "arrival ×", "prefill/decode workers", "disaggregated", "bypassed", "prefill engine hit rate", "of pooled oracle"}}
	for _, a := range r.Arms {
		if a.PrefillWorkers == 0 {
			continue
		}
		ofPooled := "—"
		if r.Pooled.HitRate > 0 {
			ofPooled = Pct(a.PrefillHitRate / r.Pooled.HitRate)
		}
		pd.Rows = append(pd.Rows, []string{a.Arm, FormatNum(a.ArrivalSpeedup), fmt.Sprintf("%d/%d", a.PrefillWorkers, r.Workers-a.PrefillWorkers),
			strconv.FormatUint(a.Disaggregated, 10), strconv.FormatUint(a.Bypassed, 10), Pct(a.PrefillHitRate), ofPooled})
	}
	if len(pd.Rows) > 0 {
		rep.Tables = append(rep.Tables, pd)
	}
	for _, a := range r.Arms {
		if a.Failed > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s at arrival ×%s: %d failed requests: %v", a.Arm, FormatNum(a.ArrivalSpeedup), a.Failed, a.Errors))
		}
	}

	// Plots: TTFT CDF and hit rates per sweep point, per-worker load at the highest rate, latency vs rate.
	speeds := []float64{}
	for _, a := range r.Arms {
		if !slices.Contains(speeds, a.ArrivalSpeedup) {
			speeds = append(speeds, a.ArrivalSpeedup)
		}
	}
	slices.Sort(speeds)
	for _, x := range speeds {
		suffix := "_x" + FormatNum(x)
		cdf := &LinePlot{Title: fmt.Sprintf("TTFT CDF, arrival ×%s", FormatNum(x)), XLabel: "TTFT (model s)", YLabel: "fraction of requests", LogX: true}
		var labels []string
		var vals []float64
		for _, run := range runs {
			if run.ArrivalSpeedup != x {
				continue
			}
			var ttft []float64
			for i := range run.Samples {
				if run.Samples[i].Err != errNotSent {
					ttft = append(ttft, run.TimeScale*run.Samples[i].TTFT)
				}
			}
			slices.Sort(ttft)
			xs, ys := CDF(ttft, 200)
			cdf.Series = append(cdf.Series, Series{Name: run.Arm, X: xs, Y: ys})
		}
		for _, a := range r.Arms {
			if a.ArrivalSpeedup == x {
				labels, vals = append(labels, a.Arm), append(vals, a.HitRate)
			}
		}
		labels, vals = append(labels, "pooled oracle", "unbounded"), append(vals, r.Pooled.HitRate, r.Unbounded.HitRate)
		rep.AddPlot("ttft_cdf"+suffix+".svg", cdf.Title, cdf.SVG())
		rep.AddPlot("hit_rate"+suffix+".svg", "Engine hit rate per arm, arrival ×"+FormatNum(x),
			HitRatePlot("Engine hit rate (cached/prompt tokens), arrival ×"+FormatNum(x), labels, vals).SVG())
	}
	if len(speeds) > 0 {
		top := speeds[len(speeds)-1]
		for _, run := range runs {
			if run.ArrivalSpeedup == top {
				p := LoadOverTime(fmt.Sprintf("In-flight requests per worker, %s, arrival ×%s", run.Arm, FormatNum(top)), run.LoadT, run.Load, e2eFirstWorkerID)
				rep.AddPlot("load_"+run.Arm+".svg", p.Title, p.SVG())
			}
		}
	}
	if len(speeds) > 1 {
		for _, q := range []struct {
			name string
			get  func(a ArmResult) float64
		}{{"p50", func(a ArmResult) float64 { return a.TTFT.P50 }}, {"p90", func(a ArmResult) float64 { return a.TTFT.P90 }}} {
			p := &LinePlot{Title: "TTFT " + q.name + " vs offered rate", XLabel: "offered requests/s (model time)", YLabel: "TTFT " + q.name + " (model s)", LogY: true}
			for _, arm := range r.armNames() {
				s := Series{Name: arm}
				for _, a := range r.byArm(arm) {
					s.X, s.Y = append(s.X, a.OfferedRPS), append(s.Y, q.get(a))
				}
				p.Series = append(p.Series, s)
			}
			rep.AddPlot("ttft_"+q.name+"_vs_rate.svg", p.Title, p.SVG())
		}
	}
	rep.Data = r
}

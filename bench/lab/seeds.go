package lab

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/kvroute/kvroute/bench"
)

// A lab run is exact for its seed, but the seed (tie-breaks, token values, a generated workload's
// draws) moves a long-context fleet's hit rate by several points in every arm: a few long
// conversations decide much of it, and whether they survive depends on every earlier placement. One
// seed's cell can therefore be won or lost by luck. RunSeeds runs the same lab under several seeds and
// summarizes each (arm, arrival speedup) cell over them: the spread, and per seed how an arm stands
// against the best of the peer arms of that same seed's run.

// Workload builds the workload of one seed: its name, requests and images (a trace keeps its requests
// and takes the seed's token values through Config.Blocks; a generated workload draws anew).
type Workload func(seed uint64) (name string, tr *bench.Trace, images Images, err error)

// SeedStudy is a lab run under several seeds.
type SeedStudy struct {
	Seeds []uint64 `json:"seeds"`
	// Peers are the arms every other arm is held against (those of PeerArms that ran).
	Peers []string `json:"peers"`
	// Runs are the seeds' results, in Seeds order, without their timelines.
	Runs []*Result `json:"runs"`
	// Cells summarize each (arm, arrival speedup) over the seeds, in the runs' point order.
	Cells []SeedCell `json:"cells"`
	// ServingSLO is the TTFT p90 bound (s) a peer must meet to count in the cells' Served figures: the
	// runs' knee SLO, else the largest of their goodput SLOs (0: none, no Served figures).
	ServingSLO float64 `json:"serving_slo_s,omitempty"`
}

// Spread is a figure over the seeds.
type Spread struct {
	Mean float64 `json:"mean"`
	SD   float64 `json:"sd"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
}

func spread(xs []float64) Spread {
	s := Spread{Min: math.Inf(1), Max: math.Inf(-1)}
	for _, x := range xs {
		s.Mean += x
		s.Min, s.Max = min(s.Min, x), max(s.Max, x)
	}
	s.Mean /= float64(len(xs))
	for _, x := range xs {
		s.SD += (x - s.Mean) * (x - s.Mean)
	}
	if len(xs) > 1 {
		s.SD = math.Sqrt(s.SD / float64(len(xs)-1))
	} else {
		s.SD = 0
	}
	return s
}

// SeedCell is one (arm, arrival speedup) over the seeds. OfPooled is the hit rate over the pooled
// oracle's of the same seed, in percent. Against the best peer of each seed (not for a peer arm, nor
// when no peer ran): HitWins counts the seeds where the arm's hit rate is at least the best peer's,
// TTFTWins those where its TTFT p90 is at most the best peer's, BothWins those where both hold, HitMargin is the arm's % of pooled less
// the best peer's and TTFTMargin the best peer's TTFT p90 less the arm's (positive: the arm is ahead).
// AtLeast95 counts the seeds at or above 95 % of pooled. ITL is the arm's mean inter-token latency (the
// requests' mean gaps, averaged) over the best peer's of the same seed (1: as fast; above: slower), and
// ITLWins counts the seeds where it is at most 1: a policy that packs requests onto the workers holding
// their prefix can win hit rate and TTFT while every token after the first waits behind a larger decode
// batch.
//
// Split counts the seeds where no peer holds both the best hit rate and the best TTFT p90 (one peer
// caches more, another answers sooner): there the acceptance's both asks the arm to beat each peer on
// the line that peer is best at, two ends of one trade-off. Dominated counts the seeds where a single
// peer has both a higher hit rate and a lower TTFT p90 than the arm: a loss with no trade-off in it.
//
// A peer past its own knee can win on hit rate by serving nobody in time (llm-d's scorer herds a prefix
// every request shares onto one worker: every request hits, TTFT p90 in minutes). The Served figures
// hold the arm against the best peer that met the study's ServingSLO in the same seed's run: Served
// counts the seeds where one did, ServedHitWins those where the arm's hit rate is at least that peer's,
// ServedHitMargin the arm's % of pooled less that peer's over those seeds.
type SeedCell struct {
	Arm            string  `json:"arm"`
	ArrivalSpeedup float64 `json:"arrival_speedup"`
	OfPooled       Spread  `json:"of_pooled_pct"`
	TTFTP90        Spread  `json:"ttft_p90_s"`
	AtLeast95      int     `json:"at_least_95"`
	Peered         bool    `json:"peered"`
	HitWins        int     `json:"hit_wins,omitempty"`
	TTFTWins       int     `json:"ttft_wins,omitempty"`
	BothWins       int     `json:"both_wins,omitempty"`
	HitMargin      Spread  `json:"hit_margin_pct"`
	TTFTMargin     Spread  `json:"ttft_margin_s"`
	ITLWins        int     `json:"itl_wins,omitempty"`
	Split          int     `json:"split_seeds,omitempty"`
	Dominated      int     `json:"dominated_seeds,omitempty"`
	ITL            Spread  `json:"itl_over_best_peer"`

	Served          int    `json:"served_seeds,omitempty"`
	ServedHitWins   int    `json:"served_hit_wins,omitempty"`
	ServedHitMargin Spread `json:"served_hit_margin_pct"`
}

// PeerArms are the arms a policy is held against by default: the llm-d-style and SGLang-style routers.
var PeerArms = []string{ArmLLMD, ArmSGLang}

// RunSeeds runs cfg under every seed (cfg.Seed and cfg.Blocks.Seed set to it, the workload built by
// load) and summarizes the cells against peers (the arms of peers that ran).
func RunSeeds(ctx context.Context, cfg Config, seeds []uint64, peers []string, load Workload) (*SeedStudy, error) {
	if len(seeds) == 0 {
		return nil, fmt.Errorf("%w: no seed", ErrBadConfig)
	}
	for i, s := range seeds {
		if slices.Contains(seeds[:i], s) {
			return nil, fmt.Errorf("%w: seed %d given twice", ErrBadConfig, s)
		}
	}
	st := &SeedStudy{Seeds: seeds}
	for _, p := range peers {
		if slices.Contains(cfg.Arms, p) && !slices.Contains(st.Peers, p) {
			st.Peers = append(st.Peers, p)
		}
	}
	for _, s := range seeds {
		c := cfg
		c.Seed, c.Blocks.Seed = s, s
		name, tr, images, err := load(s)
		if err != nil {
			return nil, err
		}
		c.Images = images
		res, err := Run(ctx, c, name, tr)
		if err != nil {
			return nil, fmt.Errorf("seed %d: %w", s, err)
		}
		res.Timelines = nil
		st.Runs = append(st.Runs, res)
	}
	st.summarize()
	return st, nil
}

// summarize fills Cells from Runs (every run has the same points in the same order: same arms and
// speedups).
func (st *SeedStudy) summarize() {
	first := st.Runs[0].Points
	st.ServingSLO = st.Runs[0].KneeSLO
	if st.ServingSLO == 0 && len(st.Runs[0].SLOs) > 0 {
		st.ServingSLO = slices.Max(st.Runs[0].SLOs)
	}
	st.Cells = make([]SeedCell, len(first))
	for i, p := range first {
		c := &st.Cells[i]
		c.Arm, c.ArrivalSpeedup = p.Arm, p.ArrivalSpeedup
		c.Peered = len(st.Peers) > 0 && !slices.Contains(st.Peers, p.Arm)
		var of, p90, hm, tm, sm, itl []float64
		type peerPoint struct{ hit, p90 float64 }
		var peers []peerPoint // one run's peers at this speedup
		for _, r := range st.Runs {
			q := r.Points[i]
			pct, qP90 := ofPooled(r, &q), ttftP90(&q)
			of, p90 = append(of, pct), append(p90, qP90)
			if pct >= 95 {
				c.AtLeast95++
			}
			if !c.Peered {
				continue
			}
			bestHit, bestP90, servedHit, bestITL := math.Inf(-1), math.Inf(1), math.Inf(-1), math.Inf(1)
			peers = peers[:0]
			for _, o := range r.Points {
				if o.ArrivalSpeedup == q.ArrivalSpeedup && slices.Contains(st.Peers, o.Arm) {
					hit, oP90 := ofPooled(r, &o), ttftP90(&o)
					bestHit, bestP90, bestITL = max(bestHit, hit), min(bestP90, oP90), min(bestITL, o.ITL.Mean)
					if st.ServingSLO > 0 && oP90 <= st.ServingSLO {
						servedHit = max(servedHit, hit)
					}
					peers = append(peers, peerPoint{hit, oP90})
				}
			}
			// Split: no peer holds both bests; dominated: one peer is ahead of the arm on both.
			c.Split += b2i(!slices.Contains(peers, peerPoint{bestHit, bestP90}))
			c.Dominated += b2i(slices.ContainsFunc(peers, func(o peerPoint) bool { return o.hit > pct && o.p90 < qP90 }))
			if !math.IsInf(servedHit, -1) {
				c.Served++
				if pct >= servedHit {
					c.ServedHitWins++
				}
				sm = append(sm, pct-servedHit)
			}
			hit, fast := pct >= bestHit, qP90 <= bestP90
			c.HitWins += b2i(hit)
			c.TTFTWins += b2i(fast)
			c.BothWins += b2i(hit && fast)
			hm, tm = append(hm, pct-bestHit), append(tm, bestP90-qP90)
			if bestITL > 0 && !math.IsInf(bestITL, 1) {
				itl = append(itl, q.ITL.Mean/bestITL)
				c.ITLWins += b2i(q.ITL.Mean <= bestITL)
			}
		}
		c.OfPooled, c.TTFTP90 = spread(of), spread(p90)
		if c.Peered {
			c.HitMargin, c.TTFTMargin = spread(hm), spread(tm)
		}
		if len(sm) > 0 {
			c.ServedHitMargin = spread(sm)
		}
		if len(itl) > 0 {
			c.ITL = spread(itl)
		}
	}
}

// ofPooled is a point's hit rate in percent of its run's pooled oracle (0 when the oracle hits nothing).
func ofPooled(r *Result, p *bench.ArmResult) float64 {
	if r.Pooled.HitRate <= 0 {
		return 0
	}
	return 100 * p.HitRate / r.Pooled.HitRate
}

// Tables renders the study (pure): the cells' spreads, the standing against the peers, and every seed's
// % of pooled and TTFT p90.
func (st *SeedStudy) Tables() []bench.Table {
	n := len(st.Seeds)
	seeds := make([]string, n)
	for i, s := range st.Seeds {
		seeds[i] = fmt.Sprint(s)
	}
	r0 := st.Runs[0]
	spreadT := bench.Table{Title: fmt.Sprintf("Over %d seeds (%s; %s, profile %s, %d workers)", n, strings.Join(seeds, ", "), r0.Workload, r0.Profile, r0.Workers),
		Columns: []string{"arm", "arrival ×", "of pooled % mean", "sd", "min–max", "TTFT p90 s mean", "min–max", "seeds ≥ 95 % of pooled"}}
	for _, c := range st.Cells {
		spreadT.Rows = append(spreadT.Rows, []string{c.Arm, bench.F(c.ArrivalSpeedup, 2), bench.F(c.OfPooled.Mean, 2), bench.F(c.OfPooled.SD, 2),
			bench.F(c.OfPooled.Min, 2) + "–" + bench.F(c.OfPooled.Max, 2), bench.F(c.TTFTP90.Mean, 3),
			bench.F(c.TTFTP90.Min, 3) + "–" + bench.F(c.TTFTP90.Max, 3), fmt.Sprintf("%d of %d", c.AtLeast95, n)})
	}
	out := []bench.Table{spreadT}
	if len(st.Peers) > 0 {
		vs := bench.Table{Title: fmt.Sprintf("Against the best of %s in each seed's run", strings.Join(st.Peers, " / ")),
			Columns: []string{"arm", "arrival ×", "hit rate ≥ best peer", "of pooled margin, points: mean (min–max)",
				"TTFT p90 ≤ best peer", "TTFT p90 margin s: mean (min–max)", "both"}}
		if st.ServingSLO > 0 {
			slo := bench.FormatNum(st.ServingSLO)
			vs.Columns = append(vs.Columns, "seeds with a peer at TTFT p90 ≤ "+slo+" s", "hit rate ≥ best such peer",
				"of pooled margin to it, points: mean (min–max)")
		}
		for _, c := range st.Cells {
			if !c.Peered {
				continue
			}
			row := []string{c.Arm, bench.F(c.ArrivalSpeedup, 2), fmt.Sprintf("%d of %d", c.HitWins, n),
				fmt.Sprintf("%s (%s – %s)", bench.F(c.HitMargin.Mean, 2), bench.F(c.HitMargin.Min, 2), bench.F(c.HitMargin.Max, 2)),
				fmt.Sprintf("%d of %d", c.TTFTWins, n),
				fmt.Sprintf("%s (%s – %s)", bench.F(c.TTFTMargin.Mean, 3), bench.F(c.TTFTMargin.Min, 3), bench.F(c.TTFTMargin.Max, 3)),
				fmt.Sprintf("%d of %d", c.BothWins, n)}
			if st.ServingSLO > 0 {
				margin := "–"
				if c.Served > 0 {
					margin = fmt.Sprintf("%s (%s – %s)", bench.F(c.ServedHitMargin.Mean, 2), bench.F(c.ServedHitMargin.Min, 2), bench.F(c.ServedHitMargin.Max, 2))
				}
				row = append(row, fmt.Sprintf("%d of %d", c.Served, n), fmt.Sprintf("%d of %d", c.ServedHitWins, c.Served), margin)
			}
			vs.Rows = append(vs.Rows, row)
		}
		out = append(out, vs)
	}
	per := bench.Table{Title: "Every seed: % of pooled / TTFT p90 s", Columns: []string{"arm", "arrival ×"}}
	for _, s := range seeds {
		per.Columns = append(per.Columns, "seed "+s)
	}
	for i, c := range st.Cells {
		row := []string{c.Arm, bench.F(c.ArrivalSpeedup, 2)}
		for _, r := range st.Runs {
			p := r.Points[i]
			row = append(row, bench.F(ofPooled(r, &p), 2)+" / "+bench.F(ttftP90(&p), 3))
		}
		per.Rows = append(per.Rows, row)
	}
	out = append(out, per)
	if len(r0.Knees) > 0 {
		kt := bench.Table{Title: fmt.Sprintf("Goodput knee at TTFT p90 ≤ %s s, req/s passing (none: 0)", bench.FormatNum(r0.KneeSLO)),
			Columns: append([]string{"arm", "mean", "min–max"}, per.Columns[2:]...)}
		for k, kn := range r0.Knees {
			var xs []float64
			row := []string{kn.Arm, "", ""}
			for _, r := range st.Runs {
				xs = append(xs, r.Knees[k].PassRPS)
				row = append(row, bench.F(r.Knees[k].PassRPS, 2))
			}
			s := spread(xs)
			row[1], row[2] = bench.F(s.Mean, 2), bench.F(s.Min, 2)+"–"+bench.F(s.Max, 2)
			kt.Rows = append(kt.Rows, row)
		}
		out = append(out, kt)
	}
	return out
}

// FillSeedReport adds the study's tables and notes to rep.
func FillSeedReport(rep *bench.Report, st *SeedStudy) {
	rep.Tables = append(rep.Tables, st.Tables()...)
	rep.Data = st
	lp := &bench.LinePlot{Title: "TTFT p90 against arrival speedup, mean over the seeds", XLabel: "arrival ×", YLabel: "TTFT p90 (s)"}
	hp := &bench.LinePlot{Title: "Hit rate against arrival speedup, mean over the seeds", XLabel: "arrival ×", YLabel: "% of the pooled oracle"}
	var arms []string
	for _, c := range st.Cells {
		if !slices.Contains(arms, c.Arm) {
			arms = append(arms, c.Arm)
		}
	}
	for _, a := range arms {
		l, h := bench.Series{Name: a}, bench.Series{Name: a}
		for _, c := range st.Cells {
			if c.Arm == a {
				l.X, l.Y = append(l.X, c.ArrivalSpeedup), append(l.Y, c.TTFTP90.Mean)
				h.X, h.Y = append(h.X, c.ArrivalSpeedup), append(h.Y, c.OfPooled.Mean)
			}
		}
		lp.Series, hp.Series = append(lp.Series, l), append(hp.Series, h)
	}
	rep.AddPlot("ttft_p90.svg", lp.Title, lp.SVG())
	rep.AddPlot("hit_rate.svg", hp.Title, hp.SVG())
	rep.Notes = append(rep.Notes,
		"Virtual time: every figure is simulated model time; each seed's run is deterministic, and so is the study.",
		"Of pooled = a seed's hit rate over that seed's pooled oracle; the best peer is taken seed by seed, within the same run.",
		"TTFT p90 of a point with failed requests counts as missing every SLO (and loses against a peer that has none).")
	if st.ServingSLO > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("The last columns of the standing hold each arm against the best peer whose TTFT p90 met %s s in the same seed's run (the knee SLO, else the largest goodput SLO): a peer past its own knee is not what the arm's hit rate is measured against.", bench.FormatNum(st.ServingSLO)))
	}
}

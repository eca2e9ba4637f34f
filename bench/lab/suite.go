package lab

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/kvroute/kvroute/bench"
)

// A policy's standing is not one study: the conversation trace and every generated workload, each on
// every engine profile, on small and large fleets, at several rates. Run one at a time, that is some
// thirty `--seeds` commands and a table put together by hand. RunSuite runs a list of cases (a
// workload on a profile and a fleet, swept over arrival speedups) as seed studies with the same seeds
// and peers, and sums up every (case, arm, rate) cell in one table, with the count of cells that meet
// each line of the standing: ≥ 95 % of the pooled oracle on average, and seed by seed at least the
// best peer's hit rate, at most its TTFT p90, and both at once.

// SuiteCase is one study of a suite: a workload (WorkloadTrace or one of GenKinds) on an engine
// profile and a fleet, swept over arrival speedups.
type SuiteCase struct {
	Workload string    `json:"workload"`
	Profile  string    `json:"profile"`
	Workers  int       `json:"workers"`
	Speedups []float64 `json:"arrival_speedups"`
}

// WorkloadTrace names the trace (the caller's) as a suite case's workload.
const WorkloadTrace = "trace"

// SuiteStanding is the name of the standing suite (StandingCases).
const SuiteStanding = "standing"

// StandingCases are the cases the kvroute preset's standing is measured on (docs/benchmarks.md): with
// a trace, the trace on the three profiles at 8 and 32 workers; every generated workload at 8 workers
// on the mocker and 8B profiles (the image workloads up to ×8), on the 70B profile, and at 32 workers on
// the mocker and 8B profiles. The rates are those of the documented tables: up to past the llm-d arm's
// saturation on the trace, and to ×16 of the generators' default rate at 32 workers.
func StandingCases(trace bool) []SuiteCase {
	var cs []SuiteCase
	if trace {
		cs = append(cs,
			SuiteCase{WorkloadTrace, ProfileMocker, 8, []float64{1, 2, 3, 4}},
			SuiteCase{WorkloadTrace, ProfileLlama8B, 8, []float64{0.5, 1, 2}},
			SuiteCase{WorkloadTrace, ProfileLlama70B, 8, []float64{0.25, 0.5, 1}},
			SuiteCase{WorkloadTrace, ProfileMocker, 32, []float64{4, 8, 12, 16}},
			SuiteCase{WorkloadTrace, ProfileLlama8B, 32, []float64{0.5, 1, 2}},
			SuiteCase{WorkloadTrace, ProfileLlama70B, 32, []float64{0.25, 0.5, 1}})
	}
	for _, k := range GenKinds {
		low := []float64{1, 2}
		if slices.Contains(ImageKinds, k) {
			low = []float64{1, 2, 4, 8}
		}
		cs = append(cs,
			SuiteCase{k, ProfileMocker, 8, low},
			SuiteCase{k, ProfileLlama8B, 8, low},
			SuiteCase{k, ProfileLlama70B, 8, []float64{0.25, 0.5, 1}},
			SuiteCase{k, ProfileMocker, 32, []float64{4, 8, 16}},
			SuiteCase{k, ProfileLlama8B, 32, []float64{4, 8, 16}})
	}
	return cs
}

// Suite is a list of cases run as seed studies under the same seeds and peers.
type Suite struct {
	Seeds   []uint64     `json:"seeds"`
	Peers   []string     `json:"peers"`
	Cases   []SuiteCase  `json:"cases"`
	Studies []*SeedStudy `json:"studies"`
}

// RunSuite runs every case as RunSeeds does, cfg with the case's profile, fleet and speedups, its
// workload built by load (the case's Workload name in, the study's Workload out). Knees are not
// bisected (cfg.KneeSLO 0): the suite is a standing at fixed rates; the peers' serving bound is then the
// largest of cfg.SLOs.
func RunSuite(ctx context.Context, cfg Config, cases []SuiteCase, seeds []uint64, peers []string,
	load func(workload string) (Workload, error)) (*Suite, error) {
	if len(cases) == 0 {
		return nil, fmt.Errorf("%w: a suite of no case", ErrBadConfig)
	}
	s := &Suite{Seeds: seeds, Cases: cases}
	for i, c := range cases {
		cc := cfg
		cc.Profile, cc.Workers, cc.ArrivalSpeedups, cc.KneeSLO = c.Profile, c.Workers, c.Speedups, 0
		if err := cc.Validate(); err != nil {
			return nil, fmt.Errorf("case %d (%s): %w", i, c.label(), err)
		}
		w, err := load(c.Workload)
		if err != nil {
			return nil, fmt.Errorf("case %d (%s): %w", i, c.label(), err)
		}
		st, err := RunSeeds(ctx, cc, seeds, peers, w)
		if err != nil {
			return nil, fmt.Errorf("case %d (%s): %w", i, c.label(), err)
		}
		s.Studies = append(s.Studies, st)
		if s.Peers == nil {
			s.Peers = st.Peers
		}
	}
	return s, nil
}

func (c SuiteCase) label() string {
	return fmt.Sprintf("%s, %s, %d workers", c.Workload, c.Profile, c.Workers)
}

// SuiteTally counts, over a suite's cells of one arm, the cells (mean over the seeds) and the
// (cell, seed) pairs that meet each line of the standing.
type SuiteTally struct {
	Arm         string
	Cells       int
	At95        int // cells whose mean % of pooled is ≥ 95
	HitCells    int // cells whose mean hit margin over the best peer is ≥ 0
	TTFTCells   int // cells whose mean TTFT p90 margin is ≥ 0
	BothCells   int // cells with both means ahead
	Pairs       int // (cell, seed) pairs
	HitPairs    int
	TTFTPairs   int
	BothPairs   int
	ServedPairs int // pairs where some peer met the serving bound
	ServedWins  int // of those, pairs at or above that peer's hit rate
	ITLCells    int // cells whose mean ITL over the best peer's is ≤ 1 (as fast or faster)
	ITLPairs    int
	ITLWorst    float64 // the largest cell mean of ITL over the best peer's
	SplitPairs  int     // pairs where no peer holds both the best hit rate and the best TTFT p90
	Dominated   int     // pairs where one peer alone beats the arm on both
}

// Tally counts the standing of every peered arm, in the order the arms first appear.
func (s *Suite) Tally() []SuiteTally {
	var out []SuiteTally
	for _, st := range s.Studies {
		for _, c := range st.Cells {
			if !c.Peered {
				continue
			}
			i := slices.IndexFunc(out, func(t SuiteTally) bool { return t.Arm == c.Arm })
			if i < 0 {
				out, i = append(out, SuiteTally{Arm: c.Arm}), len(out)
			}
			t := &out[i]
			t.Cells++
			hit, fast := c.HitMargin.Mean >= 0, c.TTFTMargin.Mean >= 0
			t.At95 += b2i(c.OfPooled.Mean >= 95)
			t.HitCells += b2i(hit)
			t.TTFTCells += b2i(fast)
			t.BothCells += b2i(hit && fast)
			t.Pairs += len(st.Seeds)
			t.HitPairs += c.HitWins
			t.TTFTPairs += c.TTFTWins
			t.BothPairs += c.BothWins
			t.ServedPairs += c.Served
			t.ServedWins += c.ServedHitWins
			t.ITLCells += b2i(c.ITL.Mean <= 1)
			t.ITLPairs += c.ITLWins
			t.ITLWorst = max(t.ITLWorst, c.ITL.Mean)
			t.SplitPairs += c.Split
			t.Dominated += c.Dominated
		}
	}
	return out
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Tables renders the suite (pure): the tally, every peered cell in one table, then each study's own
// tables.
func (s *Suite) Tables() []bench.Table {
	n := len(s.Seeds)
	seeds := make([]string, n)
	for i, x := range s.Seeds {
		seeds[i] = fmt.Sprint(x)
	}
	peers := strings.Join(s.Peers, " / ")
	tally := bench.Table{Title: fmt.Sprintf("Standing over %d cases, seeds %s, against the best of %s", len(s.Cases), strings.Join(seeds, ", "), peers),
		Columns: []string{"arm", "cells", "mean ≥ 95 % of pooled", "mean hit rate ≥ best peer", "mean TTFT p90 ≤ best peer", "both means",
			"(cell, seed) pairs", "hit rate ≥ best peer", "TTFT p90 ≤ best peer", "both", "hit rate ≥ best peer that met the serving bound",
			"mean ITL ≤ best peer (cells)", "ITL ≤ best peer (pairs)", "worst cell's ITL over the best peer's",
			"pairs whose bests are two peers", "pairs behind one peer on both"}}
	for _, t := range s.Tally() {
		tally.Rows = append(tally.Rows, []string{t.Arm, fmt.Sprint(t.Cells), fmt.Sprint(t.At95), fmt.Sprint(t.HitCells),
			fmt.Sprint(t.TTFTCells), fmt.Sprint(t.BothCells), fmt.Sprint(t.Pairs), fmt.Sprint(t.HitPairs),
			fmt.Sprint(t.TTFTPairs), fmt.Sprint(t.BothPairs), fmt.Sprintf("%d of %d", t.ServedWins, t.ServedPairs),
			fmt.Sprint(t.ITLCells), fmt.Sprint(t.ITLPairs), bench.F(t.ITLWorst, 2) + "×", fmt.Sprint(t.SplitPairs),
			fmt.Sprint(t.Dominated)})
	}
	cells := bench.Table{Title: "Every cell: mean over the seeds, and seeds ahead of the best peer of the same seed's run",
		Columns: []string{"workload", "profile", "workers", "arm", "arrival ×", "of pooled % mean", "seeds ≥ 95 %",
			"hit margin, points", "seeds hit ≥ best", "TTFT p90 s", "TTFT margin, ms", "seeds TTFT ≤ best", "seeds both",
			"ITL over best peer's", "seeds whose bests are two peers", "seeds behind one peer on both"}}
	for i, st := range s.Studies {
		c := s.Cases[i]
		for _, x := range st.Cells {
			if !x.Peered {
				continue
			}
			cells.Rows = append(cells.Rows, []string{c.Workload, c.Profile, fmt.Sprint(c.Workers), x.Arm, bench.F(x.ArrivalSpeedup, 2),
				bench.F(x.OfPooled.Mean, 2), fmt.Sprint(x.AtLeast95), bench.F(x.HitMargin.Mean, 2), fmt.Sprint(x.HitWins),
				bench.F(x.TTFTP90.Mean, 3), bench.F(1000*x.TTFTMargin.Mean, 1), fmt.Sprint(x.TTFTWins), fmt.Sprint(x.BothWins),
				bench.F(x.ITL.Mean, 2), fmt.Sprint(x.Split), fmt.Sprint(x.Dominated)})
		}
	}
	out := []bench.Table{tally, cells}
	for _, st := range s.Studies {
		out = append(out, st.Tables()...)
	}
	return out
}

// FillSuiteReport adds the suite's tables and notes to rep.
func FillSuiteReport(rep *bench.Report, s *Suite) {
	rep.Tables = append(rep.Tables, s.Tables()...)
	rep.Data = s
	rep.Notes = append(rep.Notes,
		"Virtual time: every figure is simulated model time; each seed's run is deterministic, and so is the suite.",
		"A cell is one (case, arm, arrival speedup); its means are over the seeds. Margins are positive where the arm is ahead of the best peer of the same seed's run (hit rate in points of the pooled oracle, TTFT p90 in ms).",
		"Knees are not bisected; a peer meets the serving bound when its TTFT p90 is within the largest goodput SLO.")
}

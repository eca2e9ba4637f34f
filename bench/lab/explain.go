package lab

import (
	"fmt"
	"math/bits"
	"slices"

	"github.com/kvroute/kvroute/bench"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/sched"
)

// Why a kvroute decision left the worker holding the longest cached prefix. The arms whose cost is
// learned route with ReturnCosts (nvext return_routing's path: the machine's own per-candidate cost,
// nothing recomputed here) and read the machine's loads just before the decision; every direct decision
// whose chosen worker's overlap is below the largest is counted, classed and, for a sample, kept whole.

// Reasons a better-cached worker was skipped.
const (
	// ReasonBusy: the best-cached worker was over a busy threshold.
	ReasonBusy = "busy"
	// ReasonTie: its cost equalled the chosen one's (the tie rule chose: fewer active blocks, then a draw).
	ReasonTie = "tie"
	// ReasonQueue: its queued prefill exceeds what its cache saves (q_b + u_b > q_c + u_c).
	ReasonQueue = "queued prefill"
	// ReasonSlowdown: the wait is shorter there, but its decode batch (γ per active block) or KV
	// overflow makes it dearer, or the chosen worker's copy of a prefix in use there is credited as a
	// replica.
	ReasonSlowdown = "slowdown γ·K, KV overflow or replica"
)

// explainReasons lists the reasons in report order.
var explainReasons = []string{ReasonQueue, ReasonSlowdown, ReasonTie, ReasonBusy}

// maxExamples bounds the decisions kept whole per run.
const maxExamples = 12

// Candidate is one worker as a decision saw it.
type Candidate struct {
	Worker int `json:"worker"`
	// OverlapBlocks is the cached prefix in blocks (the index's and predicted overlap).
	OverlapBlocks uint32 `json:"overlap_blocks"`
	// Queued is the worker's queued prefill in tokens (q); Uncached the request's tokens it would
	// compute (u = ISL − cached); ActiveBlocks the worker's active blocks before the request (K).
	Queued       uint64  `json:"queued_prefill_tokens"`
	Uncached     int     `json:"uncached_tokens"`
	ActiveBlocks float64 `json:"active_blocks"`
	// Cost is the machine's cost (scoring.SharedCost, prefill-token units); 0 when Busy.
	Cost float64 `json:"cost"`
	Busy bool    `json:"busy,omitempty"`
	// EnginePending is the prefill the worker's engine had not finished when the decision was made (not
	// started, or in the step in flight); Queued less it is what the engine had already computed of the
	// charge the router saw.
	EnginePending int `json:"engine_pending_prefill_tokens"`
}

// Explained is one decision that skipped the best-cached worker.
type Explained struct {
	Request string  `json:"request"`
	At      float64 `json:"at_s"`
	ISL     int     `json:"isl"`
	// Gamma is the γ the decision used.
	Gamma      float64   `json:"gamma"`
	Chosen     Candidate `json:"chosen"`
	BestCached Candidate `json:"best_cached"`
	Reason     string    `json:"reason"`
}

// Decisions counts one run's decisions and explains the ones that skipped the best-cached worker.
type Decisions struct {
	// Routed counts the decisions made at arrival (requests released from the queue are not seen).
	Routed int `json:"routed"`
	// WithCache counts those where some worker held part of the prompt; Skipped those whose chosen
	// worker's overlap was below the largest.
	WithCache int `json:"with_cache"`
	Skipped   int `json:"skipped"`
	// PromptTokens sums the routed requests' ISL; Forgone the cached tokens the skips left behind (the
	// best-cached worker's overlap minus the chosen one's, in tokens, at most the ISL): the share of the
	// prompt tokens the policy chose to recompute, against the gap to the pooled oracle, which also
	// holds evictions and prefixes cached nowhere.
	PromptTokens int64          `json:"prompt_tokens"`
	Forgone      int64          `json:"forgone_tokens"`
	Reasons      map[string]int `json:"reasons,omitempty"`
	// Computed counts the skips for queued prefill whose best-cached worker's engine had already
	// computed at least half of the prefill charged there (the router charges a request's uncached
	// tokens until its first token, while the engine prefills a long prompt in chunks over many steps);
	// ComputedForgone is their forgone cached tokens.
	Computed        int   `json:"skipped_computed,omitempty"`
	ComputedForgone int64 `json:"computed_forgone_tokens,omitempty"`
	// Examples are the 1st, 2nd, 4th, 8th … skip (at most maxExamples): spread over the run, the same
	// for the same run.
	Examples []Explained `json:"examples,omitempty"`
}

// Explainer is implemented by a scheduler that explains its decisions.
type Explainer interface {
	Decisions() *Decisions
}

// explainer records the decisions of one machine arm.
type explainer struct {
	d     Decisions
	loads []sched.TargetLoad
	// pending is the engines' prefill not started, by worker (Fleet.pending; nil: not known).
	pending func(w int) int
}

// before reads the machine's loads for the decision about to be made.
func (x *explainer) before(m *sched.Machine) { x.loads = m.Loads(x.loads[:0]) }

// after classes decision d of request r (ISL isl as the machine counts it) with γ gamma.
func (x *explainer) after(at float64, r *Request, isl, bs int, gamma float64, d *sched.Decision) {
	x.d.Routed++
	x.d.PromptTokens += int64(isl)
	best := -1
	for i, c := range d.Candidates {
		if best < 0 || c.Overlap > d.Candidates[best].Overlap ||
			c.Overlap == d.Candidates[best].Overlap && !c.Busy && (d.Candidates[best].Busy || c.Cost < d.Candidates[best].Cost) {
			best = i
		}
	}
	if best < 0 || d.Candidates[best].Overlap == 0 {
		return
	}
	x.d.WithCache++
	if d.OverlapBlocks >= d.Candidates[best].Overlap {
		return
	}
	chosen := slices.IndexFunc(d.Candidates, func(c scoring.CandidateCost) bool { return c.Worker == d.Worker })
	if chosen < 0 {
		return
	}
	x.d.Skipped++
	forgone := int64(min(int(d.Candidates[best].Overlap)*bs, isl) - min(int(d.OverlapBlocks)*bs, isl))
	x.d.Forgone += forgone
	e := Explained{Request: r.ID, At: at, ISL: isl, Gamma: gamma, Chosen: x.view(&d.Candidates[chosen], isl, bs),
		BestCached: x.view(&d.Candidates[best], isl, bs)}
	c, b := &e.Chosen, &e.BestCached
	switch {
	case b.Busy:
		e.Reason = ReasonBusy
	case b.Cost == c.Cost:
		e.Reason = ReasonTie
	case float64(b.Queued)+float64(b.Uncached) > float64(c.Queued)+float64(c.Uncached):
		e.Reason = ReasonQueue
	default:
		e.Reason = ReasonSlowdown
	}
	if x.d.Reasons == nil {
		x.d.Reasons = map[string]int{}
	}
	x.d.Reasons[e.Reason]++
	if e.Reason == ReasonQueue && x.pending != nil && 2*b.EnginePending <= int(b.Queued) {
		x.d.Computed++
		x.d.ComputedForgone += forgone
	}
	if bits.OnesCount(uint(x.d.Skipped)) == 1 && len(x.d.Examples) < maxExamples {
		x.d.Examples = append(x.d.Examples, e)
	}
}

func (x *explainer) view(c *scoring.CandidateCost, isl, bs int) Candidate {
	v := Candidate{Worker: WorkerOf(c.Worker), OverlapBlocks: c.Overlap, Uncached: max(isl-int(c.Overlap)*bs, 0), Cost: c.Cost, Busy: c.Busy}
	if x.pending != nil {
		v.EnginePending = x.pending(v.Worker)
	}
	for i := range x.loads {
		if x.loads[i].Worker == c.Worker {
			v.Queued, v.ActiveBlocks = x.loads[i].Load.ActivePrefillTokens, x.loads[i].Load.ActiveDecodeBlocks
			break
		}
	}
	return v
}

// decisionTables summarizes the explained decisions per arm and speedup, and shows a few examples.
func (r *Result) decisionTables() []bench.Table {
	sum := bench.Table{Title: "kvroute decisions that skipped the best-cached worker", Columns: []string{"arm", "arrival ×", "decisions",
		"some worker cached", "skipped best-cached", "forgone cached tokens (of prompt tokens)"}}
	sum.Columns = append(sum.Columns, explainReasons...)
	sum.Columns = append(sum.Columns, "of queued prefill: engine had computed ≥ ½ of the charge (forgone)")
	ex := bench.Table{Title: "Examples: chosen worker vs best-cached worker (overlap blocks, queued prefill q, uncached u, active blocks K before the request, cost in prefill-token units)",
		Columns: []string{"arm", "request", "at s", "ISL", "γ", "chosen w: overlap / q / u / K / cost", "best-cached w: overlap / q / u / K / cost", "reason"}}
	for i := range r.Timelines {
		tl := &r.Timelines[i]
		d := tl.Decisions
		if d == nil {
			continue
		}
		row := []string{tl.Arm, bench.FormatNum(tl.ArrivalSpeedup), fmt.Sprint(d.Routed), fmt.Sprint(d.WithCache), fmt.Sprint(d.Skipped)}
		if d.WithCache > 0 {
			row[4] += " (" + bench.Pct(float64(d.Skipped)/float64(d.WithCache)) + ")"
		}
		forgone := fmt.Sprint(d.Forgone)
		if d.PromptTokens > 0 {
			forgone += " (" + bench.Pct(float64(d.Forgone)/float64(d.PromptTokens)) + ")"
		}
		row = append(row, forgone)
		for _, reason := range explainReasons {
			row = append(row, fmt.Sprint(d.Reasons[reason]))
		}
		row = append(row, fmt.Sprintf("%d (%d)", d.Computed, d.ComputedForgone))
		sum.Rows = append(sum.Rows, row)
		for k, e := range d.Examples {
			if k >= 4 {
				break
			}
			ex.Rows = append(ex.Rows, []string{r.seriesName(tl), e.Request, bench.F(e.At, 1), fmt.Sprint(e.ISL), fmt.Sprintf("%.3g", e.Gamma),
				candidateCell(&e.Chosen), candidateCell(&e.BestCached), e.Reason})
		}
	}
	if len(sum.Rows) == 0 {
		return nil
	}
	out := []bench.Table{sum}
	if len(ex.Rows) > 0 {
		out = append(out, ex)
	}
	return out
}

func candidateCell(c *Candidate) string {
	if c.Busy {
		return fmt.Sprintf("%d: %d / busy", c.Worker, c.OverlapBlocks)
	}
	return fmt.Sprintf("%d: %d / %d / %d / %s / %s", c.Worker, c.OverlapBlocks, c.Queued, c.Uncached, bench.F(c.ActiveBlocks, 0), bench.F(c.Cost, 0))
}

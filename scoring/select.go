package scoring

import (
	"errors"
	"fmt"
	"math"
)

// Error classes of selection. Callers use errors.Is; the HTTP edge maps ErrAllBusy to 503 and
// ErrNoWorkers to 503 "no endpoints".
var (
	// ErrNoWorkers: there are no candidates at all (Dynamo NoEndpoints).
	ErrNoWorkers = errors.New("scoring: no workers")
	// ErrAllBusy: candidates exist but every one is over a busy threshold (AllEligibleWorkersOverloaded).
	ErrAllBusy = errors.New("scoring: all eligible workers are busy")
	// ErrPinnedNotFound: the pinned worker is not among the candidates (not registered, unhealthy, excluded).
	// Wraps ErrNoWorkers.
	ErrPinnedNotFound = fmt.Errorf("%w: the pinned worker is not a candidate (not registered, unhealthy, or left out of this request)", ErrNoWorkers)
	// ErrPinnedBusy: the pinned worker is over a busy threshold (PinnedWorkerOverloaded). Wraps ErrAllBusy.
	ErrPinnedBusy = fmt.Errorf("%w: pinned worker is busy", ErrAllBusy)
	// ErrNoTarget: direct mode without a worker named by the caller.
	ErrNoTarget = errors.New("scoring: direct mode needs a target worker")
)

// RNG is the randomness Select uses: tie-breaks, softmax draws, random and power-of-two modes.
// *math/rand/v2.Rand satisfies it; tests and benches pass a seeded one.
type RNG interface {
	Float64() float64
	IntN(n int) int
}

// Request is what selection needs to know about one request.
type Request struct {
	// ISL is the number of input tokens (the routing tokens).
	ISL int
	// Pin restricts selection to one worker: direct mode's target, or a pinned request. With PinRank
	// false any DP rank of Pin.WorkerID may be chosen.
	Pin     WorkerKey
	Pinned  bool
	PinRank bool
	// RoundRobin is the caller's request counter; round-robin picks eligible[RoundRobin % n]. Keeping the
	// counter outside keeps Select pure.
	RoundRobin uint64
	// Override is the per-request router config override, or nil.
	Override *Override
	// ReturnCosts fills Decision.Costs (nvext return_routing), appending to CostsBuf so the caller can
	// reuse the slice.
	ReturnCosts bool
	CostsBuf    []CandidateCost
	// CostsTop, with ReturnCosts, says the caller keeps only the cheapest candidate of each of the
	// CostsTop cheapest workers that are not busy: a selector may then return those rows alone (in
	// that order) instead of every candidate's. 0: every candidate.
	CostsTop int
}

// CandidateCost is one row of Decision.Costs.
type CandidateCost struct {
	Worker  WorkerKey `json:"-"`
	Overlap uint32    `json:"overlap_blocks"`
	Cost    float64   `json:"cost"`
	Busy    bool      `json:"busy,omitempty"`
}

// Decision is Select's answer. The caller performs it: AddRequest on the chosen worker's load tracker,
// approximate-mode recording, dispatch.
type Decision struct {
	Worker WorkerKey
	// Index is the chosen candidate's index in the candidates slice.
	Index int
	// Cost is the chosen candidate's logit (computed in every mode, so /v1/route can report it).
	Cost float64
	// Overlap is the chosen worker's device-tier overlap in blocks.
	Overlap uint32
	// CachedTokens is min(Overlap × block size, ISL): the prefill charge is ISL − CachedTokens.
	CachedTokens int
	// Costs has one row per candidate, in candidate order, when Request.ReturnCosts (or, with
	// Request.CostsTop, possibly only the rows that keeps, cheapest first).
	Costs []CandidateCost
}

// Selector chooses a worker for a request. The router modes of this package implement it; peer baselines
// (llm-d's weighted scorer, SGLang's cache-aware policy) plug in behind the same interface and reuse
// Busy / Allowed for filtering.
type Selector interface {
	Select(req Request, cands []Candidate, rng RNG) (Decision, error)
}

// SelectorFunc adapts a function to Selector.
type SelectorFunc func(req Request, cands []Candidate, rng RNG) (Decision, error)

// Select implements Selector.
func (f SelectorFunc) Select(req Request, cands []Candidate, rng RNG) (Decision, error) {
	return f(req, cands, rng)
}

// NewSelector returns the Selector of cfg.Mode. cfg is copied; it must be Resolved and valid.
func NewSelector(cfg Config) (Selector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return SelectorFunc(func(req Request, cands []Candidate, rng RNG) (Decision, error) {
		return Select(req, cands, &cfg, rng)
	}), nil
}

var _ Selector = SelectorFunc(nil)

// Busy reports whether c is over any busy threshold of cfg (OR-combined). It applies in every
// mode.
func Busy(c *Candidate, cfg *Config) bool {
	f := newFilter(&Request{}, cfg)
	return f.busy(c)
}

// filter is the pin and busy filter of one Select, flattened so the per-candidate check inlines.
type filter struct {
	pinned, pinRank bool
	pin             WorkerKey
	anyBusy         bool
	dec, pf, frac   bool
	decV, pfV, frV  float64
}

func newFilter(req *Request, cfg *Config) filter {
	f := filter{pinned: req.Pinned, pinRank: req.PinRank, pin: req.Pin,
		dec: cfg.ActiveDecodeBlocksThreshold.Set, decV: cfg.ActiveDecodeBlocksThreshold.V,
		pf: cfg.ActivePrefillTokensThreshold.Set, pfV: cfg.ActivePrefillTokensThreshold.V,
		frac: cfg.ActivePrefillTokensThresholdFrac.Set, frV: cfg.ActivePrefillTokensThresholdFrac.V}
	f.anyBusy = f.dec || f.pf || f.frac
	return f
}

func (f *filter) allowed(c *Candidate) bool {
	return !f.pinned || (c.Worker.WorkerID == f.pin.WorkerID && (!f.pinRank || c.Worker.DPRank == f.pin.DPRank))
}

func (f *filter) ok(c *Candidate) bool {
	return f.allowed(c) && (!f.anyBusy || !f.busy(c))
}

func (f *filter) busy(c *Candidate) bool {
	return f.busyLoad(c.Load.ActiveDecodeBlocks, c.Load.ActivePrefillTokens, &c.Capacity)
}

// busyLoad is busy for a candidate's decode blocks, prefill tokens and capacity.
func (f *filter) busyLoad(decode float64, prefillTokens uint64, cp *Capacity) bool {
	if f.dec && cp.TotalKVBlocks > 0 {
		used := decode
		if cp.KVUsedKnown {
			used = float64(int64(cp.KVUsedBlocks))
		}
		if used > f.decV*float64(int64(cp.TotalKVBlocks)) {
			return true
		}
	}
	prefill := float64(int64(prefillTokens))
	if f.pf && prefill > f.pfV {
		return true
	}
	return f.frac && prefill > f.frV*float64(int64(maxBatchedOf(cp)))
}

func maxBatched(c *Candidate) uint64 { return maxBatchedOf(&c.Capacity) }

func maxBatchedOf(cp *Capacity) uint64 {
	if cp.MaxNumBatchedTokens == 0 {
		return DefaultMaxBatchedTokens
	}
	return cp.MaxNumBatchedTokens
}

// Allowed reports whether c may serve req (pin filter).
func Allowed(req *Request, c *Candidate) bool {
	f := filter{pinned: req.Pinned, pinRank: req.PinRank, pin: req.Pin}
	return f.allowed(c)
}

// ShouldQueue reports whether req must wait: a queue threshold is set and every eligible
// candidate has active prefill tokens > threshold × max_num_batched_tokens. With no eligible candidate
// it is false, so the request falls through to the selection error.
func ShouldQueue(req *Request, cands []Candidate, cfg *Config) bool {
	if !cfg.QueueThreshold.Set {
		return false
	}
	f := newFilter(req, cfg)
	any := false
	for i := range cands {
		c := &cands[i]
		if !f.ok(c) {
			continue
		}
		any = true
		if float64(c.Load.ActivePrefillTokens) <= cfg.QueueThreshold.V*float64(maxBatched(c)) {
			return false
		}
	}
	return any
}

// BestCachedTokens is the WSPT key input: the largest min(overlap × block size, ISL) over the
// eligible candidates (the pinned worker's when pinned).
func BestCachedTokens(req *Request, cands []Candidate, cfg *Config) int {
	f := newFilter(req, cfg)
	best := 0
	for i := range cands {
		c := &cands[i]
		if !f.ok(c) {
			continue
		}
		if t := cachedTokens(req.ISL, c.Overlap.Device, cfg.BlockSize); t > best {
			best = t
		}
	}
	return best
}

func cachedTokens(isl int, dev uint32, bs int) int {
	return min(int(dev)*bs, isl)
}

// Select chooses a worker for req among cands under cfg.Mode: pin filter, busy filter, then the mode's
// choice. It is pure: randomness comes from rng, round-robin state from req.RoundRobin. cfg must be
// Resolved and valid; req.Override is applied on top.
func Select(req Request, cands []Candidate, cfg *Config, rng RNG) (Decision, error) {
	if req.Override != nil {
		c, err := cfg.WithOverride(req.Override)
		if err != nil {
			return Decision{}, err
		}
		cfg = &c
	}
	if len(cands) == 0 {
		return Decision{}, ErrNoWorkers
	}
	if cfg.Mode == ModeDirect && !req.Pinned {
		return Decision{}, ErrNoTarget
	}
	f := newFilter(&req, cfg)
	allowed, eligible := len(cands), len(cands)
	if f.pinned || f.anyBusy {
		allowed, eligible = 0, 0
		for i := range cands {
			c := &cands[i]
			if !f.allowed(c) {
				continue
			}
			allowed++
			if !f.anyBusy || !f.busy(c) {
				eligible++
			}
		}
	}
	switch {
	case allowed == 0 && req.Pinned:
		return Decision{}, ErrPinnedNotFound
	case eligible == 0 && req.Pinned:
		return Decision{}, ErrPinnedBusy
	case eligible == 0:
		return Decision{}, ErrAllBusy
	}
	in := newCostInputs(&req, cfg, cands, &f)

	var idx int
	switch cfg.Mode {
	case ModeKV:
		idx = pickKV(&in, cands, cfg.Temperature, &f, eligible, rng)
	case ModeRoundRobin:
		idx = nth(cands, &f, int(req.RoundRobin%uint64(eligible)))
	case ModeRandom:
		idx = nth(cands, &f, rng.IntN(eligible))
	case ModePowerOfTwo:
		idx = pickPowerOfTwo(cands, &f, eligible, rng)
	case ModeLeastLoaded, ModeDirect:
		idx = leastLoaded(cands, &f, -1, rng)
	case ModeDeviceAwareWeighted:
		idx = pickDeviceAware(cands, &f, cfg.EncoderCudaToCPURatio, rng)
	default:
		return Decision{}, fmt.Errorf("%w: unknown router mode %q", ErrBadConfig, cfg.Mode)
	}

	c := &cands[idx]
	d := Decision{
		Worker:       c.Worker,
		Index:        idx,
		Cost:         in.logit(c),
		Overlap:      c.Overlap.Device,
		CachedTokens: cachedTokens(req.ISL, c.Overlap.Device, cfg.BlockSize),
	}
	if req.ReturnCosts {
		out := req.CostsBuf[:0]
		for i := range cands {
			cc := &cands[i]
			out = append(out, CandidateCost{
				Worker:  cc.Worker,
				Overlap: cc.Overlap.Device,
				Cost:    in.logit(cc),
				Busy:    f.anyBusy && f.busy(cc),
			})
		}
		d.Costs = out
	}
	return d, nil
}

// nth returns the index of the k-th (0-based) eligible candidate.
func nth(cands []Candidate, f *filter, k int) int {
	for i := range cands {
		if !f.ok(&cands[i]) {
			continue
		}
		if k == 0 {
			return i
		}
		k--
	}
	panic("scoring: eligible count out of sync")
}

// softmaxStack bounds the logits kept on the stack for temperature sampling.
const softmaxStack = 256

// pickKV is Dynamo's KV selection: argmin with a uniform tie-break at temperature 0, softmax over min-max normalized
// negated logits otherwise.
func pickKV(in *costInputs, cands []Candidate, temp float64, f *filter, eligible int, rng RNG) int {
	if temp == 0 {
		// As Dynamo does, the candidates at the minimum are collected and one is drawn: one draw, and only
		// on a tie (a draw per tied candidate, reservoir-style, cost some 10 ns each: an idle fleet of
		// hundreds of workers ties on every new prompt). The tied are found again by a second pass.
		best, ties := -1, 0
		var bestLogit float64
		for i := range cands {
			c := &cands[i]
			if !f.ok(c) {
				continue
			}
			l := in.logit(c)
			switch {
			case best < 0 || l < bestLogit:
				best, bestLogit, ties = i, l, 1
			case l == bestLogit:
				ties++
			}
		}
		if ties > 1 {
			r := rng.IntN(ties)
			for i := range cands {
				if c := &cands[i]; f.ok(c) && in.logit(c) == bestLogit {
					if r == 0 {
						return i
					}
					r--
				}
			}
		}
		return best
	}

	var stackIdx [softmaxStack]int32
	var stackL [softmaxStack]float64
	idx, logits := stackIdx[:0], stackL[:0]
	if eligible > softmaxStack {
		idx, logits = make([]int32, 0, eligible), make([]float64, 0, eligible)
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for i := range cands {
		c := &cands[i]
		if !f.ok(c) {
			continue
		}
		l := in.logit(c)
		idx, logits = append(idx, int32(i)), append(logits, l)
		lo, hi = fmin(lo, l), fmax(hi, l)
	}
	return int(idx[softmaxPick(logits, lo, hi, temp, rng)])
}

// softmaxPick samples index i with p_i ∝ exp(−(l_i − lo)/((hi − lo)·T)); uniform when lo == hi. The
// cumulative walk picks the first entry whose running sum exceeds u; rounding falls back to the last.
func softmaxPick(logits []float64, lo, hi, temp float64, rng RNG) int {
	n := len(logits)
	if lo == hi {
		return rng.IntN(n)
	}
	span := (hi - lo) * temp
	var sum float64
	for i, l := range logits {
		p := math.Exp(-(l - lo) / span)
		logits[i] = p
		sum += p
	}
	u := rng.Float64()
	var cum float64
	for i, p := range logits {
		cum += p / sum
		if u < cum {
			return i
		}
	}
	return n - 1
}

package sched

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
)

// TestCostKernel: the calibrated decision through the vector kernel gives the scalar loop's costs bit
// for bit (in its arrays and the returned costs), its chosen cost and k and its tie list (or its
// error), with targets left out or busy (exclusions, unhealthy workers, busy thresholds) in some rounds,
// over random fleets of 1 to 70 workers (every tail
// length) and 256: random overlaps, queued prefill, active blocks (some equal, for ties), capacities
// (unknown, ample, overflowed), prompts shorter than some overlaps, workers with active requests sharing the prompt (projections, the
// holder's sharers: the replica credit and the decode-batch credit on and off), load, prefill tracking
// on and off, rounds where every worker is alike and
// rounds with a NaN or infinite cost.
func TestCostKernel(t *testing.T) {
	if !haveCostKernel {
		t.Skip("no AVX-512DQ cost kernel")
	}
	rng := rand.New(rand.NewPCG(7, 11))
	credits := 0
	for round := range 400 {
		cfg := scoring.DefaultConfig()
		cfg.Mode, cfg.BlockSize = scoring.ModeKV, []int{1, 16}[rng.IntN(2)]
		cfg.TrackPrefillTokens = rng.IntN(4) != 0
		m, n := kernelFleet(t, round, cfg)
		shared := 20 + rng.IntN(200)
		local := prompt(0, shared)
		chain := scoring.ChainHashes(nil, local)
		// Requests sharing the prompt's prefix, on a few workers: their trackers project and share it.
		holder := rng.IntN(n)
		for r := range rng.IntN(6) {
			w := holder
			if r > 1 {
				w = rng.IntN(n)
			}
			pin := scoring.WorkerKey{WorkerID: uint64(w + 1)}
			if _, _, err := m.Route(time.Unix(1, 0), &Request{ID: strconv.Itoa(r), Local: prompt(uint64(r+1), shared),
				ISL: (shared + 100) * cfg.BlockSize, Pin: &pin, Scores: nil, Matched: true}); err != nil {
				t.Fatal(err)
			}
		}
		alike := round%7 == 3
		var scores []prefix.Score
		for i := range n {
			if alike || rng.IntN(3) == 0 {
				continue
			}
			scores = append(scores, prefix.Score{Worker: prefix.WorkerKey{WorkerID: uint64(i + 1)}, Blocks: uint32(rng.IntN(shared + 1))})
		}
		if !alike && rng.IntN(2) == 0 {
			scores = append(scores, prefix.Score{Worker: prefix.WorkerKey{WorkerID: uint64(holder + 1)}, Blocks: uint32(shared)})
		}
		rng.Shuffle(len(scores), func(i, j int) { scores[i], scores[j] = scores[j], scores[i] })
		primary := scores
		if len(scores) > 0 && rng.IntN(3) == 0 {
			primary = scores[:rng.IntN(len(scores))]
		}
		for i := range m.lines {
			l := &m.lines[i]
			if alike {
				l.prefill, l.decode, m.tmpl[i].totalKV = 0, 0, 0
				continue
			}
			l.prefill = uint64(rng.IntN(4) * rng.IntN(20000))
			l.decode = float64(rng.IntN(8) * rng.IntN(400))
			if rng.IntN(3) == 0 {
				l.decode += rng.Float64()
			}
			if l.active != 0 {
				l.prefilling = uint32(rng.IntN(int(l.active) + 1))
			}
			m.tmpl[i].totalKV = []uint64{0, uint64(rng.IntN(2000)), 1 << 20}[rng.IntN(3)]
		}
		if round%13 == 5 { // a NaN or an infinite cost: the scalar comparisons decide
			m.lines[rng.IntN(n)].decode = []float64{math.NaN(), math.Inf(1), math.Inf(-1)}[rng.IntN(3)]
		}
		m.prefilling = int64(rng.IntN(3 * n))
		isl := (shared + 100) * cfg.BlockSize
		if rng.IntN(3) == 0 { // shorter than some overlaps
			isl = (1 + rng.IntN(shared)) * cfg.BlockSize
		}
		reuse := rng.IntN(5) != 0
		// Some rounds leave targets out (an exclusion, an unhealthy worker): the mask the kernel's
		// costs are masked by, as the scalar loop skips them.
		var av avoid
		if round%3 == 1 {
			for range 1 + rng.IntN(3) {
				av.exclude = append(av.exclude, uint64(1+rng.IntN(n)))
			}
		}
		if round%5 == 2 {
			m.SetHealthy(time.Unix(0, 0), uint64(1+rng.IntN(n)), false)
		}
		if round%4 == 3 { // busy targets in the mask
			c := *m.cfg
			c.ActivePrefillTokensThreshold = scoring.Some(float64(rng.IntN(30000)))
			if _, err := m.SetConfig(time.Unix(1, 0), c); err != nil {
				t.Fatal(err)
			}
		}
		masked := len(av.exclude) > 0 || m.unhealthy > 0 || m.cfg.ActivePrefillTokensThreshold.Set
		decide := func(kernel, costs bool) (scoring.Decision, []uint64, float64, error) {
			defer func(on bool) { haveCostKernel = on }(haveCostKernel)
			haveCostKernel = kernel
			sreq := scoring.Request{ISL: isl, ReturnCosts: costs}
			_, d, err := m.calibrated(&sreq, overlap{scores: scores}, primary, false, chain, isl, reuse, av)
			return d, slices.Clone(m.sc.ties), m.sc.chosenK, err
		}
		ref, refTies, refK, refErr := decide(false, true)
		if refErr != nil {
			if _, _, _, err := decide(true, false); err == nil || err.Error() != refErr.Error() {
				t.Fatalf("round %d: the scalar loop: %v; the kernel: %v", round, refErr, err)
			}
			continue
		}
		for _, costs := range []bool{false, true} {
			d, ties, k, err := decide(true, costs)
			if err != nil {
				t.Fatal(err)
			}
			if math.Float64bits(d.Cost) != math.Float64bits(ref.Cost) || math.Float64bits(k) != math.Float64bits(refK) || !slices.Equal(ties, refTies) ||
				!slices.Contains(ties, uint64(d.Index)) {
				t.Fatalf("round %d (%d workers), costs %v: cost %v k %v ties %v, scalar %v %v %v",
					round, n, costs, d.Cost, k, ties, ref.Cost, refK, refTies)
			}
			if costs && !slices.EqualFunc(d.Costs, ref.Costs, func(a, b scoring.CandidateCost) bool {
				return a.Worker == b.Worker && a.Overlap == b.Overlap && a.Busy == b.Busy &&
					math.Float64bits(a.Cost) == math.Float64bits(b.Cost)
			}) {
				t.Fatalf("round %d (%d workers): returned costs differ", round, n)
			}
		}
		for i, c := range ref.Costs {
			if masked { // the rows skip the targets left out, and the kernel's array holds them as +Inf
				break
			}
			if math.Float64bits(m.sc.cost[i]) != math.Float64bits(c.Cost) {
				t.Fatalf("round %d (%d workers): target %d cost %v (%#x), scalar %v (%#x)", round, n, i,
					m.sc.cost[i], math.Float64bits(m.sc.cost[i]), c.Cost, math.Float64bits(c.Cost))
			}
		}
		h := m.hold(scores, primary, false, false, chain, isl, reuse)
		if h.sharers > 0 || h.active >= 2 {
			credits++
		}
	}
	if credits < 20 {
		t.Fatalf("only %d of 400 rounds had a holder with sharers: the credit terms went untested", credits)
	}
}

// kernelFleet is a kernel test's machine for round: under cfg, seeded by the round, with 1 to 70
// workers (every tail length of the kernel's eights), 256 every tenth round.
func kernelFleet(t *testing.T, round int, cfg scoring.Config) (*Machine, int) {
	t.Helper()
	n := 1 + round%70
	if round%10 == 9 {
		n = 256
	}
	m := seededMachine(t, cfg, uint64(round))
	for id := range n {
		m.AddWorker(time.Unix(0, 0), Worker{ID: uint64(id + 1)})
	}
	return m, n
}

// drawRNG draws r (mod n) and remembers the n of its last draw: a decision's tie-break made to pick each
// tied candidate in turn.
type drawRNG struct{ r, n int }

func (d *drawRNG) IntN(n int) int   { d.n = n; return d.r % n }
func (d *drawRNG) Float64() float64 { return 0 }

// TestLinearKernel: a decision under the linear policy (Dynamo's cost) through the vector kernel
// (linearArgmin) gives the load-row loop's (OfferLoads) decision: the same chosen target for every draw
// among the tied, the same cost bits, overlap and cached tokens, or the same error, and the kernel's
// cost array holds scoring.Linear's cost of every target's row bit for bit. Random fleets of 1 to 70
// workers (every tail length) and 256: random overlaps, prefill and decode loads (some alike, for ties),
// active requests sharing the prompt (projections), prefill tracking, a request weight, the overlap
// credit and the prefill scale, reuse on and off, targets left out (exclusions, unhealthy workers, every
// worker), busy thresholds (the busy marks; every worker busy in some rounds), and rounds with a NaN or
// infinite cost (the scalar loop decides those).
func TestLinearKernel(t *testing.T) {
	if !haveCostKernel {
		t.Skip("no AVX-512DQ cost kernel")
	}
	rng := rand.New(rand.NewPCG(5, 13))
	ran := 0
	for round := range 400 {
		cfg := scoring.DefaultConfig()
		cfg.Preset, cfg.Mode, cfg.BlockSize = scoring.PresetDynamo, scoring.ModeKV, []int{1, 16}[rng.IntN(2)]
		cfg.TrackPrefillTokens = rng.IntN(4) != 0
		cfg.DecodeActiveRequestWeight = []float64{0, 0.5, 3}[rng.IntN(3)]
		cfg.OverlapScoreCredit = []float64{1, 0.25, 2}[rng.IntN(3)]
		cfg.PrefillLoadScale = []float64{1, 0.7, 4}[rng.IntN(3)]
		m, n := kernelFleet(t, round, cfg)
		shared := 20 + rng.IntN(200)
		chain := scoring.ChainHashes(nil, prompt(0, shared))
		for r := range rng.IntN(8) { // requests sharing the prompt's prefix: their trackers project it
			pin := scoring.WorkerKey{WorkerID: uint64(rng.IntN(n) + 1)}
			if _, _, err := m.Route(time.Unix(1, 0), &Request{ID: strconv.Itoa(r), Local: prompt(uint64(r+1), shared),
				ISL: (shared + 100) * cfg.BlockSize, Pin: &pin, Matched: true}); err != nil {
				t.Fatal(err)
			}
		}
		alike := round%7 == 3
		var scores []prefix.Score
		for i := range n {
			if !alike && rng.IntN(3) != 0 {
				scores = append(scores, prefix.Score{Worker: prefix.WorkerKey{WorkerID: uint64(i + 1)}, Blocks: uint32(rng.IntN(shared + 1))})
			}
		}
		for i := range m.lines {
			l := &m.lines[i]
			if alike {
				l.prefill, l.decode = 0, 0
				continue
			}
			l.prefill = uint64(rng.IntN(4) * rng.IntN(20000))
			l.decode = float64(rng.IntN(8) * rng.IntN(400))
			if rng.IntN(3) == 0 {
				l.decode += rng.Float64()
			}
		}
		infinite := round%13 == 5 || round%26 == 18
		if round%13 == 5 {
			m.lines[rng.IntN(n)].decode = []float64{math.NaN(), math.Inf(1), math.Inf(-1)}[rng.IntN(3)]
		}
		if round%26 == 18 { // every cost +Inf, one target left out below: it must not be among the tied
			for i := range m.lines {
				m.lines[i].decode = math.Inf(1)
			}
		}
		// Busy thresholds in some rounds, set after the loads so the busy marks read them (SetConfig);
		// one round in 26 has every worker busy.
		if round%4 == 3 || round%26 == 7 {
			c := *m.cfg
			c.ActivePrefillTokensThreshold = scoring.Some(float64(rng.IntN(30000)))
			if round%8 == 7 {
				c.ActivePrefillTokensThresholdFrac = scoring.Some(rng.Float64() * 4)
			}
			if round%26 == 7 {
				c.ActivePrefillTokensThreshold = scoring.Some(0)
				for i := range m.lines {
					m.lines[i].prefill++
				}
			}
			if _, err := m.SetConfig(time.Unix(1, 0), c); err != nil {
				t.Fatal(err)
			}
		}
		isl := (1 + rng.IntN(shared+100)) * cfg.BlockSize
		reuse, ch := rng.IntN(5) != 0, chain
		if rng.IntN(6) == 0 {
			ch = nil
		}
		var av avoid
		switch {
		case round%3 == 1:
			for range 1 + rng.IntN(3) {
				av.exclude = append(av.exclude, uint64(1+rng.IntN(n)))
			}
		case round%26 == 18:
			av.exclude = []uint64{uint64(1 + rng.IntN(n))}
		case round%11 == 4: // every worker excluded: no target left in
			for id := range n {
				av.exclude = append(av.exclude, uint64(id+1))
			}
		}
		if round%5 == 2 {
			m.SetHealthy(time.Unix(0, 0), uint64(1+rng.IntN(n)), false)
		}
		decide := func(kernel bool, draw int) (scoring.Decision, int, error) {
			defer func(on bool) { haveCostKernel = on }(haveCostKernel)
			haveCostKernel = kernel
			d := &drawRNG{r: draw}
			am, ok := scoring.NewArgmin(&scoring.Request{ISL: isl}, m.cfg, d)
			if !ok || !am.LoadOnly() {
				t.Fatalf("round %d: the linear policy's decision is not an Argmin over load rows", round)
			}
			_, dec, err := m.argmin(&am, overlap{scores: scores}, ch, reuse, av)
			return dec, d.n, err
		}
		_, ties, refErr := decide(false, 0)
		for draw := range max(ties, 1) {
			ref, _, _ := decide(false, draw)
			d, kties, err := decide(true, draw)
			if (err == nil) != (refErr == nil) || err != nil && err.Error() != refErr.Error() {
				t.Fatalf("round %d: the load rows: %v; the kernel: %v", round, refErr, err)
			}
			if d.Index != ref.Index || kties != ties || math.Float64bits(d.Cost) != math.Float64bits(ref.Cost) ||
				d.Overlap != ref.Overlap || d.CachedTokens != ref.CachedTokens {
				t.Fatalf("round %d (%d workers), draw %d of %d: kernel %+v (%d tied), load rows %+v",
					round, n, draw, ties, d, kties, ref)
			}
		}
		if refErr != nil || len(av.exclude) > 0 || m.unhealthy > 0 || infinite {
			continue
		}
		// The kernel's array against the production cost of each target's row, target by target.
		am, _ := scoring.NewArgmin(&scoring.Request{ISL: isl}, m.cfg, &drawRNG{})
		lin := am.Linear()
		cost := slices.Clone(m.linearCosts(lin, m.overlaps(overlap{scores: scores}), ch, reuse))
		rows, _ := m.loadRows(overlap{scores: scores}, ch, reuse, false, av)
		for i := range rows {
			if want := lin.Cost(&rows[i]); math.Float64bits(cost[i]) != math.Float64bits(want) {
				t.Fatalf("round %d (%d workers): target %d cost %v, its row's %v", round, n, i, cost[i], want)
			}
		}
		ran++
	}
	if ran < 150 {
		t.Fatalf("only %d of 400 rounds compared every target's cost", ran)
	}
}

// TestNotEligibleAsAByteLoop: notEligible visits the positions a loop over every byte would, in order,
// and fillEligible leaves every byte eligible, for masks of every length up to 70 and random standings.
func TestNotEligibleAsAByteLoop(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	for round := range 2000 {
		mask := make([]uint8, round%71)
		fillEligible(mask)
		if slices.ContainsFunc(mask, func(b uint8) bool { return b != candEligible }) {
			t.Fatalf("fillEligible(%d bytes) = %v", len(mask), mask)
		}
		for range rng.IntN(4) {
			if len(mask) > 0 {
				mask[rng.IntN(len(mask))] = []uint8{candLeftOut, candBusy}[rng.IntN(2)]
			}
		}
		var want, got []int
		for i, st := range mask {
			if st != candEligible {
				want = append(want, i)
			}
		}
		notEligible(mask, func(i int) { got = append(got, i) })
		if !slices.Equal(got, want) {
			t.Fatalf("mask %v: notEligible visits %v, the byte loop %v", mask, got, want)
		}
	}
}

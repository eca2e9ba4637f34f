package scoring

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// TestArgminMatchesSelect: over random fleets (many ties, busy workers, unknown loads) and the configs
// Argmin takes (weights, prefill tracking, busy thresholds, lmetric, decode workers), offering every
// candidate in order gives Select's decision, error and tie-break, with identically seeded RNGs.
func TestArgminMatchesSelect(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	taken, rowsTaken := 0, 0
	for trial := range 3000 {
		cfg := DefaultConfig()
		cfg.Mode = ModeKV
		cfg.BlockSize = []int{1, 16, 64}[rng.IntN(3)]
		cfg.OverlapScoreCredit = []float64{0, 1, 2.5}[rng.IntN(3)]
		cfg.PrefillLoadScale = []float64{1, 16}[rng.IntN(2)]
		cfg.DecodeActiveRequestWeight = []float64{0, 0.5}[rng.IntN(2)]
		cfg.TrackPrefillTokens = rng.IntN(4) != 0
		if rng.IntN(3) == 0 {
			cfg.ActiveDecodeBlocksThreshold = Some(0.5)
		}
		if rng.IntN(3) == 0 {
			cfg.ActivePrefillTokensThreshold = Some(float64(rng.IntN(64)))
		}
		if rng.IntN(4) == 0 {
			cfg.SelectionPolicy = PolicyLMetric
		}
		if rng.IntN(4) == 0 {
			cfg.WorkerType = WorkerDecode
		}
		if rng.IntN(6) == 0 {
			cfg.Temperature = 0.5 // Argmin must decline
		}
		if rng.IntN(6) == 0 {
			cfg.OverlapScoreCreditDecay = 1 // declines when prefill is tracked
		}
		cands := make([]Candidate, rng.IntN(12))
		allKnown := rng.IntN(2) == 0
		for i := range cands {
			cands[i] = Candidate{Worker: WorkerKey{WorkerID: uint64(i), DPRank: uint32(rng.IntN(2))},
				Overlap: Overlap{Device: uint32(rng.IntN(3))},
				Load: Load{Known: rng.IntN(5) != 0, ActivePrefillTokens: uint64(rng.IntN(3) * 32), ActiveDecodeBlocks: float64(rng.IntN(3)),
					AdditionalBlocks: uint64(rng.IntN(2)), ActiveRequests: uint32(rng.IntN(2))},
				Capacity: Capacity{TotalKVBlocks: uint64(rng.IntN(3)), KVUsedBlocks: uint64(rng.IntN(3)), KVUsedKnown: rng.IntN(2) == 0}}
			cands[i].Load.Known = cands[i].Load.Known || allKnown
		}
		req := Request{ISL: rng.IntN(100)}
		seed := rng.Uint64()
		want, wantErr := Select(req, cands, &cfg, rand.New(rand.NewPCG(seed, 0)))
		am, ok := NewArgmin(&req, &cfg, rand.New(rand.NewPCG(seed, 0)))
		declines := cfg.Temperature != 0 || (cfg.TrackPrefillTokens && cfg.OverlapScoreCreditDecay > 0)
		if ok == declines {
			t.Fatalf("trial %d: NewArgmin ok=%v for temperature %v, decay %v", trial, ok, cfg.Temperature, cfg.OverlapScoreCreditDecay)
		}
		if !ok {
			continue
		}
		taken++
		for i := range cands {
			am.Offer(i, &cands[i])
		}
		got, err := am.Decision()
		// The row loop, when it applies: the same decision, errors, cost bits and tie-break.
		var rowsGot Decision
		rowsRan := am.LoadOnly() && allKnown
		if rowsRan {
			rows, caps := make([]LoadRow, len(cands)), make([]Capacity, len(cands))
			for i, c := range cands {
				rows[i] = LoadRow{Prefill: c.Load.ActivePrefillTokens, Decode: c.Load.ActiveDecodeBlocks,
					Additional: c.Load.AdditionalBlocks, Overlap: c.Overlap.Device, Requests: c.Load.ActiveRequests}
				caps[i] = c.Capacity
			}
			ar, _ := NewArgmin(&req, &cfg, rand.New(rand.NewPCG(seed, 0)))
			if !ar.ReadsCapacity() {
				caps = nil // not read
			}
			ar.OfferLoads(rows, caps)
			var rowsErr error
			rowsGot, rowsErr = ar.Decision()
			if !errors.Is(rowsErr, wantErr) || !errors.Is(wantErr, rowsErr) {
				t.Fatalf("trial %d: rows: error %v, Select %v", trial, rowsErr, wantErr)
			}
			rowsTaken++
		}
		if wantErr != nil || err != nil {
			if !errors.Is(err, wantErr) || !errors.Is(wantErr, err) {
				t.Fatalf("trial %d: error %v, Select %v", trial, err, wantErr)
			}
			continue
		}
		got.Worker = cands[got.Index].Worker
		if got.Index != want.Index || got.Worker != want.Worker || got.Cost != want.Cost || got.Overlap != want.Overlap ||
			got.CachedTokens != want.CachedTokens {
			t.Fatalf("trial %d: argmin %+v, Select %+v", trial, got, want)
		}
		if rowsRan {
			rowsGot.Worker = cands[rowsGot.Index].Worker
			if rowsGot.Index != got.Index || rowsGot.Worker != got.Worker || math.Float64bits(rowsGot.Cost) != math.Float64bits(got.Cost) ||
				rowsGot.Overlap != got.Overlap || rowsGot.CachedTokens != got.CachedTokens {
				t.Fatalf("trial %d: rows %+v, Offer %+v", trial, rowsGot, got)
			}
		}
	}
	if taken < 1500 || rowsTaken < 300 {
		t.Fatalf("only %d trials took the one-pass path, %d the row loop", taken, rowsTaken)
	}
}

// TestArgminDeclines: what Argmin does not cover goes to Select.
func TestArgminDeclines(t *testing.T) {
	base := DefaultConfig()
	base.Mode = ModeKV
	for name, mod := range map[string]func(*Config, *Request){
		"round-robin":  func(c *Config, _ *Request) { c.Mode = ModeRoundRobin },
		"temperature":  func(c *Config, _ *Request) { c.Temperature = 1 },
		"decay":        func(c *Config, _ *Request) { c.OverlapScoreCreditDecay = 0.5 },
		"override":     func(_ *Config, r *Request) { r.Override = &Override{} },
		"pinned":       func(_ *Config, r *Request) { r.Pinned = true },
		"return costs": func(_ *Config, r *Request) { r.ReturnCosts = true },
	} {
		cfg, req := base, Request{ISL: 10}
		mod(&cfg, &req)
		if _, ok := NewArgmin(&req, &cfg, rand.New(rand.NewPCG(1, 1))); ok {
			t.Errorf("%s: Argmin accepted", name)
		}
	}
}

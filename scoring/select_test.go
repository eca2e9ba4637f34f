package scoring

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// fakeRNG replays fixed draws; IntN takes values modulo n.
type fakeRNG struct {
	floats []float64
	ints   []int
}

func (r *fakeRNG) Float64() float64 {
	v := r.floats[0]
	r.floats = r.floats[1:]
	return v
}

func (r *fakeRNG) IntN(n int) int {
	if len(r.ints) == 0 {
		return 0
	}
	v := r.ints[0]
	r.ints = r.ints[1:]
	return v % n
}

func kvConfig() Config {
	c := DefaultConfig()
	c.Mode = ModeKV
	return c
}

func cand(id uint64, dev uint32, decode float64) Candidate {
	return Candidate{Worker: WorkerKey{WorkerID: id}, Overlap: Overlap{Device: dev},
		Load: Load{Known: true, ActiveDecodeBlocks: decode}}
}

// TestWorkedExample is Dynamo's documented worked example: credit 1, scale 1, raw prefill 10 blocks everywhere.
func TestWorkedExample(t *testing.T) {
	cfg := kvConfig()
	cfg.BlockSize = 16
	req := Request{ISL: 160, ReturnCosts: true} // 10 blocks, nothing active
	cands := []Candidate{cand(1, 2, 10), cand(2, 5, 5), cand(3, 8, 9)}
	d, err := Select(req, cands, &cfg, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	if d.Worker.WorkerID != 2 || d.Cost != 10 || d.Overlap != 5 || d.CachedTokens != 80 {
		t.Fatalf("decision %+v, want W2 cost 10 overlap 5", d)
	}
	want := []float64{18, 10, 11}
	for i, c := range d.Costs {
		if c.Cost != want[i] {
			t.Errorf("W%d cost %v, want %v", i+1, c.Cost, want[i])
		}
	}
	terms := Cost(req, cands, &cfg)
	if terms[0].RawPrefillBlocks != 10 || terms[0].AdjustedPrefillBlocks != 8 || terms[0].DecodeBlocks != 10 {
		t.Errorf("W1 terms %+v", terms[0])
	}
}

func TestCostTerms(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		c    Candidate
		isl  int
		want float64
	}{
		{"no load known charges isl", nil, Candidate{Overlap: Overlap{Device: 2}}, 64, 64.0/16 - 2},
		{"active prefill adds", nil, Candidate{Load: Load{Known: true, ActivePrefillTokens: 32}}, 64, 6},
		{"additional blocks add to decode", nil, Candidate{Load: Load{Known: true, ActiveDecodeBlocks: 3, AdditionalBlocks: 4}}, 64, 4 + 7},
		{"scale", func(c *Config) { c.PrefillLoadScale = 2 }, Candidate{Load: Load{Known: true}}, 64, 8},
		{"credit 0.5", func(c *Config) { c.OverlapScoreCredit = 0.5 }, Candidate{Load: Load{Known: true}, Overlap: Overlap{Device: 4}}, 64, 2},
		{"credit clips at 0", func(c *Config) { c.OverlapScoreCredit = 3 }, Candidate{Load: Load{Known: true}, Overlap: Overlap{Device: 4}}, 64, 0},
		{"overlap beyond isl is clipped", nil, Candidate{Load: Load{Known: true}, Overlap: Overlap{Device: 8}}, 64, 0},
		{"host and disk", nil, Candidate{Load: Load{Known: true}, Overlap: Overlap{Host: 2, Disk: 4}}, 64, 4 - 1.5 - 1},
		{"shared only with hicache", nil, Candidate{Load: Load{Known: true}, Overlap: Overlap{Shared: 4}}, 64, 4},
		{"shared beyond device", func(c *Config) { c.SharedCacheType = SharedCacheHiCache }, Candidate{Load: Load{Known: true}, Overlap: Overlap{Device: 1, Shared: 3}}, 64, 4 - 1 - 1},
		{"no prefill tracking", func(c *Config) { c.TrackPrefillTokens = false }, Candidate{Load: Load{Known: true, ActiveDecodeBlocks: 5}}, 64, 5},
		{"active request weight", func(c *Config) { c.DecodeActiveRequestWeight = 0.5 }, Candidate{Load: Load{Known: true, ActiveRequests: 4}}, 64, 4 + 2},
		{"lmetric", func(c *Config) { c.SelectionPolicy = PolicyLMetric }, Candidate{Load: Load{Known: true, ActiveDecodeBlocks: 2}, Overlap: Overlap{Device: 1}}, 64, 3 * 3},
		{"decode router", func(c *Config) { c.WorkerType = WorkerDecode; c.TrackPrefillTokens = false },
			Candidate{Load: Load{Known: true, ActiveDecodeBlocks: 5, AdditionalBlocks: 1}, Overlap: Overlap{Device: 2}}, 64, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := kvConfig()
			if tc.mod != nil {
				tc.mod(&cfg)
			}
			got := Cost(Request{ISL: tc.isl}, []Candidate{tc.c}, &cfg)[0].Logit
			if math.Abs(got-tc.want) > 1e-12 {
				t.Fatalf("logit %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCreditDecay(t *testing.T) {
	cfg := kvConfig()
	cfg.OverlapScoreCreditDecay = 1
	// Request of 4 blocks; W2 has 4 blocks (one request-equivalent) of excess prefill: credit halves.
	cands := []Candidate{
		{Load: Load{Known: true}},
		{Load: Load{Known: true, ActivePrefillTokens: 64}, Overlap: Overlap{Device: 4}},
	}
	terms := Cost(Request{ISL: 64}, cands, &cfg)
	if terms[1].Decay != 0.5 || terms[1].OverlapCreditBlocks != 2 {
		t.Fatalf("terms %+v", terms[1])
	}
	if terms[0].Decay != 1 {
		t.Fatalf("least-loaded worker decays: %+v", terms[0])
	}
}

func TestTieBreakIsUniform(t *testing.T) {
	cfg := kvConfig()
	cands := []Candidate{cand(1, 0, 0), cand(2, 0, 0), cand(3, 0, 0), cand(4, 0, 9)}
	rng := rand.New(rand.NewPCG(7, 7))
	var hits [4]int
	const n = 30000
	for range n {
		d, err := Select(Request{ISL: 32}, cands, &cfg, rng)
		if err != nil {
			t.Fatal(err)
		}
		hits[d.Index]++
	}
	if hits[3] != 0 {
		t.Fatalf("costlier worker chosen %d times", hits[3])
	}
	for i := range 3 {
		if f := float64(hits[i]) / n; math.Abs(f-1.0/3) > 0.02 {
			t.Errorf("worker %d share %.3f, want 1/3", i+1, f)
		}
	}
}

func TestSoftmax(t *testing.T) {
	// logits 0, 10: p0 ∝ 1, p1 ∝ e^{-1/T}. T=1: p0 = 1/(1+e^-1) ≈ 0.731.
	p0 := 1 / (1 + math.Exp(-1))
	tests := []struct {
		name string
		u    float64
		want int
	}{
		{"below p0", p0 - 1e-9, 0},
		{"at p0 goes to next", p0, 1},
		{"top", 0.999999, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := softmaxPick([]float64{0, 10}, 0, 10, 1, &fakeRNG{floats: []float64{tc.u}})
			if got != tc.want {
				t.Fatalf("pick %d, want %d", got, tc.want)
			}
		})
	}
	if got := softmaxPick([]float64{3, 3, 3}, 3, 3, 1, &fakeRNG{ints: []int{2}}); got != 2 {
		t.Fatalf("equal logits: pick %d, want uniform draw 2", got)
	}
	// Rounding fallback: u beyond the cumulative sum returns the last entry.
	if got := softmaxPick([]float64{0, 10}, 0, 10, 1, &fakeRNG{floats: []float64{1}}); got != 1 {
		t.Fatalf("fallback pick %d", got)
	}
}

func TestSelectErrorsAndBusy(t *testing.T) {
	busyPrefill := Candidate{Worker: WorkerKey{WorkerID: 1}, Load: Load{Known: true, ActivePrefillTokens: 500}}
	idle := Candidate{Worker: WorkerKey{WorkerID: 2}, Load: Load{Known: true}}
	tests := []struct {
		name    string
		mode    RouterMode
		mod     func(*Config)
		req     Request
		cands   []Candidate
		want    uint64
		wantErr error
	}{
		{"no workers", ModeKV, nil, Request{}, nil, 0, ErrNoWorkers},
		{"prefill threshold filters", ModeKV, func(c *Config) { c.ActivePrefillTokensThreshold = Some(100) }, Request{}, []Candidate{busyPrefill, idle}, 2, nil},
		{"all busy", ModeRoundRobin, func(c *Config) { c.ActivePrefillTokensThreshold = Some(100) }, Request{}, []Candidate{busyPrefill}, 0, ErrAllBusy},
		{"frac threshold", ModeRandom, func(c *Config) { c.ActivePrefillTokensThresholdFrac = Some(0.5) },
			Request{}, []Candidate{{Worker: WorkerKey{WorkerID: 1}, Load: Load{ActivePrefillTokens: 600}, Capacity: Capacity{MaxNumBatchedTokens: 1000}}, idle}, 2, nil},
		{"decode blocks threshold uses kv_used", ModeLeastLoaded, func(c *Config) { c.ActiveDecodeBlocksThreshold = Some(0.9) },
			Request{}, []Candidate{{Worker: WorkerKey{WorkerID: 1}, Capacity: Capacity{TotalKVBlocks: 100, KVUsedBlocks: 95, KVUsedKnown: true}}, {Worker: WorkerKey{WorkerID: 2}, InFlight: 5}}, 2, nil},
		{"pinned not found", ModeKV, nil, Request{Pinned: true, Pin: WorkerKey{WorkerID: 9}}, []Candidate{idle}, 0, ErrPinnedNotFound},
		{"pinned busy", ModeKV, func(c *Config) { c.ActivePrefillTokensThreshold = Some(100) }, Request{Pinned: true, Pin: WorkerKey{WorkerID: 1}}, []Candidate{busyPrefill, idle}, 0, ErrPinnedBusy},
		{"direct without target", ModeDirect, nil, Request{}, []Candidate{idle}, 0, ErrNoTarget},
		{"direct", ModeDirect, nil, Request{Pinned: true, Pin: WorkerKey{WorkerID: 1}}, []Candidate{busyPrefill, idle}, 1, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Mode = tc.mode
			if tc.mod != nil {
				tc.mod(&cfg)
			}
			d, err := Select(tc.req, tc.cands, &cfg, rand.New(rand.NewPCG(1, 1)))
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if err == nil && d.Worker.WorkerID != tc.want {
				t.Fatalf("chose %d, want %d", d.Worker.WorkerID, tc.want)
			}
		})
	}
	if !errors.Is(ErrPinnedBusy, ErrAllBusy) || !errors.Is(ErrPinnedNotFound, ErrNoWorkers) {
		t.Fatal("pinned errors must wrap their class")
	}
}

func TestModes(t *testing.T) {
	three := []Candidate{
		{Worker: WorkerKey{WorkerID: 1}, InFlight: 3},
		{Worker: WorkerKey{WorkerID: 2}, InFlight: 1},
		{Worker: WorkerKey{WorkerID: 3}, InFlight: 2},
	}
	mixed := []Candidate{
		{Worker: WorkerKey{WorkerID: 1}, Device: DeviceGPU, InFlight: 8},
		{Worker: WorkerKey{WorkerID: 2}, Device: DeviceGPU, InFlight: 9},
		{Worker: WorkerKey{WorkerID: 3}, Device: DeviceCPU, InFlight: 2},
	}
	tests := []struct {
		name  string
		mode  RouterMode
		req   Request
		cands []Candidate
		rng   *fakeRNG
		want  uint64
	}{
		{"round-robin 0", ModeRoundRobin, Request{RoundRobin: 0}, three, &fakeRNG{}, 1},
		{"round-robin 4", ModeRoundRobin, Request{RoundRobin: 4}, three, &fakeRNG{}, 2},
		{"random", ModeRandom, Request{}, three, &fakeRNG{ints: []int{2}}, 3},
		{"power-of-two keeps lighter", ModePowerOfTwo, Request{}, three, &fakeRNG{ints: []int{0, 1}}, 3},
		{"power-of-two distinct", ModePowerOfTwo, Request{}, three, &fakeRNG{ints: []int{1, 1}}, 2},
		{"least-loaded", ModeLeastLoaded, Request{}, three, &fakeRNG{}, 2},
		// GPU group 17/(2×8) ≈ 1.06 vs CPU 2/1: GPU group, then its lightest.
		{"device-aware gpu", ModeDeviceAwareWeighted, Request{}, mixed, &fakeRNG{}, 1},
		{"device-aware cpu", ModeDeviceAwareWeighted, Request{}, []Candidate{mixed[0], mixed[1], {Worker: WorkerKey{WorkerID: 3}, Device: DeviceCPU}}, &fakeRNG{}, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Mode = tc.mode
			d, err := Select(tc.req, tc.cands, &cfg, tc.rng)
			if err != nil {
				t.Fatal(err)
			}
			if d.Worker.WorkerID != tc.want {
				t.Fatalf("chose %d, want %d", d.Worker.WorkerID, tc.want)
			}
		})
	}
}

func TestQueueAndWSPTInputs(t *testing.T) {
	cfg := kvConfig()
	cands := []Candidate{
		{Load: Load{ActivePrefillTokens: 150}, Capacity: Capacity{MaxNumBatchedTokens: 100}, Overlap: Overlap{Device: 2}},
		{Load: Load{ActivePrefillTokens: 90}, Capacity: Capacity{MaxNumBatchedTokens: 100}, Overlap: Overlap{Device: 5}},
	}
	req := Request{ISL: 64}
	if ShouldQueue(&req, cands, &cfg) {
		t.Fatal("no threshold: never queue")
	}
	cfg.QueueThreshold = Some(1)
	if ShouldQueue(&req, cands, &cfg) {
		t.Fatal("worker 2 has room")
	}
	cands[1].Load.ActivePrefillTokens = 101
	if !ShouldQueue(&req, cands, &cfg) {
		t.Fatal("all over threshold must queue")
	}
	if got := BestCachedTokens(&req, cands, &cfg); got != 64 {
		t.Fatalf("best cached %d, want 64 (clipped)", got)
	}
}

// TestLogitMatchesTerms keeps the hot-path logit and the reported breakdown in step.
func TestLogitMatchesTerms(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for _, mod := range []func(*Config){
		func(*Config) {},
		func(c *Config) { c.OverlapScoreCreditDecay = 0.7; c.DecodeActiveRequestWeight = 0.3 },
		func(c *Config) { c.SelectionPolicy = PolicyLMetric },
		func(c *Config) { c.SharedCacheType = SharedCacheHiCache; c.PrefillLoadScale = 1.7 },
		func(c *Config) { c.WorkerType = WorkerDecode; c.TrackPrefillTokens = false },
	} {
		cfg := kvConfig()
		mod(&cfg)
		cands := benchCands(64, rng)
		for i := range cands {
			cands[i].Overlap.Host, cands[i].Overlap.Shared = uint32(rng.IntN(9)), uint32(rng.IntN(600))
			cands[i].Load.Known = rng.IntN(4) != 0
		}
		req := Request{ISL: 1 + rng.IntN(9000)}
		in := newCostInputs(&req, &cfg, cands, nil)
		for i := range cands {
			if a, b := in.logit(&cands[i]), in.terms(&cands[i]).Logit; a != b {
				t.Fatalf("candidate %d: logit %v, terms %v", i, a, b)
			}
		}
	}
}

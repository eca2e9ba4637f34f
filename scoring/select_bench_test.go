package scoring

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

func benchCands(n int, rng *rand.Rand) []Candidate {
	cands := make([]Candidate, n)
	for i := range cands {
		cands[i] = Candidate{
			Worker:  WorkerKey{WorkerID: uint64(i)},
			Overlap: Overlap{Device: uint32(rng.IntN(512))},
			Load: Load{Known: true, ActivePrefillTokens: uint64(rng.IntN(16384)), ActiveDecodeBlocks: float64(rng.IntN(4096)),
				AdditionalBlocks: uint64(rng.IntN(512)), ActiveRequests: uint32(rng.IntN(64))},
			Capacity: Capacity{TotalKVBlocks: 8192, MaxNumBatchedTokens: 16384},
		}
	}
	return cands
}

// BenchmarkSelect: one op is one Select for an 8k-token (512-block) request over W candidates with random
// overlaps and loads, busy thresholds set (so the filter runs), in kv mode at temperature 0 and 0.5 and
// in least-loaded mode.
func BenchmarkSelect(b *testing.B) {
	for _, mode := range []struct {
		name string
		mod  func(*Config)
	}{
		{"kv/T=0", func(c *Config) {}},
		{"kv/T=0.5", func(c *Config) { c.Temperature = 0.5 }},
		{"kv/T=0/return-costs", nil},
		{"least-loaded", func(c *Config) { c.Mode = ModeLeastLoaded }},
	} {
		for _, w := range []int{16, 256, 1024} {
			b.Run(mode.name+"/W="+strconv.Itoa(w), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 2))
				cfg := DefaultConfig()
				cfg.Mode = ModeKV
				cfg.ActiveDecodeBlocksThreshold = Some(0.99)
				cfg.ActivePrefillTokensThresholdFrac = Some(2)
				req := Request{ISL: 8192}
				if mode.mod != nil {
					mode.mod(&cfg)
				} else {
					req.ReturnCosts = true
					req.CostsBuf = make([]CandidateCost, 0, w)
				}
				cands := benchCands(w, rng)
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if _, err := Select(req, cands, &cfg, rng); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(w), "ns/candidate")
			})
		}
	}
}

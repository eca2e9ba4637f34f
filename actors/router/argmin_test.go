package router

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/indexer"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
	"github.com/kvroute/kvroute/workers/registry"
)

// TestOnePassMatchesSelect drives two routers with the same seed, fleet, index and request stream: one
// takes the one-pass path (scoring.Argmin over the targets), the other is forced through candidates +
// scoring.Select by a Selector that is Select itself. Every decision must agree, through active load,
// frees, unhealthy workers and excluded workers.
func TestOnePassMatchesSelect(t *testing.T) {
	t.Run("no thresholds", func(t *testing.T) { onePassMatchesSelect(t, false) })
	t.Run("busy thresholds", func(t *testing.T) { onePassMatchesSelect(t, true) })
}

func onePassMatchesSelect(t *testing.T, busy bool) {
	system := actors.NewSystem(nil)
	defer system.Shutdown()
	seed := uint64(42)
	cfg := DefaultConfig(2)
	cfg.TickInterval = -1
	cfg.Seed = &seed
	cfg.Scoring.OverlapScoreCredit = 2
	cfg.Scoring.Preset = scoring.PresetDynamo // the equivalence of Dynamo's one-pass and general paths
	if busy {
		cfg.Scoring.ActiveDecodeBlocksThreshold = scoring.Some(0.6)
		cfg.Scoring.ActivePrefillTokensThreshold = scoring.Some(20)
	}
	build := func(general bool) *Router {
		c := cfg
		if general {
			sel, err := scoring.NewSelector(c.Scoring.Resolved())
			if err != nil {
				t.Fatal(err)
			}
			c.Selector = sel
		}
		r, err := New(system, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Stop)
		return r
	}
	fast, slow := build(false), build(true)
	rng := rand.New(rand.NewPCG(5, 6))
	prompt := func() []uint32 {
		toks := make([]uint32, 2*(1+rng.IntN(6)))
		for i := range toks {
			toks[i] = uint32(rng.IntN(2))
		}
		return toks
	}
	for w := range 12 {
		spec := registry.Spec{ID: uint64(w), TotalKVBlocks: 8 + w, MaxNumBatchedTokens: 64}
		for _, r := range []*Router{fast, slow} {
			if err := r.AddWorker(spec); err != nil {
				t.Fatal(err)
			}
		}
		local := scoring.LocalBlockHashes(nil, prompt(), 2, scoring.Seed, nil)
		blocks := make([]prefix.Block, len(local))
		for i, h := range local {
			blocks[i] = prefix.Block{EngineHash: uint64(w<<16 + i), LocalHash: h}
		}
		for _, r := range []*Router{fast, slow} {
			_ = r.Index.Apply(&indexer.Apply{WorkerID: uint64(w), Ops: []indexer.Op{{Kind: indexer.OpStore, Blocks: blocks}}})
			r.Index.Flush()
		}
	}
	ctx := context.Background()
	var live []string
	for i := range 600 {
		switch k := rng.IntN(10); {
		case k < 2 && len(live) > 0:
			j := rng.IntN(len(live))
			for _, r := range []*Router{fast, slow} {
				if err := r.Free(live[j]); err != nil {
					t.Fatal(err)
				}
			}
			live = append(live[:j], live[j+1:]...)
		case k == 2:
			w, healthy := uint64(rng.IntN(12)), rng.IntN(2) == 0
			for _, r := range []*Router{fast, slow} {
				_ = r.SetHealthy(w, healthy, "test")
			}
		case k == 3:
			w, used := uint64(rng.IntN(12)), uint64(rng.IntN(20))
			for _, r := range []*Router{fast, slow} {
				r.SetKVUsage(scoring.WorkerKey{WorkerID: w}, used)
			}
		}
		req := RouteRequest{ID: "r" + strconv.Itoa(i), Tokens: prompt()}
		if rng.IntN(5) == 0 {
			req.Exclude = []uint64{uint64(rng.IntN(12)), uint64(rng.IntN(12))}
		}
		a, errA := fast.Route(ctx, &req)
		req2 := req
		b, errB := slow.Route(ctx, &req2)
		if (errA == nil) != (errB == nil) || (errA != nil && errA.Error() != errB.Error()) {
			t.Fatalf("request %d: errors %v / %v", i, errA, errB)
		}
		if errA != nil {
			continue
		}
		if a.Worker != b.Worker || a.OverlapBlocks != b.OverlapBlocks || a.Cost != b.Cost || a.CachedTokens != b.CachedTokens {
			t.Fatalf("request %d: one pass %+v, Select %+v", i, a, b)
		}
		live = append(live, req.ID)
	}
}

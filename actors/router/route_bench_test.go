package router

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/indexer"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
	"github.com/kvroute/kvroute/workers/registry"
)

// benchRouter builds a router over `workers` event-less workers whose index holds `entries`
// (block, worker) entries: per worker, 512-block conversations branching from 8 shared 32-block system
// prompts. It returns the router and an 8k-token prompt (512 blocks of 16) that shares a system prompt
// with every worker's conversations and continues one worker's conversation.
func benchRouter(b *testing.B, workers, entries int, reg prometheus.Registerer, queue bool) (*Router, []uint32) {
	b.Helper()
	system := actors.NewSystem(nil)
	cfg := DefaultConfig(16)
	cfg.TickInterval = -1
	cfg.Registerer = reg
	if queue { // a queue that is on but never holds a request: no worker is busy by it
		cfg.Scoring.QueueThreshold = scoring.Some(1e6)
	}
	r, err := New(system, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Stop(); system.Shutdown() })
	rng := rand.New(rand.NewPCG(3, 5))
	sysPrompts := make([][]uint32, 8)
	for i := range sysPrompts {
		sysPrompts[i] = make([]uint32, 32*16)
		for j := range sysPrompts[i] {
			sysPrompts[i][j] = uint32(rng.IntN(150000))
		}
	}
	var prompt []uint32
	per := entries / workers
	engine := uint64(1)
	for w := 0; w < workers; w++ {
		if err := r.AddWorker(registry.Spec{ID: uint64(w)}); err != nil {
			b.Fatal(err)
		}
		var ops []indexer.Op
		for held := 0; held < per; held += 512 {
			n := min(512, per-held)
			toks := append([]uint32(nil), sysPrompts[rng.IntN(8)]...)
			for len(toks) < n*16 {
				toks = append(toks, uint32(rng.IntN(150000)))
			}
			toks = toks[:n*16]
			local := scoring.LocalBlockHashes(nil, toks, 16, scoring.Seed, nil)
			blocks := make([]prefix.Block, len(local))
			for i, h := range local {
				blocks[i] = prefix.Block{EngineHash: engine, LocalHash: h}
				engine++
			}
			ops = append(ops, indexer.Op{Kind: indexer.OpStore, Blocks: blocks})
			if prompt == nil && n == 512 {
				prompt = toks
			}
		}
		_ = r.Index.Apply(&indexer.Apply{WorkerID: uint64(w), Ops: ops})
	}
	r.Index.Flush()
	if prompt == nil {
		b.Fatal("no full conversation to query")
	}
	return r, prompt
}

// BenchmarkRouteDecision measures one whole routing decision — block hashing, sequence hashing, the
// fan-out overlap query, candidate building with load projection, Select, AddRequest — for an 8k-token
// prompt (512 blocks of 16). Requests are freed in batches (inside the timed loop, not in the reported
// percentiles) so a few are always in flight. Axes: W workers,
// N indexed (block, worker) entries; Q=on sets a queue threshold no worker reaches, so that every decision
// passes the queue's check (--router-queue-threshold) and none waits.
func BenchmarkRouteDecision(b *testing.B) {
	for _, c := range []struct {
		workers, entries int
		queue            bool
	}{{16, 1 << 20, false}, {256, 1 << 20, false}, {1024, 1 << 20, false}, {256, 1 << 20, true}, {1024, 1 << 20, true}} {
		name := fmt.Sprintf("W=%d/N=%d/B=512", c.workers, c.entries)
		if c.queue {
			name += "/Q=on"
		}
		b.Run(name, func(b *testing.B) {
			reg := prometheus.NewRegistry()
			r, prompt := benchRouter(b, c.workers, c.entries, reg, c.queue)
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			ids := make([]string, b.N)
			for i := range ids {
				ids[i] = "r" + strconv.Itoa(i)
			}
			req := RouteRequest{Tokens: prompt}
			// Collect the set-up's garbage (and earlier runs' indexes) now, not during the timed loop.
			runtime.GC()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				req.ID = ids[i]
				t0 := time.Now()
				res, err := r.Route(ctx, &req)
				lat = append(lat, time.Since(t0))
				if err != nil {
					b.Fatal(err)
				}
				if res.OverlapBlocks < 32 {
					b.Fatalf("overlap %d: the prompt should match at least its system prompt", res.OverlapBlocks)
				}
				if i >= 4 { // keep four requests in flight, so projections see active load
					_ = r.Free(ids[i-4])
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) / 1e3 }
			b.ReportMetric(q(0.5), "p50-us")
			b.ReportMetric(q(0.99), "p99-us")
			// Mean time per stage, from the router's own overhead histograms.
			mfs, err := reg.Gather()
			if err != nil {
				b.Fatal(err)
			}
			for _, mf := range mfs {
				unit, ok := map[string]string{
					"dynamo_router_overhead_block_hashing_ms":        "hash-us",
					"dynamo_router_overhead_indexer_find_matches_ms": "find-us",
					"dynamo_router_overhead_scheduling_ms":           "select-us",
				}[mf.GetName()]
				if ok && len(mf.GetMetric()) == 1 {
					h := mf.GetMetric()[0].GetHistogram()
					b.ReportMetric(1e3*h.GetSampleSum()/float64(h.GetSampleCount()), unit)
				}
			}
		})
	}
}

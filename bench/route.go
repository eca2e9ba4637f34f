package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/kvroute/kvroute/actors"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/actors/indexer"
	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
	"github.com/kvroute/kvroute/workers/registry"
)

// RouteConfig configures the routing-decision benchmark.
//
// One op is one whole routing decision of the production router (actors/router, the path of
// BenchmarkRouteDecision): block hashing and the prefix chain of the prompt, Match on the sharded
// indexer (every shard's readers beside its writer), then the scheduler machine's step under its lock —
// candidates with load projection, selection, AddRequest on the chosen worker. Freeing the request
// afterwards (to keep the fleet steady) is not timed. Stage means come from the router's own overhead
// histograms.
type RouteConfig struct {
	// Workers, PromptTokens and IndexedBlocks are the matrix axes. Defaults {16, 256, 1024},
	// {1024, 8192, 32768}, {65536, 1048576}.
	Workers       []int
	PromptTokens  []int
	IndexedBlocks []int
	// BlockSize is the KV block size in tokens. Default 16 (vLLM's default).
	BlockSize int
	// Decisions is the number of timed decisions per cell. Default 3,000.
	Decisions int
	// Shards is the indexer shard count. Default 4.
	Shards int
	// ActivePerWorker is the number of active requests each worker carries. Default 4.
	ActivePerWorker int
	// Seed seeds query choice and tie-breaks. Default 42.
	Seed uint64
}

// DefaultRouteConfig returns the defaults.
func DefaultRouteConfig() RouteConfig {
	return RouteConfig{Workers: []int{16, 256, 1024}, PromptTokens: []int{1024, 8192, 32768},
		IndexedBlocks: []int{1 << 16, 1 << 20}, BlockSize: 16, Decisions: 3000, Shards: 4, ActivePerWorker: 4, Seed: 42}
}

// Validate checks the configuration.
func (c *RouteConfig) Validate() error {
	if len(c.Workers) == 0 || len(c.PromptTokens) == 0 || len(c.IndexedBlocks) == 0 {
		return fmt.Errorf("bench: empty route matrix axis")
	}
	for _, v := range append(append(append([]int(nil), c.Workers...), c.PromptTokens...), c.IndexedBlocks...) {
		if v < 1 {
			return fmt.Errorf("bench: route matrix value %d must be positive", v)
		}
	}
	if c.BlockSize < 1 || c.Decisions < 1 || c.Shards < 1 || c.ActivePerWorker < 0 {
		return fmt.Errorf("bench: bad route config %+v", *c)
	}
	return nil
}

// RouteCell is the result of one matrix cell.
type RouteCell struct {
	Workers       int `json:"workers"`
	PromptTokens  int `json:"prompt_tokens"`
	IndexedBlocks int `json:"indexed_blocks"`
	// Micros summarizes the decision latency in µs.
	Micros Summary `json:"decision_us"`
	// AllocsPerDecision and BytesPerDecision come from runtime.MemStats over the loop.
	AllocsPerDecision float64 `json:"allocs_per_decision"`
	BytesPerDecision  float64 `json:"bytes_per_decision"`
	// StageMicros is the mean time per stage, from the router's overhead histograms: hash (block hashes +
	// prefix chain), match (Match), decide (the scheduler step: candidates, select, charge).
	StageMicros map[string]float64 `json:"stage_mean_us"`
	// MeanOverlap is the chosen worker's mean overlap in blocks.
	MeanOverlap float64 `json:"mean_overlap_blocks"`

	latencies []float64
}

// Name is the cell's matrix coordinate, W=…/P=…/N=….
func (c *RouteCell) Name() string {
	return "W=" + strconv.Itoa(c.Workers) + "/P=" + binary(c.PromptTokens) + "/N=" + binary(c.IndexedBlocks)
}

// binary renders n with a binary k/M suffix when it is a multiple: 65536 → 64k.
func binary(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "M"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "k"
	}
	return strconv.Itoa(n)
}

// routePromptIDs names the trace-style ids of corpus prompt p: the first quarter of its blocks are one of
// 64 shared system prompts, the rest its own. blocks is the prompt length in 512-token ids.
func routePromptIDs(p, ids int) []uint64 {
	out := make([]uint64, ids)
	shared := max(1, ids/4)
	for j := range out {
		if j < shared {
			out[j] = 1<<40 | uint64(p%64)<<20 | uint64(j)
		} else {
			out[j] = uint64(p)<<20 | uint64(j)
		}
	}
	return out
}

// RunRouteCell measures one cell. progress, when non-nil, advances by one per decision.
func RunRouteCell(cfg RouteConfig, workers, promptTokens, indexed int, progress *Progress) (*RouteCell, error) {
	corpus, err := newRouteCorpus(cfg, promptTokens, indexed)
	if err != nil {
		return nil, err
	}
	system := actors.NewSystem(nil)
	defer system.Shutdown()
	reg := prometheus.NewRegistry()
	r, err := startRouteRouter(system, reg, cfg, workers)
	if err != nil {
		return nil, err
	}
	defer r.Stop()
	if err := corpus.index(r, workers); err != nil {
		return nil, err
	}
	if err := corpus.chargeActive(r, workers, cfg.ActivePerWorker); err != nil {
		return nil, err
	}
	cell, err := measureDecisions(r, reg, corpus.queries(cfg.Seed), cfg.Decisions, progress)
	if err != nil {
		return nil, err
	}
	cell.Workers, cell.PromptTokens, cell.IndexedBlocks = workers, promptTokens, indexed
	return cell, nil
}

// routeCorpus is a cell's prompts: conversation-like token sequences sharing system prompts
// (routePromptIDs), rendered in the router's block size.
type routeCorpus struct {
	gen          Blocks
	bs           int
	promptTokens int
	ids          int // trace-style ids per prompt
	prompts      int // distinct prompts, enough to index the cell's block count
}

func newRouteCorpus(cfg RouteConfig, promptTokens, indexed int) (*routeCorpus, error) {
	bs := cfg.BlockSize
	promptBlocks := promptTokens / bs
	if promptBlocks == 0 {
		return nil, fmt.Errorf("bench: prompt of %d tokens has no full block of %d", promptTokens, bs)
	}
	return &routeCorpus{gen: Blocks{BlockSize: TraceBlockSize, Vocab: 151_643, Seed: cfg.Seed}, bs: bs, promptTokens: promptTokens,
		ids: (promptTokens + TraceBlockSize - 1) / TraceBlockSize, prompts: max(1, indexed/promptBlocks)}, nil
}

// tokens renders prompt p; a non-zero tail makes a fresh conversation turn from 3/4 of the prompt on.
func (c *routeCorpus) tokens(p int, tail uint64) []uint32 {
	r := Request{InputLength: c.promptTokens, HashIDs: routePromptIDs(p, c.ids)}
	if tail != 0 {
		for j := c.ids * 3 / 4; j < c.ids; j++ {
			r.HashIDs[j] = tail<<44 | uint64(j)
		}
	}
	return c.gen.AppendPrompt(make([]uint32, 0, c.promptTokens), &r)
}

// startRouteRouter builds the router of a cell (no ticks, a seeded tie draw, metrics into reg) with
// workers 1..workers.
func startRouteRouter(system *actor.ActorSystem, reg *prometheus.Registry, cfg RouteConfig, workers int) (*router.Router, error) {
	rcfg := router.DefaultConfig(cfg.BlockSize)
	rcfg.Indexer.Shards = cfg.Shards
	rcfg.TickInterval = -1
	rcfg.Registerer = reg
	seed := cfg.Seed
	rcfg.Seed = &seed
	r, err := router.New(system, rcfg)
	if err != nil {
		return nil, err
	}
	for w := range workers {
		if err := r.AddWorker(registry.Spec{ID: uint64(w + 1)}); err != nil {
			r.Stop()
			return nil, err
		}
	}
	return r, nil
}

// index stores every prompt of the corpus on one worker (round robin) and waits until it is applied.
func (c *routeCorpus) index(r *router.Router, workers int) error {
	for p := 0; p < c.prompts; p++ {
		local := scoring.LocalBlockHashes(nil, c.tokens(p, 0), c.bs, scoring.Seed, nil)
		seq := scoring.ChainHashes(nil, local)
		bl := make([]prefix.Block, len(local))
		for i := range bl {
			bl[i] = prefix.Block{EngineHash: seq[i], LocalHash: local[i]}
		}
		if err := r.Index.Apply(&indexer.Apply{WorkerID: uint64(p%workers + 1), Ops: []indexer.Op{{Kind: indexer.OpStore, Blocks: bl}}}); err != nil {
			return err
		}
	}
	r.Index.Flush()
	return nil
}

// chargeActive leaves perWorker requests in flight on every worker (pinned there), prompts taken
// round-robin from the corpus with a fresh tail each.
func (c *routeCorpus) chargeActive(r *router.Router, workers, perWorker int) error {
	ctx := context.Background()
	for w := range workers {
		for a := 0; a < perWorker; a++ {
			p := (w + a*workers) % c.prompts
			pin := scoring.WorkerKey{WorkerID: uint64(w + 1)}
			req := router.RouteRequest{ID: "bg-" + strconv.Itoa(w) + "-" + strconv.Itoa(a),
				Tokens: c.tokens(p, uint64(1+w*perWorker+a)), Pin: &pin}
			if _, err := r.Route(ctx, &req); err != nil {
				return err
			}
		}
	}
	return nil
}

// queries are the 64 prompts the measured decisions cycle through: corpus prompts with fresh tails.
func (c *routeCorpus) queries(seed uint64) [][]uint32 {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	qs := make([][]uint32, 64)
	for i := range qs {
		qs[i] = c.tokens(rng.IntN(c.prompts), uint64(1<<18+i))
	}
	return qs
}

// measureDecisions routes and frees n requests cycling through queries (after 64 unmeasured ones) and
// returns the latencies, allocations, stage means and mean overlap of the cell.
func measureDecisions(r *router.Router, reg *prometheus.Registry, queries [][]uint32, n int, progress *Progress) (*RouteCell, error) {
	ctx := context.Background()
	lat := make([]float64, 0, n)
	var ovl int64
	req := router.RouteRequest{ID: "q"}
	decide := func(i int, timed bool) error {
		req.Tokens = queries[i%len(queries)]
		start := time.Now()
		res, err := r.Route(ctx, &req)
		el := time.Since(start)
		if err != nil {
			return err
		}
		if timed {
			lat = append(lat, float64(el.Nanoseconds())/1e3)
			ovl += int64(res.OverlapBlocks)
		}
		return r.Free(req.ID)
	}
	for i := 0; i < 64; i++ { // warm the scratch slices and the tables
		if err := decide(i, false); err != nil {
			return nil, err
		}
	}
	before, err := stageSums(reg)
	if err != nil {
		return nil, err
	}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for i := 0; i < n; i++ {
		if err := decide(i, true); err != nil {
			return nil, err
		}
		if progress != nil && i%64 == 63 {
			progress.Add(64)
		}
	}
	runtime.ReadMemStats(&m1)
	if progress != nil {
		progress.Add(int64(n % 64))
	}
	after, err := stageSums(reg)
	if err != nil {
		return nil, err
	}
	fn := float64(n)
	cell := &RouteCell{AllocsPerDecision: float64(m1.Mallocs-m0.Mallocs) / fn, BytesPerDecision: float64(m1.TotalAlloc-m0.TotalAlloc) / fn,
		StageMicros: map[string]float64{}, MeanOverlap: float64(ovl) / fn}
	for name, ms := range after {
		cell.StageMicros[name] = (ms - before[name]) * 1e3 / fn
	}
	cell.latencies = lat
	cell.Micros = Summarize(lat)
	return cell, nil
}

// routeStages maps the router's overhead histograms (milliseconds) to the report's stage names.
var routeStages = map[string]string{
	"dynamo_router_overhead_block_hashing_ms":        "hash",
	"dynamo_router_overhead_indexer_find_matches_ms": "match",
	"dynamo_router_overhead_scheduling_ms":           "decide",
}

// stageSums reads the sum of each stage histogram, in milliseconds.
func stageSums(reg *prometheus.Registry) (map[string]float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if name, ok := routeStages[mf.GetName()]; ok && len(mf.GetMetric()) == 1 {
			out[name] = mf.GetMetric()[0].GetHistogram().GetSampleSum()
		}
	}
	return out, nil
}

// FillRouteReport adds the tables and plots of a route bench to rep.
func FillRouteReport(rep *Report, cfg RouteConfig, cells []*RouteCell) {
	rep.Data = map[string]any{"config": cfg, "cells": cells}
	tab := Table{Title: "Routing decision latency", Columns: []string{"workers", "prompt tokens", "indexed blocks", "p50 µs", "p99 µs", "p999 µs", "mean µs", "allocs/decision", "B/decision", "hash µs", "match µs", "decide µs", "overlap blocks"}}
	var cdf []Series
	var labels []string
	var p99 []float64
	for _, c := range cells {
		s := c.StageMicros
		tab.Rows = append(tab.Rows, []string{strconv.Itoa(c.Workers), strconv.Itoa(c.PromptTokens), binary(c.IndexedBlocks),
			F(c.Micros.P50, 1), F(c.Micros.P99, 1), F(c.Micros.P999, 1), F(c.Micros.Mean, 1), F(c.AllocsPerDecision, 1), FormatNum(c.BytesPerDecision),
			F(s["hash"], 1), F(s["match"], 1), F(s["decide"], 1), F(c.MeanOverlap, 0)})
		xs, ys := CDF(c.latencies, 300)
		cdf = append(cdf, Series{Name: c.Name(), X: xs, Y: ys})
		labels, p99 = append(labels, c.Name()), append(p99, c.Micros.P99)
	}
	rep.Tables = append(rep.Tables, tab)
	if len(cdf) > len(palette) { // keep the CDF legible: the largest index size only
		var keep []Series
		maxN := cfg.IndexedBlocks[len(cfg.IndexedBlocks)-1]
		for i, c := range cells {
			if c.IndexedBlocks == maxN {
				keep = append(keep, cdf[i])
			}
		}
		cdf = keep
	}
	rep.AddPlot("decision_latency_cdf.svg", "Decision latency CDF", (&LinePlot{Title: "Routing decision latency CDF", XLabel: "latency (µs, log)", YLabel: "fraction of decisions", LogX: true, Series: cdf}).SVG())
	rep.AddPlot("decision_p99.svg", "Decision p99 per cell", (&BarPlot{Title: "Routing decision p99 (µs)", YLabel: "µs", Labels: labels, Values: p99}).SVG())
}

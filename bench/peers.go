package bench

import (
	"fmt"

	"github.com/kvroute/kvroute/scoring"
)

// Peer-style baseline selectors for the side-by-side routing report, written from the peers' published
// formulas behind scoring.Selector, so the e2e bench runs them through the same candidates (overlap from
// the same index, load from the same trackers) as kvroute's kv mode. Both honour the pin filter; neither
// has kvroute's busy thresholds.

// inflight is the request count both peers balance on: the worker's in-flight count, else its active
// requests (scoring.Candidate's own rule).
func inflight(c *scoring.Candidate) float64 {
	if c.InFlight != 0 {
		return float64(c.InFlight)
	}
	return float64(c.Load.ActiveRequests)
}

// inflightRange is the least and the most in-flight requests among the candidates req may go to; none
// is Select's error (the pin names no candidate, or there is none).
func inflightRange(req *scoring.Request, cands []scoring.Candidate) (lo, hi float64, err error) {
	n := 0
	for i := range cands {
		if !scoring.Allowed(req, &cands[i]) {
			continue
		}
		q := inflight(&cands[i])
		if n == 0 {
			lo, hi = q, q
		}
		lo, hi = min(lo, q), max(hi, q)
		n++
	}
	switch {
	case n > 0:
		return lo, hi, nil
	case req.Pinned:
		return 0, 0, scoring.ErrPinnedNotFound
	}
	return 0, 0, scoring.ErrNoWorkers
}

// kvUtil is the fraction of a worker's KV blocks in use: the engine's report when known, else the router's
// active-block estimate; 0 when the capacity is unknown.
func kvUtil(c *scoring.Candidate) float64 {
	total := float64(c.Capacity.TotalKVBlocks)
	if total <= 0 {
		return 0
	}
	used := c.Load.ActiveDecodeBlocks
	if c.Capacity.KVUsedKnown {
		used = float64(c.Capacity.KVUsedBlocks)
	}
	return min(1, max(0, used/total))
}

func decision(req *scoring.Request, cands []scoring.Candidate, i, bs int, cost float64) scoring.Decision {
	c := &cands[i]
	return scoring.Decision{Worker: c.Worker, Index: i, Cost: cost, Overlap: c.Overlap.Device,
		CachedTokens: min(int(c.Overlap.Device)*bs, req.ISL)}
}

// LLMDSelector is llm-d's inference scheduler (gateway-api-inference-extension EPP) with its three
// default scorers and the max-score picker: score = (wp·prefix + wq·queue + wk·kv) / (wp + wq + wk), where
// prefix = matched blocks / request blocks, queue = (max_q − q) / (max_q − min_q) over the candidates (1
// when all equal), kv = 1 − KV-cache utilization. Highest score wins; ties are broken uniformly.
type LLMDSelector struct {
	// PrefixWeight, QueueWeight and KVWeight are the scorer weights. Default 2:1:1.
	PrefixWeight, QueueWeight, KVWeight float64
	// BlockSize is the KV block size in tokens, to count the request's blocks. Default 16.
	BlockSize int
}

var _ scoring.Selector = (*LLMDSelector)(nil)

// NewLLMDSelector returns the 2:1:1 configuration for a block size.
func NewLLMDSelector(blockSize int) *LLMDSelector {
	return &LLMDSelector{PrefixWeight: 2, QueueWeight: 1, KVWeight: 1, BlockSize: blockSize}
}

// Score returns candidate i's weighted score (exported for tests and reports).
func (s *LLMDSelector) Score(req *scoring.Request, cands []scoring.Candidate, i int) float64 {
	minQ, maxQ := 0.0, 0.0
	first := true
	for j := range cands {
		if !scoring.Allowed(req, &cands[j]) {
			continue
		}
		q := inflight(&cands[j])
		if first {
			minQ, maxQ, first = q, q, false
		}
		minQ, maxQ = min(minQ, q), max(maxQ, q)
	}
	return s.score(req, &cands[i], minQ, maxQ)
}

func (s *LLMDSelector) score(req *scoring.Request, c *scoring.Candidate, minQ, maxQ float64) float64 {
	blocks := (req.ISL + s.BlockSize - 1) / s.BlockSize
	prefix := 0.0
	if blocks > 0 {
		prefix = min(1, float64(c.Overlap.Device)/float64(blocks))
	}
	queue := 1.0
	if maxQ > minQ {
		queue = (maxQ - inflight(c)) / (maxQ - minQ)
	}
	kv := 1 - kvUtil(c)
	return (s.PrefixWeight*prefix + s.QueueWeight*queue + s.KVWeight*kv) / (s.PrefixWeight + s.QueueWeight + s.KVWeight)
}

// Select implements scoring.Selector. Decision.Cost is the negated score (lower is better, as kvroute's
// logit).
func (s *LLMDSelector) Select(req scoring.Request, cands []scoring.Candidate, rng scoring.RNG) (scoring.Decision, error) {
	if s.BlockSize <= 0 || s.PrefixWeight+s.QueueWeight+s.KVWeight <= 0 {
		return scoring.Decision{}, fmt.Errorf("%w: llm-d selector block size %d, weights %v:%v:%v", scoring.ErrBadConfig, s.BlockSize, s.PrefixWeight, s.QueueWeight, s.KVWeight)
	}
	minQ, maxQ, err := inflightRange(&req, cands)
	if err != nil {
		return scoring.Decision{}, err
	}
	best, ties := -1, 0
	var bestScore float64
	for i := range cands {
		if !scoring.Allowed(&req, &cands[i]) {
			continue
		}
		sc := s.score(&req, &cands[i], minQ, maxQ)
		switch {
		case best < 0 || sc > bestScore:
			best, bestScore, ties = i, sc, 1
		case sc == bestScore:
			ties++
			if rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return decision(&req, cands, best, s.BlockSize, -bestScore), nil
}

// SGLangSelector is SGLang's router cache_aware policy (sgl-router): the fleet is imbalanced when
// max_load − min_load > BalanceAbsThreshold and max_load > BalanceRelThreshold × min_load (loads are
// in-flight requests); then the least-loaded worker wins. Otherwise the worker with the longest prefix
// match wins if match_rate = matched tokens / input tokens > CacheThreshold, else the worker with the
// smallest cache (most free room for a new prefix). Ties are broken uniformly.
//
// SGLang matches against its own approximate tree of routed text; here the match is the candidate's
// device overlap from kvroute's index (exact when KV events flow), and the cache size is CacheSize, or
// the worker's used KV blocks when CacheSize is nil.
type SGLangSelector struct {
	// CacheThreshold is the minimum match rate for cache-affine routing. Default 0.5.
	CacheThreshold float64
	// BalanceAbsThreshold and BalanceRelThreshold define imbalance. Defaults 32 and 1.1 (sgl-router's
	// CacheAwareConfig defaults).
	BalanceAbsThreshold float64
	BalanceRelThreshold float64
	// BlockSize is the KV block size in tokens. Default 16.
	BlockSize int
	// CacheSize returns a worker's cache size in blocks (SGLang's per-tenant tree size); nil uses
	// Capacity.KVUsedBlocks when known, else Load.ActiveDecodeBlocks.
	CacheSize func(w scoring.WorkerKey) float64
}

var _ scoring.Selector = (*SGLangSelector)(nil)

// NewSGLangSelector returns sgl-router's defaults for a block size.
func NewSGLangSelector(blockSize int) *SGLangSelector {
	return &SGLangSelector{CacheThreshold: 0.5, BalanceAbsThreshold: 32, BalanceRelThreshold: 1.1, BlockSize: blockSize}
}

func (s *SGLangSelector) cacheSize(c *scoring.Candidate) float64 {
	if s.CacheSize != nil {
		return s.CacheSize(c.Worker)
	}
	if c.Capacity.KVUsedKnown {
		return float64(c.Capacity.KVUsedBlocks)
	}
	return c.Load.ActiveDecodeBlocks
}

// Select implements scoring.Selector. Decision.Cost is 0 for a load-balanced pick, −match_rate for a
// cache-affine pick and the cache size for a smallest-cache pick.
func (s *SGLangSelector) Select(req scoring.Request, cands []scoring.Candidate, rng scoring.RNG) (scoring.Decision, error) {
	if s.BlockSize <= 0 {
		return scoring.Decision{}, fmt.Errorf("%w: sglang selector block size %d", scoring.ErrBadConfig, s.BlockSize)
	}
	minL, maxL, err := inflightRange(&req, cands)
	if err != nil {
		return scoring.Decision{}, err
	}
	// pick returns the allowed candidate minimizing key, ties uniform.
	pick := func(key func(c *scoring.Candidate) float64) (int, float64) {
		best, ties := -1, 0
		var bk float64
		for i := range cands {
			c := &cands[i]
			if !scoring.Allowed(&req, c) {
				continue
			}
			k := key(c)
			switch {
			case best < 0 || k < bk:
				best, bk, ties = i, k, 1
			case k == bk:
				ties++
				if rng.IntN(ties) == 0 {
					best = i
				}
			}
		}
		return best, bk
	}
	if maxL-minL > s.BalanceAbsThreshold && maxL > s.BalanceRelThreshold*minL {
		i, _ := pick(inflight)
		return decision(&req, cands, i, s.BlockSize, 0), nil
	}
	i, neg := pick(func(c *scoring.Candidate) float64 {
		if req.ISL <= 0 {
			return 0
		}
		return -float64(min(int(c.Overlap.Device)*s.BlockSize, req.ISL)) / float64(req.ISL)
	})
	if -neg > s.CacheThreshold {
		return decision(&req, cands, i, s.BlockSize, neg), nil
	}
	i, size := pick(s.cacheSize)
	return decision(&req, cands, i, s.BlockSize, size), nil
}

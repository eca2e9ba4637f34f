package bench

import "fmt"

// OracleResult is the prefix reuse an ideal cache would get on a trace: hits are counted in engine
// blocks as the engine does (a request's cached prefix is the leading run of blocks present), and
// reported as tokens, the unit of vLLM's cached_tokens.
type OracleResult struct {
	// Name is "unbounded" or "pooled".
	Name string `json:"name"`
	// CapacityBlocks is the pooled cache size in engine blocks (0 for unbounded).
	CapacityBlocks int `json:"capacity_blocks,omitempty"`
	Requests       int `json:"requests"`
	// PromptTokens sums the prompt lengths; HitTokens the cached prefix tokens.
	PromptTokens int64 `json:"prompt_tokens"`
	HitTokens    int64 `json:"hit_tokens"`
	// HitRate is HitTokens / PromptTokens.
	HitRate float64 `json:"hit_rate"`
	// BlockHitRate is hit blocks / full prompt blocks.
	BlockHitRate float64 `json:"block_hit_rate"`
}

// Oracle computes the ideal hit rates of a trace for engines with block size BlockSize.
type Oracle struct {
	// Blocks maps hash ids to token blocks (only its BlockSize matters here).
	Blocks Blocks
	// BlockSize is the engine KV block size in tokens; it must divide Blocks.BlockSize. Default 64 (the
	// mocker's default and the published A/B's).
	BlockSize int
}

// UnboundedHitRate: every block ever seen is a hit (an infinite cache shared by the fleet). This is the
// most any router can get.
func (o *Oracle) UnboundedHitRate(t *Trace) (OracleResult, error) {
	return o.run(t, "unbounded", 0)
}

// PooledHitRate: one LRU cache holding the whole fleet's capacity (capacityBlocks = workers × blocks per
// worker). A router that never duplicated a block across workers and never split a prefix would reach
// it; real routing trades some of it for load balance.
func (o *Oracle) PooledHitRate(t *Trace, capacityBlocks int) (OracleResult, error) {
	if capacityBlocks <= 0 {
		return OracleResult{}, fmt.Errorf("bench: pooled oracle capacity %d must be positive", capacityBlocks)
	}
	return o.run(t, "pooled", capacityBlocks)
}

// PlacedHitRate: a fleet of ideal LRU caches of capacityBlocks each, request i served by worker[i]
// (negative: not served, no hit): the reuse a router's placement allows, without the engines' timing
// (blocks of running requests that cannot be evicted, prefill in flight, the free queue's order). Held
// against the pooled oracle it is the part of the gap the placement makes; against the engines' hit
// rate on the same placement, the part the engines' timing makes.
func (o *Oracle) PlacedHitRate(t *Trace, worker []int, capacityBlocks int) (OracleResult, error) {
	if capacityBlocks <= 0 || len(worker) != len(t.Requests) {
		return OracleResult{}, fmt.Errorf("bench: placed oracle: capacity %d, %d placements for %d requests", capacityBlocks, len(worker), len(t.Requests))
	}
	caches := map[int]*lru{}
	return o.place(t, "placed", capacityBlocks, func(i int) *lru {
		w := worker[i]
		if w < 0 {
			return nil
		}
		c := caches[w]
		if c == nil {
			c = newLRU(capacityBlocks)
			caches[w] = c
		}
		return c
	})
}

func (o *Oracle) run(t *Trace, name string, capacity int) (OracleResult, error) {
	if capacity == 0 {
		return o.place(t, name, 0, nil)
	}
	cache := newLRU(capacity)
	return o.place(t, name, capacity, func(int) *lru { return cache })
}

// place runs the trace through the cache each request is placed on (cacheOf, nil for one unbounded
// cache; a nil cache: the request is not served).
func (o *Oracle) place(t *Trace, name string, capacity int, cacheOf func(i int) *lru) (OracleResult, error) {
	if err := o.Blocks.Validate(); err != nil {
		return OracleResult{}, err
	}
	if err := o.Blocks.CheckEngineBlock(o.BlockSize); err != nil {
		return OracleResult{}, err
	}
	res := OracleResult{Name: name, CapacityBlocks: capacity, Requests: len(t.Requests)}
	var seen map[uint64]struct{}
	if cacheOf == nil {
		seen = make(map[uint64]struct{})
	}
	var chunks []Chunk
	var evicted []uint64
	var hitBlocks, allBlocks int64
	for i := range t.Requests {
		r := &t.Requests[i]
		chunks = o.Blocks.AppendChunks(chunks[:0], r, o.BlockSize)
		var cache *lru
		if cacheOf != nil {
			if cache = cacheOf(i); cache == nil {
				allBlocks += int64(len(chunks))
				res.PromptTokens += int64(o.Blocks.PromptLen(r))
				continue
			}
		}
		hit := 0
		for hit < len(chunks) {
			k := chunks[hit].Key()
			var ok bool
			if seen != nil {
				_, ok = seen[k]
			} else {
				ok = cache.Has(k)
			}
			if !ok {
				break
			}
			hit++
		}
		if seen != nil {
			for _, c := range chunks {
				seen[c.Key()] = struct{}{}
			}
		} else {
			for j := len(chunks) - 1; j >= 0; j-- {
				cache.Touch(chunks[j].Key())
			}
			evicted = cache.EvictOver(evicted[:0])
		}
		hitBlocks += int64(hit)
		allBlocks += int64(len(chunks))
		res.HitTokens += int64(hit * o.BlockSize)
		res.PromptTokens += int64(o.Blocks.PromptLen(r))
	}
	if res.PromptTokens > 0 {
		res.HitRate = float64(res.HitTokens) / float64(res.PromptTokens)
	}
	if allBlocks > 0 {
		res.BlockHitRate = float64(hitBlocks) / float64(allBlocks)
	}
	return res, nil
}

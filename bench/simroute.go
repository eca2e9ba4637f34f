package bench

import (
	"fmt"
	"math/rand/v2"
)

// Cache-and-backlog routing simulation: per-worker LRUs (leaf-first eviction, as the oracles) and a
// routing policy, with the crudest load model that still punishes herding: each worker prefills its
// uncached tokens at PrefillRate tokens/s, one request after another, and a request's wait is the
// worker's backlog when it arrives. No decode, no batching, no engine: it shows what routing can capture
// with the fleet's real, split capacity — between the pooled oracle and round-robin — before the
// end-to-end bench adds the simulated engines.

// SimPolicy names a simulated routing policy.
type SimPolicy string

// Simulated policies.
const (
	SimRoundRobin SimPolicy = "round-robin"
	SimRandom     SimPolicy = "random"
	// SimLeastLoaded picks the smallest backlog.
	SimLeastLoaded SimPolicy = "least-loaded"
	// SimPrefix sends each request to the worker holding its longest cached prefix, ties to the smallest
	// backlog: pure affinity, which herds a shared system prompt onto one worker.
	SimPrefix SimPolicy = "prefix"
	// SimCost minimizes backlog + uncached tokens (the prefill finish time): the shape of kvroute's kv
	// cost (prefill blocks after overlap credit + load).
	SimCost SimPolicy = "cost"
)

// SimPolicies lists them in report order.
var SimPolicies = []SimPolicy{SimRoundRobin, SimRandom, SimLeastLoaded, SimPrefix, SimCost}

// SimResult is one simulated fleet's outcome.
type SimResult struct {
	Policy         SimPolicy `json:"policy"`
	Workers        int       `json:"workers"`
	CapacityBlocks int       `json:"capacity_blocks_per_worker"`
	HitRate        float64   `json:"hit_rate"`
	// Imbalance is max/mean requests per worker over the whole trace.
	Imbalance float64 `json:"imbalance"`
	// WaitSeconds summarizes the modelled time to first token: backlog at arrival plus the request's own
	// uncached prefill, in seconds.
	WaitSeconds Summary `json:"wait_s"`
}

// DefaultPrefillRate is the modelled per-worker prefill throughput, tokens/s.
const DefaultPrefillRate = 10_000

// SimulateRouting replays t through workers LRU caches of capacity engine blocks each under policy, with
// prefillRate tokens/s per worker (DefaultPrefillRate when ≤ 0).
func (o *Oracle) SimulateRouting(t *Trace, workers, capacity int, policy SimPolicy, prefillRate float64, seed uint64) (SimResult, error) {
	if prefillRate <= 0 {
		prefillRate = DefaultPrefillRate
	}
	if err := o.Blocks.CheckEngineBlock(o.BlockSize); err != nil {
		return SimResult{}, err
	}
	if workers < 1 || capacity < 1 {
		return SimResult{}, fmt.Errorf("bench: simulate %d workers × %d blocks", workers, capacity)
	}
	caches := make([]*lru, workers)
	for i := range caches {
		caches[i] = newLRU(capacity)
	}
	counts := make([]float64, workers)
	backlog := make([]float64, workers) // seconds of prefill queued at lastT
	var waits []float64
	var lastT int64
	if len(t.Requests) > 0 {
		lastT = t.Requests[0].Timestamp
	}
	rng := rand.New(rand.NewPCG(seed, seed+1))
	var chunks []Chunk
	keys := make([]uint64, 0, 1024)
	var evicted []uint64
	var hit, total int64
	for i := range t.Requests {
		r := &t.Requests[i]
		if dt := float64(r.Timestamp-lastT) / 1e3; dt > 0 {
			for k := range backlog {
				backlog[k] = max(0, backlog[k]-dt)
			}
			lastT = r.Timestamp
		}
		plen := o.Blocks.PromptLen(r)
		chunks = o.Blocks.AppendChunks(chunks[:0], r, o.BlockSize)
		keys = keys[:0]
		for _, c := range chunks {
			keys = append(keys, c.Key())
		}
		overlap := func(w int) int {
			n := 0
			for n < len(keys) && caches[w].Has(keys[n]) {
				n++
			}
			return n
		}
		// argmin of key over workers, ties to the smaller backlog, then the lower index.
		argmin := func(key func(k int) float64) int {
			best := 0
			for k := 1; k < workers; k++ {
				a, b := key(k), key(best)
				if a < b || (a == b && backlog[k] < backlog[best]) {
					best = k
				}
			}
			return best
		}
		uncached := func(k int) float64 { return float64(plen - min(plen, overlap(k)*o.BlockSize)) }
		var w int
		switch policy {
		case SimRoundRobin:
			w = i % workers
		case SimRandom:
			w = rng.IntN(workers)
		case SimLeastLoaded:
			w = argmin(func(k int) float64 { return backlog[k] })
		case SimPrefix:
			w = argmin(func(k int) float64 { return -float64(overlap(k)) })
		case SimCost:
			w = argmin(func(k int) float64 { return backlog[k] + uncached(k)/prefillRate })
		default:
			return SimResult{}, fmt.Errorf("bench: unknown simulated policy %q", policy)
		}
		hitTok := min(plen, overlap(w)*o.BlockSize)
		hit += int64(hitTok)
		total += int64(plen)
		backlog[w] += float64(plen-hitTok) / prefillRate
		waits = append(waits, backlog[w])
		for j := len(keys) - 1; j >= 0; j-- {
			caches[w].Touch(keys[j])
		}
		evicted = caches[w].EvictOver(evicted[:0])
		counts[w]++
	}
	res := SimResult{Policy: policy, Workers: workers, CapacityBlocks: capacity, Imbalance: LoadImbalance(counts),
		WaitSeconds: Summarize(waits)}
	if total > 0 {
		res.HitRate = float64(hit) / float64(total)
	}
	return res, nil
}

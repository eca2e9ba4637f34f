package load

import (
	"fmt"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
)

// Registry answers additional_active_blocks for every worker at once (Dynamo's PromptRegistry read
// model): a prefix index whose "cache" is the set of prompt chains of active requests, keyed by local
// block hash with the router sequence hash as the block's handle. FindMatches on it gives, per worker, the
// length of the query's prefix that is active there; additional = len(query) − that, and len(query) for
// workers it does not list. The cost is O(prompt depth) whatever the worker count, where asking each
// worker's Tracker costs a few cache misses per worker (BenchmarkRouteDecision: ~10× less at 256
// workers).
//
// It holds only what Projection needs with AssumeKVReuse and Stride 1; with reuse off the answer is
// len(query) for every worker and the registry is not needed. Not safe for concurrent use: one owner
// applies Add and Free (mirroring the trackers' AddRequest and Free) and queries run on that owner or
// under its read lock.
type Registry struct {
	ix     *prefix.Index
	reqs   map[string]regEntry
	blocks []prefix.Block
}

type regEntry struct {
	w   prefix.WorkerKey
	seq []uint64
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{ix: prefix.New(), reqs: make(map[string]regEntry)}
}

// Add records request id as active on w with the prompt's local and sequence hashes.
func (r *Registry) Add(id string, w scoring.WorkerKey, local, seq []uint64) error {
	if _, ok := r.reqs[id]; ok {
		return fmt.Errorf("%w: %q", ErrDuplicate, id)
	}
	if len(local) != len(seq) {
		return fmt.Errorf("load: registry: %d local hashes, %d sequence hashes", len(local), len(seq))
	}
	r.blocks = r.blocks[:0]
	for i := range local {
		r.blocks = append(r.blocks, prefix.Block{EngineHash: seq[i], LocalHash: local[i]})
	}
	pw := prefix.WorkerKey(w)
	if err := r.ix.Store(pw, 0, false, r.blocks); err != nil {
		return err
	}
	// Kept leaf first, the order Free removes in: removing a parent first would drop its children.
	rev := make([]uint64, len(seq))
	for i, h := range seq {
		rev[len(seq)-1-i] = h
	}
	r.reqs[id] = regEntry{w: pw, seq: rev}
	return nil
}

// Free forgets request id; it reports whether it was active.
func (r *Registry) Free(id string) bool {
	e, ok := r.reqs[id]
	if !ok {
		return false
	}
	_ = r.ix.Remove(e.w, e.seq)
	delete(r.reqs, id)
	return true
}

// RemoveWorker forgets every request of a worker id (all DP ranks).
func (r *Registry) RemoveWorker(workerID uint64) {
	for id, e := range r.reqs {
		if e.w.WorkerID == workerID {
			delete(r.reqs, id)
		}
	}
	r.ix.RemoveWorker(workerID)
}

// ActivePrefix appends, for every worker with the query's first block active, how many leading blocks of
// the query are active there. additional_active_blocks(w) = len(local) − that (len(local) when absent).
func (r *Registry) ActivePrefix(local []uint64, out []prefix.Score) []prefix.Score {
	return r.ix.FindMatches(local, out)
}

// Len is the number of active requests.
func (r *Registry) Len() int { return len(r.reqs) }

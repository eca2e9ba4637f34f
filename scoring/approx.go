package scoring

import (
	"cmp"
	"slices"
	"time"

	"github.com/kvroute/kvroute/scoring/minheap"
)

// ApproxConfig configures approximate-mode retention.
type ApproxConfig struct {
	// TTL is how long a routed block stays indexed after its last routing (--router-ttl-secs). Default 120 s.
	TTL time.Duration
	// Capacity is the default per-worker block bound, used when SetCapacity was not called for a worker
	// (the worker reported no total_kv_blocks). Default 1,048,576.
	Capacity int
	// TargetRatio: over capacity, a worker is pruned down to Capacity × TargetRatio. Default 0.8.
	TargetRatio float64
}

// ApproxConfigFrom takes the approximate-mode fields of a router config.
func ApproxConfigFrom(c *Config) ApproxConfig {
	return ApproxConfig{TTL: c.TTL, Capacity: c.ApproxWorkerCapacity, TargetRatio: c.ApproxPruneTargetRatio}
}

// Removal is a synthetic Removed event: the worker's blocks (router sequence hashes, which approximate
// mode stores as engine hashes) to drop from the prefix index.
type Removal struct {
	Worker WorkerKey
	Hashes []uint64
}

type approxBlock struct {
	expiry int64 // unix nanos
	pos    uint32
}

type approxItem struct {
	expiry int64
	pos    uint32
	hash   uint64
}

// approxBefore orders expiry ascending, and deeper positions first at equal expiry, so a chain is pruned
// from its leaf side and the index never loses a parent before its children.
func approxBefore(a, b *approxItem) bool {
	if a.expiry != b.expiry {
		return a.expiry < b.expiry
	}
	return a.pos > b.pos
}

type approxWorker struct {
	capacity int
	blocks   map[uint64]approxBlock
	heap     []approxItem // lazy: items whose expiry no longer matches blocks[hash] are stale
}

// Approx is the bookkeeping of approximate mode: which blocks each worker is assumed to hold because the
// router sent it their prompt, when each expires, and what to prune when a worker is over capacity. It
// does not touch the prefix index; it tells the owner which Store and Remove calls to make:
//
//  1. after a routing decision: from, evicted := Record(w, seq, now); index.Store(w, seq[from-1] (no parent
//     when from == 0), blocks{EngineHash: seq[i], LocalHash: local[i]} for i ≥ from); index.Remove(w,
//     evicted). Blocks before from are already indexed and only get their TTL refreshed: storing them
//     again would add a reference in an index that refcounts engine hashes.
//
// The blocks held for a worker stay prefix-closed along each chain (a refresh renews a block's ancestors
// too, and expiry and pruning take the leaf side first), which is what makes the held prefix enough.
//  2. on a timer at NextExpiry: for each Removal of Expire(now), index.Remove(r.Worker, r.Hashes).
//
// Pure: time is an argument. Not safe for concurrent use; the indexer actor that owns the approximate
// index owns it.
type Approx struct {
	cfg     ApproxConfig
	workers map[WorkerKey]*approxWorker
	// held is the workers whose heap holds anything: Expire and NextExpiry read them alone. A router
	// on KV events keeps a worker here only while its events have stopped, where every worker with a
	// declared capacity is in workers; Expire passing over all of them held the scheduler 79–112 µs a
	// tick at 8,192 workers, 44–64 ns now (BenchmarkApproxExpireIdle).
	held map[WorkerKey]*approxWorker
}

// NewApprox returns empty bookkeeping.
func NewApprox(cfg ApproxConfig) *Approx {
	return &Approx{cfg: cfg, workers: make(map[WorkerKey]*approxWorker), held: make(map[WorkerKey]*approxWorker)}
}

func (a *Approx) worker(w WorkerKey) *approxWorker {
	aw := a.workers[w]
	if aw == nil {
		aw = &approxWorker{capacity: a.cfg.Capacity, blocks: make(map[uint64]approxBlock)}
		a.workers[w] = aw
	}
	return aw
}

// SetCapacity sets a worker's block bound (its total_kv_blocks); blocks ≤ 0 restores the default.
func (a *Approx) SetCapacity(w WorkerKey, blocks int) {
	if blocks <= 0 {
		blocks = a.cfg.Capacity
	}
	a.worker(w).capacity = blocks
}

// Record notes that the request with these sequence hashes was routed to w at now: every block's TTL
// starts (or restarts) at now. It returns from, the length of the prefix w already held (store only
// seqHashes[from:]), and the hashes evicted to bring w back under capacity, which the caller removes from
// the index after storing.
func (a *Approx) Record(w WorkerKey, seqHashes []uint64, now time.Time) (from int, evicted []uint64) {
	aw := a.worker(w)
	for from < len(seqHashes) {
		if _, ok := aw.blocks[seqHashes[from]]; !ok {
			break
		}
		from++
	}
	exp := now.Add(a.cfg.TTL).UnixNano()
	for i, h := range seqHashes {
		aw.blocks[h] = approxBlock{expiry: exp, pos: uint32(i)}
		aw.push(approxItem{expiry: exp, pos: uint32(i), hash: h})
	}
	if len(aw.heap) > 2*len(aw.blocks)+64 {
		aw.rebuild()
	}
	if len(aw.heap) > 0 {
		a.held[w] = aw
	}
	if len(aw.blocks) > aw.capacity {
		target := int(float64(aw.capacity) * a.cfg.TargetRatio)
		for len(aw.blocks) > target {
			it, ok := aw.popLive()
			if !ok {
				break
			}
			delete(aw.blocks, it.hash)
			evicted = append(evicted, it.hash)
		}
	}
	return from, evicted
}

// Expire removes every block whose TTL has passed at now and returns them per worker, in worker order.
func (a *Approx) Expire(now time.Time) []Removal {
	t := now.UnixNano()
	var out []Removal
	for w, aw := range a.held {
		var hashes []uint64
		for len(aw.heap) > 0 && aw.heap[0].expiry <= t {
			it := aw.pop()
			if b, ok := aw.blocks[it.hash]; ok && b.expiry == it.expiry {
				delete(aw.blocks, it.hash)
				hashes = append(hashes, it.hash)
			}
		}
		if len(aw.heap) == 0 {
			delete(a.held, w)
		}
		if len(hashes) > 0 {
			out = append(out, Removal{Worker: w, Hashes: hashes})
		}
	}
	slices.SortFunc(out, func(x, y Removal) int {
		if c := cmp.Compare(x.Worker.WorkerID, y.Worker.WorkerID); c != 0 {
			return c
		}
		return cmp.Compare(x.Worker.DPRank, y.Worker.DPRank)
	})
	return out
}

// NextExpiry returns the earliest time Expire has work to do (possibly a stale heap entry, which costs
// one empty Expire), or false when nothing is held.
func (a *Approx) NextExpiry() (time.Time, bool) {
	var best int64
	found := false
	for _, aw := range a.held {
		if len(aw.heap) > 0 && (!found || aw.heap[0].expiry < best) {
			best, found = aw.heap[0].expiry, true
		}
	}
	if !found {
		return time.Time{}, false
	}
	return time.Unix(0, best), true
}

// RemoveWorker forgets a worker; the caller removes it from the index itself.
func (a *Approx) RemoveWorker(w WorkerKey) {
	delete(a.workers, w)
	delete(a.held, w)
}

// Len returns the number of blocks w is assumed to hold.
func (a *Approx) Len(w WorkerKey) int {
	if aw := a.workers[w]; aw != nil {
		return len(aw.blocks)
	}
	return 0
}

func (aw *approxWorker) popLive() (approxItem, bool) {
	for len(aw.heap) > 0 {
		it := aw.pop()
		if b, ok := aw.blocks[it.hash]; ok && b.expiry == it.expiry {
			return it, true
		}
	}
	return approxItem{}, false
}

func (aw *approxWorker) rebuild() {
	aw.heap = aw.heap[:0]
	for h, b := range aw.blocks {
		aw.heap = append(aw.heap, approxItem{expiry: b.expiry, pos: b.pos, hash: h})
	}
	minheap.Init(aw.heap, approxBefore)
}

func (aw *approxWorker) push(it approxItem) { aw.heap = minheap.Push(aw.heap, it, approxBefore) }

func (aw *approxWorker) pop() (it approxItem) {
	it, aw.heap = minheap.Pop(aw.heap, approxBefore)
	return it
}

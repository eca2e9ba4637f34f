package lab

import (
	"cmp"
	"slices"
	"time"

	"github.com/kvroute/kvroute/bench"
	"github.com/kvroute/kvroute/scoring"
)

// SGLang's router (sgl-router, cache_aware policy) never reads the engines' KV events: it keeps an
// approximate radix tree of the text it has routed, with a last-access time per tenant (worker) on every
// node, inserts each routed prompt under the chosen worker, and every eviction interval trims each
// tenant's share to max_tree_size by least-recent access. This arm keeps that tree at the lab's block
// granularity: a node is a prompt block named by its prefix-chain hash (so a path is a prompt prefix),
// and a match counts whole blocks. Its defaults are sgl-router's: eviction every 120 s, max_tree_size
// 2^26 characters, here 2^24 tokens (≈ 4 characters per token).

const (
	sglangEvictionInterval = 120 * time.Second
	sglangMaxTreeTokens    = 1 << 24
)

type sglNode struct {
	last  int64 // unix nanoseconds of the last route through this block
	depth int32
}

// routedTree is one worker's share of the approximate tree.
type routedTree map[uint64]sglNode

// match is the number of leading chain blocks the tree holds.
func (t routedTree) match(chain []uint64) int {
	n := 0
	for n < len(chain) {
		if _, ok := t[chain[n]]; !ok {
			break
		}
		n++
	}
	return n
}

func (t routedTree) insert(chain []uint64, now int64) {
	for i, h := range chain {
		t[h] = sglNode{last: now, depth: int32(i)}
	}
}

// evict trims the tree to max blocks, least recent first and deepest first among equals, so the tree
// stays prefix-closed (a block is never more recent than its parent).
func (t routedTree) evict(max int) {
	if len(t) <= max {
		return
	}
	type kv struct {
		h uint64
		n sglNode
	}
	all := make([]kv, 0, len(t))
	for h, n := range t {
		all = append(all, kv{h, n})
	}
	slices.SortFunc(all, func(a, b kv) int {
		if c := cmp.Compare(a.n.last, b.n.last); c != 0 {
			return c
		}
		if c := cmp.Compare(b.n.depth, a.n.depth); c != 0 {
			return c
		}
		return cmp.Compare(a.h, b.h)
	})
	for _, e := range all[:len(t)-max] {
		delete(t, e.h)
	}
}

type sglangArm struct {
	*selectArm
	trees     []routedTree
	nextEvict time.Time
	maxBlocks int
}

func newSGLangArm(f *Fleet, seed uint64) (Scheduler, error) {
	sel := bench.NewSGLangSelector(f.BlockSize)
	a := &sglangArm{trees: make([]routedTree, f.Workers), maxBlocks: sglangMaxTreeTokens / f.BlockSize}
	for w := range a.trees {
		a.trees[w] = routedTree{}
	}
	sel.CacheSize = func(k scoring.WorkerKey) float64 { return float64(len(a.trees[WorkerOf(k)])) }
	sa, err := newSelectArm(f, seed, modeConfig(f, scoring.ModeKV), sel)
	if err != nil {
		return nil, err
	}
	sa.match = func(r *Request, cands []scoring.Candidate) {
		for w := range cands {
			cands[w].Overlap.Device = uint32(a.trees[w].match(r.Chain))
		}
	}
	a.selectArm = sa
	return a, nil
}

// Route implements Scheduler: the cache-aware pick, then the prompt goes into the chosen worker's tree.
func (a *sglangArm) Route(now time.Time, r *Request) (Route, error) {
	if a.nextEvict.IsZero() {
		a.nextEvict = now.Add(sglangEvictionInterval)
	}
	for !now.Before(a.nextEvict) {
		for _, t := range a.trees {
			t.evict(a.maxBlocks)
		}
		a.nextEvict = a.nextEvict.Add(sglangEvictionInterval)
	}
	rt, err := a.selectArm.Route(now, r)
	if err != nil {
		return rt, err
	}
	a.trees[rt.Worker].insert(r.Chain, now.UnixNano())
	return rt, nil
}

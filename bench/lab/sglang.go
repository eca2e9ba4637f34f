package lab

import (
	"cmp"
	"slices"
	"time"

	"github.com/kvroute/kvroute/bench"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
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
	*machineArm
	trees     []routedTree
	nextEvict time.Time
	maxBlocks int
	chain     []uint64
}

// treeIndex is the sglang arm's index for the machine: overlap is the match in each worker's tree of
// routed prompts. The machine writes its Index only in approximate mode, which this arm does not use, so
// Store and Remove have nothing to do.
type treeIndex struct{ a *sglangArm }

func (x treeIndex) FindMatches(local []uint64, out []prefix.Score) []prefix.Score {
	a := x.a
	a.chain = scoring.ChainHashes(a.chain[:0], local)
	for w, t := range a.trees {
		if n := t.match(a.chain); n > 0 {
			out = append(out, prefix.Score{Worker: prefix.WorkerKey(Key(w)), Blocks: uint32(n)})
		}
	}
	return out
}

func (treeIndex) Store(scoring.WorkerKey, uint64, bool, []prefix.Block) {}
func (treeIndex) Remove(scoring.WorkerKey, []uint64)                    {}

func newSGLangArm(f *Fleet, seed uint64) (Scheduler, error) {
	sel := bench.NewSGLangSelector(f.BlockSize)
	a := &sglangArm{trees: make([]routedTree, f.Workers), maxBlocks: sglangMaxTreeTokens / f.BlockSize}
	for w := range a.trees {
		a.trees[w] = routedTree{}
	}
	sel.CacheSize = func(k scoring.WorkerKey) float64 { return float64(len(a.trees[WorkerOf(k)])) }
	ma, err := newMachineArm(f, seed, modeConfig(f, scoring.ModeKV), treeIndex{a}, sel)
	if err != nil {
		return nil, err
	}
	ma.routed = a.insert
	a.machineArm = ma
	return a, nil
}

// insert puts a routed prompt into its worker's tree, trimming every tree each eviction interval.
func (a *sglangArm) insert(now time.Time, r *Request, w int) {
	if a.nextEvict.IsZero() {
		a.nextEvict = now.Add(sglangEvictionInterval)
	}
	for !now.Before(a.nextEvict) {
		for _, t := range a.trees {
			t.evict(a.maxBlocks)
		}
		a.nextEvict = a.nextEvict.Add(sglangEvictionInterval)
	}
	a.trees[w].insert(r.Chain, now.UnixNano())
}

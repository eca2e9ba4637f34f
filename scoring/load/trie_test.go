package load

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// oracle is the obvious model of a tracker's block accounting: a refcount per tracked hash, fresh blocks
// counted apart, projection by probing every hash.
type oracle struct {
	stride  int
	refs    map[uint64]int
	private int
	reqs    map[string]oracleReq
}

type oracleReq struct {
	hashes  []uint64
	private int
}

func newOracle(stride int) *oracle {
	return &oracle{stride: stride, refs: map[uint64]int{}, reqs: map[string]oracleReq{}}
}

func (o *oracle) tracked(seq []uint64) []uint64 {
	var out []uint64
	for i := o.stride - 1; i < len(seq); i += o.stride {
		out = append(out, seq[i])
	}
	return out
}

func (o *oracle) add(id string, seq []uint64, reuse bool) {
	r := oracleReq{}
	if reuse {
		r.hashes = o.tracked(seq)
		for _, h := range r.hashes {
			o.refs[h]++
		}
	} else {
		r.private = len(seq) / o.stride
		o.private += r.private
	}
	o.reqs[id] = r
}

func (o *oracle) free(id string) {
	r := o.reqs[id]
	for _, h := range r.hashes {
		if o.refs[h]--; o.refs[h] == 0 {
			delete(o.refs, h)
		}
	}
	o.private -= r.private
	delete(o.reqs, id)
}

func (o *oracle) unique() int { return len(o.refs) + o.private }

func (o *oracle) projection(seq []uint64) uint64 {
	var absent uint64
	for _, h := range o.tracked(seq) {
		if o.refs[h] == 0 {
			absent++
		}
	}
	return absent * uint64(o.stride)
}

// checkTrie verifies the trie's invariants: parent and slot links, kid index, counts (positive, at least
// the sum of the kids'), no mergeable node, and the unique counter.
func checkTrie(t *testing.T, tr *chainTrie) {
	t.Helper()
	sum := 0
	var walk func(n *chainNode)
	walk = func(n *chainNode) {
		kids := int32(0)
		for i, k := range n.kids {
			switch {
			case k.parent != n || int(k.slot) != i:
				t.Fatalf("kid %d: parent/slot links broken", i)
			case len(k.edge) == 0 || k.key != k.edge[0]:
				t.Fatalf("kid %d: key %d, edge %v", i, k.key, k.edge)
			case k.count <= 0:
				t.Fatalf("kid %d: count %d", i, k.count)
			case n.child(k.key) != k:
				t.Fatalf("kid %d: lookup by key finds another node", i)
			case n.idx != nil && len(n.idx) != len(n.kids):
				t.Fatalf("index has %d keys for %d kids", len(n.idx), len(n.kids))
			}
			kids += k.count
			sum += len(k.edge)
			walk(k)
		}
		if n != &tr.root {
			if kids > n.count {
				t.Fatalf("kids carry %d chains through a node of count %d", kids, n.count)
			}
			if len(n.kids) == 1 && n.kids[0].count == n.count {
				t.Fatalf("node of count %d with one kid of the same count was not merged", n.count)
			}
		}
	}
	walk(&tr.root)
	if sum != tr.unique {
		t.Fatalf("unique counter %d, edges sum to %d", tr.unique, sum)
	}
}

// TestTrackerMatchesOracle drives a tracker and the oracle with the same random requests over a tiny
// token alphabet (so chains share prefixes, repeat exactly, and branch at every depth), with strides 1–3
// and per-request KV-reuse overrides, and compares unique blocks and projections after every step.
func TestTrackerMatchesOracle(t *testing.T) {
	for _, stride := range []int{1, 2, 3} {
		t.Run("stride="+strconv.Itoa(stride), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, uint64(stride)))
			tr := newTracker(func(c *Config) { c.Stride = stride })
			o := newOracle(stride)
			prompt := func() []uint64 {
				toks := make([]uint32, 2*rng.IntN(14))
				for i := range toks {
					toks[i] = uint32(rng.IntN(2))
				}
				return chain(toks...)
			}
			var live []string
			for i := range 4000 {
				if len(live) > 0 && (rng.IntN(3) == 0 || len(live) > 40) {
					k := rng.IntN(len(live))
					if !tr.Free(live[k]) {
						t.Fatalf("step %d: free of a live request", i)
					}
					o.free(live[k])
					live = append(live[:k], live[k+1:]...)
				} else {
					id := "r" + strconv.Itoa(i)
					seq, reuse := prompt(), rng.IntN(8) != 0
					must(t, tr.AddRequest(Request{ID: id, SeqHashes: seq, AssumeKVReuse: &reuse, Now: t0}))
					o.add(id, seq, reuse)
					live = append(live, id)
				}
				if got, want := tr.Snapshot().UniqueBlocks, o.unique(); got != want {
					t.Fatalf("step %d: unique blocks %d, oracle %d", i, got, want)
				}
				q := prompt()
				if got, want := tr.Projection(q, true), o.projection(q); got != want {
					t.Fatalf("step %d: projection %d, oracle %d", i, got, want)
				}
				checkTrie(t, &tr.blocks)
			}
			for _, id := range live {
				tr.Free(id)
			}
			if tr.blocks.unique != 0 || len(tr.blocks.root.kids) != 0 || tr.Snapshot().UniqueBlocks != 0 {
				t.Fatalf("idle tracker keeps %d blocks, %d root kids", tr.blocks.unique, len(tr.blocks.root.kids))
			}
		})
	}
}

// TestTrieWideFanout: more first blocks than a linear scan handles switch the root to its key index, and
// freeing them all empties it.
func TestTrieWideFanout(t *testing.T) {
	tr := newTracker(nil)
	for i := range 100 {
		must(t, tr.AddRequest(Request{ID: strconv.Itoa(i), SeqHashes: chain(uint32(i), 0, 1, 2), Now: t0}))
	}
	checkTrie(t, &tr.blocks)
	if tr.blocks.root.idx == nil || tr.Snapshot().UniqueBlocks != 200 {
		t.Fatalf("root index %v, unique %d", tr.blocks.root.idx != nil, tr.Snapshot().UniqueBlocks)
	}
	if got := tr.Projection(chain(42, 0, 1, 2, 3, 3), true); got != 1 {
		t.Fatalf("projection %d, want 1", got)
	}
	for i := range 100 {
		tr.Free(strconv.Itoa(i))
		checkTrie(t, &tr.blocks)
	}
	if len(tr.blocks.root.kids) != 0 || len(tr.blocks.root.idx) != 0 {
		t.Fatal("root not empty")
	}
}

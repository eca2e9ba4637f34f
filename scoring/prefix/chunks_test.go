package prefix

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestChunkSumsAgainstReference drives an index with a view (the configuration of actors/indexer's shards)
// through random long stores (up to 700 blocks, so runs span many chunks and split and merge across
// chunk boundaries), removals and clears, sealing after some operations only. After every operation it
// checks every node's depth and chunk sums against a recomputation (a prefix of them before Seal, all of
// them after), and compares the matches of long queries, which are compared by chunk, on the index's own
// view and on the synced copy, with the reference model.
func TestChunkSumsAgainstReference(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			alpha := 2 + int(seed%3) // few hashes per level: long shared runs that split inside chunks
			keys := []WorkerKey{{WorkerID: 1}, {WorkerID: 2}, {WorkerID: 3}, {WorkerID: 3, DPRank: 1}, {WorkerID: 4}}
			ix, ref := New(), newRef()
			view := ix.NewView()
			for op := range 250 {
				w := keys[rng.IntN(len(keys))]
				var desc string
				var got, want error
				held := func() []uint64 {
					var out []uint64
					for eh := range ref.handles[w] {
						out = append(out, eh)
					}
					slices.Sort(out)
					return out
				}()
				switch r := rng.IntN(100); {
				case r < 70:
					var parent uint64
					hasParent := false
					cur := ref.root
					if len(held) > 0 && rng.IntN(10) < 7 {
						parent, hasParent = held[rng.IntN(len(held))], true
						cur = ref.handles[w][parent].node
					}
					path := cur.path
					var bl []Block
					for range 1 + rng.IntN(700) {
						local := uint64(1 + rng.IntN(alpha))
						if cur != nil && len(cur.kids) > 0 && rng.IntN(10) < 8 {
							local = cur.randomChild(rng)
						}
						if cur != nil {
							cur = cur.kids[local]
						}
						path = mix(path ^ local)
						bl = append(bl, Block{EngineHash: mix(path ^ w.WorkerID ^ uint64(w.DPRank)<<32), LocalHash: local})
					}
					desc = fmt.Sprintf("store %v %d blocks", w, len(bl))
					got, want = ix.Store(w, parent, hasParent, bl), ref.store(w, parent, hasParent, bl)
				case r < 97 && len(held) > 0:
					var ehs []uint64
					for range 1 + rng.IntN(6) {
						ehs = append(ehs, held[rng.IntN(len(held))])
					}
					desc = fmt.Sprintf("remove %v %d hashes", w, len(ehs))
					got, want = ix.Remove(w, ehs), ref.remove(w, ehs)
				default:
					desc = fmt.Sprintf("clear %d", w.WorkerID)
					ix.ClearWorker(w.WorkerID)
					ref.clear(w.WorkerID, false)
				}
				if !sameClass(got, want) {
					t.Fatalf("op %d %s: error %v, want class %v", op, desc, got, want)
				}
				sealed := rng.IntN(3) > 0
				if sealed {
					ix.Seal()
				}
				if err := checkChunks(ix, sealed); err != nil {
					t.Fatalf("op %d %s: %v", op, desc, err)
				}
				ix.Sync(view)
				for range 4 {
					q := longQuery(ref, rng, alpha)
					want := ref.findMatches(q)
					for name, v := range map[string]*View{"index": &ix.View, "view": view} {
						got := v.FindMatches(q, nil)
						sortScores(got)
						if !slices.Equal(got, want) {
							t.Fatalf("op %d %s: %s query of %d blocks: %v, want %v", op, desc, name, len(q), got, want)
						}
						if got := matchScores(v, q); !slices.Equal(got, want) {
							t.Fatalf("op %d %s: %s Match of %d blocks: %v, want %v", op, desc, name, len(q), got, want)
						}
					}
				}
			}
		})
	}
}

// longQuery follows the reference tree from the root to a leaf (a random child at each branch), changes
// one hash somewhere in half of the queries, and sometimes cuts the query short or extends it.
func longQuery(ref *refIndex, rng *rand.Rand, alpha int) []uint64 {
	var q []uint64
	for x := ref.root; len(x.kids) > 0; {
		k := x.randomChild(rng)
		q = append(q, k)
		x = x.kids[k]
	}
	if len(q) > 0 && rng.IntN(2) == 0 {
		q[rng.IntN(len(q))] = uint64(1 + alpha + rng.IntN(3)) // a hash no store uses
	}
	switch rng.IntN(3) {
	case 0:
		q = q[:rng.IntN(len(q)+1)]
	case 1:
		for range rng.IntN(40) {
			q = append(q, uint64(1+rng.IntN(alpha)))
		}
	}
	return q
}

// checkChunks checks that every live node's start is its depth and that its sums are a prefix of the
// sums of its whole chunks (all of them when sealed).
func checkChunks(ix *Index, sealed bool) error {
	var walk func(n uint32, depth int) error
	walk = func(n uint32, depth int) error {
		nd := &ix.nodes[n]
		if int(nd.start) != depth {
			return fmt.Errorf("node %d: start %d, depth %d", n, nd.start, depth)
		}
		var want []uint64
		for c := firstChunk(nd.start); (c+1)<<chunkBits <= nd.start+uint32(len(nd.hashes)); c++ {
			want = append(want, chunkSum(nd.hashes[c<<chunkBits-nd.start:]))
		}
		if len(nd.sums) > len(want) || !slices.Equal(nd.sums, want[:len(nd.sums)]) {
			return fmt.Errorf("node %d (depth %d, run %d): sums %x, want a prefix of %x", n, depth, len(nd.hashes), nd.sums, want)
		}
		if sealed && len(nd.sums) != len(want) {
			return fmt.Errorf("node %d sealed with %d of %d sums", n, len(nd.sums), len(want))
		}
		if sealed && !nd.edges {
			return fmt.Errorf("node %d sealed without its edges' sums", n)
		}
		if nd.edges {
			// The edges' sums are the terms of their positions, each at its place in its chunk: head from
			// the second position to the first chunk boundary, tail from the end of the last whole chunk
			// (or that boundary, or the second position) to the run's end.
			var head, tail uint64
			a := min(headLen(nd.start), len(nd.hashes))
			for i := 1; i < a; i++ {
				head += nd.hashes[i] * chunkMul[(int(nd.start)+i)%chunkLen]
			}
			for i := max(a+len(nd.sums)*chunkLen, 1); i < len(nd.hashes); i++ {
				tail += nd.hashes[i] * chunkMul[(int(nd.start)+i)%chunkLen]
			}
			if nd.head != head || nd.tail != tail {
				return fmt.Errorf("node %d (depth %d, run %d): edges %x %x, want %x %x", n, depth, len(nd.hashes), nd.head, nd.tail, head, tail)
			}
		}
		var err error
		nd.eachKid(func(c uint32) {
			if err == nil {
				err = walk(c, depth+len(nd.hashes))
			}
		})
		return err
	}
	return walk(rootNode, 0)
}

// TestChunkSumsDetectEveryMismatch: a run of 700 blocks and a query equal to it but for one hash, at
// every position: the match stops exactly there (the chunk whose sum differs is compared hash by hash).
func TestChunkSumsDetectEveryMismatch(t *testing.T) {
	for _, start := range []int{0, 1, 5, 63, 64, 65} {
		ix := New()
		view := ix.NewView()
		run := seq(1000, start+700)
		if err := ix.Store(wk(1), 0, false, blocks(1000, 1, start+700)); err != nil {
			t.Fatal(err)
		}
		if start > 0 { // a second worker ends at start: the first node is [0, start), the run below it starts at start
			if err := ix.Store(wk(2), 0, false, blocks(1000, 1<<40, start)); err != nil {
				t.Fatal(err)
			}
		}
		ix.Sync(view)
		var q Query
		for at := start + 1; at < start+700; at++ {
			bad := slices.Clone(run)
			bad[at] ^= 1 << 50
			q.Reset(bad)
			got := view.FindMatchesQuery(&q, nil)
			for _, s := range got {
				if s.Worker == wk(1) && s.Blocks != uint32(at) {
					t.Fatalf("start %d, mismatch at %d: matched %d", start, at, s.Blocks)
				}
			}
		}
	}
}

// TestShortRunSumsDetectEveryMismatch: a run with no whole chunk (a node between two splits), at depths
// before, on and after a chunk boundary, and a query that covers it equal but for one hash, at every
// position: the match stops exactly there (the edge whose sum differs is compared hash by hash), and a
// query equal to the run matches all of it.
func TestShortRunSumsDetectEveryMismatch(t *testing.T) {
	for _, start := range []int{1, 5, 40, 63, 64, 65, 100} {
		for _, n := range []int{2, 3, minEdgeRun, minEdgeRun + 1, 24, 30, 63} {
			if wholeChunks(uint32(start), n) > 0 {
				continue
			}
			ix := New()
			view := ix.NewView()
			all := start + n + 20
			run := seq(1000, all)
			// Worker 2 ends at start and worker 1 at start+n, so [start, start+n) is a node of its own.
			for _, s := range []struct {
				w, n int
			}{{3, all}, {1, start + n}, {2, start}} {
				if err := ix.Store(wk(uint64(s.w)), 0, false, blocks(1000, 1, s.n)); err != nil {
					t.Fatal(err)
				}
			}
			ix.Sync(view)
			var q Query
			q.Reset(run)
			if got := scoreOf(view.FindMatchesQuery(&q, nil), wk(1)); got != uint32(start+n) {
				t.Fatalf("start %d, run %d: the whole run matched %d", start, n, got)
			}
			for at := start + 1; at < start+n; at++ {
				bad := slices.Clone(run)
				bad[at] ^= 1 << 50
				q.Reset(bad)
				got := view.FindMatchesQuery(&q, nil)
				if b := scoreOf(got, wk(1)); b != uint32(at) {
					t.Fatalf("start %d, run %d, mismatch at %d: worker 1 matched %d", start, n, at, b)
				}
				if b := scoreOf(got, wk(3)); b != uint32(at) {
					t.Fatalf("start %d, run %d, mismatch at %d: worker 3 matched %d", start, n, at, b)
				}
			}
		}
	}
}

// scoreOf returns the blocks of w's Score in out (0 when it has none).
func scoreOf(out []Score, w WorkerKey) uint32 {
	for _, s := range out {
		if s.Worker == w {
			return s.Blocks
		}
	}
	return 0
}

// TestChunkSumKernel: the vector kernel gives the scalar sums, for every batch length up to 20 chunks,
// random hashes and the extreme words.
func TestChunkSumKernel(t *testing.T) {
	if !haveChunkKernel {
		t.Skip("no AVX-512DQ")
	}
	rng := rand.New(rand.NewPCG(3, 5))
	h := make([]uint64, 20*chunkLen)
	for round := range 50 {
		for i := range h {
			switch rng.IntN(8) {
			case 0:
				h[i] = 0
			case 1:
				h[i] = ^uint64(0)
			default:
				h[i] = rng.Uint64()
			}
		}
		for n := 1; n <= 20; n++ {
			off := rng.IntN(len(h) - n*chunkLen + 1)
			got := make([]uint64, n)
			chunkSums(got, h[off:])
			for c := range n {
				if want := chunkSum(h[off+c*chunkLen:]); got[c] != want {
					t.Fatalf("round %d, %d chunks at %d: chunk %d sum %#x, scalar %#x", round, n, off, c, got[c], want)
				}
			}
		}
	}
}

// BenchmarkChunkSums: one op sums 128 chunks (8,192 hashes, in the cache), with the vector kernel and
// with the scalar loop.
func BenchmarkChunkSums(b *testing.B) {
	h := make([]uint64, 128*chunkLen)
	for i := range h {
		h[i] = uint64(i) * 0x9e3779b97f4a7c15
	}
	out := make([]uint64, 128)
	for _, kernel := range []bool{true, false} {
		if kernel && !haveChunkKernel {
			continue
		}
		b.Run(fmt.Sprintf("kernel=%v", kernel), func(b *testing.B) {
			chunkKernel = kernel
			defer func() { chunkKernel = haveChunkKernel }()
			for b.Loop() {
				chunkSums(out, h)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(h)), "ns/hash")
		})
	}
}

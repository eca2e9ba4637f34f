package prefix

import (
	"fmt"
	"testing"
	"time"
)

// naiveIndex is the design the index is measured against: Dynamo's RadixTree transcribed directly, one
// node per block with a Go map of children, worker sets as bitsets over dense slots (already better than
// Dynamo's hash sets), per-worker Go maps from engine hash to node. Stores only; enough to compare query
// cost and memory.
type naiveIndex struct {
	root   naiveNode
	lookup []map[uint64]*naiveNode
	slotOf map[WorkerKey]uint32
	keys   []WorkerKey
	words  int
}

type naiveNode struct {
	kids    map[uint64]*naiveNode
	workers bitset
}

func newNaive() *naiveIndex {
	return &naiveIndex{root: naiveNode{kids: map[uint64]*naiveNode{}}, slotOf: map[WorkerKey]uint32{}}
}

func (ix *naiveIndex) store(w WorkerKey, parent uint64, hasParent bool, blocks []Block) {
	s, ok := ix.slotOf[w]
	if !ok {
		s = uint32(len(ix.keys))
		ix.slotOf[w] = s
		ix.keys = append(ix.keys, w)
		ix.lookup = append(ix.lookup, map[uint64]*naiveNode{})
		ix.words = int(s>>6) + 1
	}
	cur := &ix.root
	if hasParent {
		if cur = ix.lookup[s][parent]; cur == nil {
			return
		}
	}
	for _, b := range blocks {
		c := cur.kids[b.LocalHash]
		if c == nil {
			c = &naiveNode{kids: map[uint64]*naiveNode{}}
			cur.kids[b.LocalHash] = c
		}
		c.workers.set(s)
		ix.lookup[s][b.EngineHash] = c
		cur = c
	}
}

func (ix *naiveIndex) findMatches(q []uint64, out []Score) []Score {
	var buf [32]uint64
	active := buf[:ix.words]
	n := &ix.root
	for depth, h := range q {
		c := n.kids[h]
		if c == nil {
			break
		}
		alive := uint64(0)
		for i, a := range active {
			var x uint64
			if i < len(c.workers) {
				x = c.workers[i]
			}
			if depth == 0 {
				a = x
			}
			for d := a &^ x; d != 0; d &= d - 1 {
				out = append(out, Score{Worker: ix.keys[i<<6+trailingZeros(d)], Blocks: uint32(depth)})
			}
			active[i] = a & x
			alive |= a & x
		}
		if alive == 0 {
			return out
		}
		n = c
		if depth == len(q)-1 {
			depth++
		}
	}
	return out // survivors are not emitted: the baseline measures the walk, not the output
}

// BenchmarkFindMatchesNaive is BenchmarkFindMatches on naiveIndex: the baseline behind the design choice
// in doc.go.
func BenchmarkFindMatchesNaive(b *testing.B) {
	for _, workers := range []int{256, 64} {
		wl := getWorkload(workers)
		var heap uint64
		ix := newNaive()
		heap = measureHeap(func() {
			for _, ev := range wl.events {
				ix.store(ev.w, ev.parent, ev.hasParent, ev.blocks)
			}
		})
		for _, q := range []string{"conv", "chain", "stair"} {
			b.Run(fmt.Sprintf("W=%d/B=512/q=%s", workers, q), func(b *testing.B) {
				queries := wl.convQ
				switch q {
				case "chain":
					queries = [][]uint64{wl.chainQ}
				case "stair":
					queries = [][]uint64{wl.stairQ}
				}
				out := make([]Score, 0, workers)
				lat := make([]time.Duration, 0, b.N)
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					t0 := time.Now()
					out = ix.findMatches(queries[i%len(queries)], out[:0])
					lat = append(lat, time.Since(t0))
				}
				b.StopTimer()
				p50, p99 := percentiles(lat)
				b.ReportMetric(p50, "p50-us")
				b.ReportMetric(p99, "p99-us")
				b.ReportMetric(float64(heap)/float64(wl.blocks), "bytes/block-worker")
			})
		}
	}
}

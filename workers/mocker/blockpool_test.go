package mocker

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestBlockPoolQueueOrder drives the pool with random allocations, caches, hits, releases and resets and
// checks each against vLLM's free queue kept as a plain list: every block in id order at the start, a
// freed block appended at the tail, a hit block taken out wherever it is, an allocation popping the
// head. The pool makes its blocks as it first allocates them; the ids it hands out, the evictions it
// announces and its counts must be the list's.
func TestBlockPoolQueueOrder(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		capacity := 1 + rng.IntN(64)
		p := newBlockPool(capacity, 16)
		queue := make([]int32, capacity) // the reference free queue, head first
		for i := range queue {
			queue[i] = int32(i)
		}
		ref := make([]int, capacity)    // references per block id
		hashOf := map[int32]BlockHash{} // cached blocks' hashes
		var held []int32                // blocks referenced, in allocation order
		nextHash := BlockHash(1)
		for step := range 3000 {
			switch op := rng.IntN(10); {
			case op < 4 && len(queue) > 0: // allocate, and cache the block
				want := queue[0]
				queue = queue[1:]
				evicted, cached := hashOf[want]
				before := len(p.events)
				got := p.allocate()
				if got != want {
					t.Fatalf("seed %d step %d: allocated block %d, the queue's head is %d", seed, step, got, want)
				}
				if cached {
					delete(hashOf, want)
					if len(p.events) != before+1 || p.events[before].Kind != EventRemoved || p.events[before].Hashes[0] != evicted {
						t.Fatalf("seed %d step %d: reusing block %d did not announce the eviction of %x", seed, step, got, evicted)
					}
				} else if len(p.events) != before {
					t.Fatalf("seed %d step %d: a block never cached announced an eviction", seed, step)
				}
				ref[got]++
				held = append(held, got)
				p.cacheBlock(got, nextHash, 0, false, nil, nil, "")
				hashOf[got] = nextHash
				nextHash++
			case op < 6 && len(hashOf) > 0: // a prefix hit on a cached block, free or not
				ids := make([]int32, 0, len(hashOf))
				for id := range hashOf {
					ids = append(ids, id)
				}
				slices.Sort(ids)
				id := ids[rng.IntN(len(ids))]
				if p.lookup(hashOf[id]) != id {
					t.Fatalf("seed %d step %d: lookup of block %d's hash", seed, step, id)
				}
				if ref[id] == 0 {
					queue = slices.DeleteFunc(queue, func(q int32) bool { return q == id })
				}
				p.touch(id)
				ref[id]++
				held = append(held, id)
			case op < 9 && len(held) > 0: // release a request's blocks, last first
				n := 1 + rng.IntN(min(4, len(held)))
				k := rng.IntN(len(held) - n + 1)
				ids := slices.Clone(held[k : k+n])
				held = slices.Delete(held, k, k+n)
				p.release(ids)
				for i := len(ids) - 1; i >= 0; i-- {
					if ref[ids[i]]--; ref[ids[i]] == 0 {
						queue = append(queue, ids[i])
					}
				}
			case op == 9: // reset: only with nothing referenced
				ok := p.reset()
				if ok != (len(held) == 0) {
					t.Fatalf("seed %d step %d: reset %v with %d blocks held", seed, step, ok, len(held))
				}
				if ok {
					clear(hashOf)
				}
			}
			if p.numFree != len(queue) || p.usedBlocks() != capacity-len(queue) {
				t.Fatalf("seed %d step %d: %d free (%d used), the queue holds %d", seed, step, p.numFree, p.usedBlocks(), len(queue))
			}
		}
	}
}

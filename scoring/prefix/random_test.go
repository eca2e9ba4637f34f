package prefix

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestRandomAgainstReference applies thousands of random stores, removals, clears and worker removals to
// the index and to refIndex, and after every operation compares errors, sizes, workers and the matches of
// random queries, and checks the index's internal invariants.
func TestRandomAgainstReference(t *testing.T) {
	ops := 2500
	if testing.Short() {
		ops = 1000
	}
	for seed := range uint64(8) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			n := ops
			if seed >= 6 {
				n = ops / 5 // larger index, slower to compare after every operation
			}
			runRandom(t, seed, n)
		})
	}
}

func runRandom(t *testing.T, seed uint64, ops int) {
	rng := rand.New(rand.NewPCG(seed, 99))
	alpha := 4 // local hashes per level: few means much sharing, many means wide fan-out (child maps)
	if seed >= 4 {
		alpha = 24
	}
	var keys []WorkerKey
	salt := map[WorkerKey]uint64{}
	ids := uint64(4)
	if seed >= 6 {
		ids = 160 // 320 slots: worker sets spill past the node's inline words
	}
	for id := range ids {
		for rank := range uint32(2) {
			k := WorkerKey{WorkerID: id + 1, DPRank: rank}
			keys = append(keys, k)
			if (id+uint64(rank))%2 == 1 {
				salt[k] = mix(id<<8 | uint64(rank) + 7) // this worker hashes blocks its own way
			}
		}
	}
	ix, ref := New(), newRef()
	heldHashes := func(w WorkerKey) []uint64 {
		var out []uint64
		for eh := range ref.handles[w] {
			out = append(out, eh)
		}
		slices.Sort(out)
		return out
	}
	maxSize := 0
	for op := range ops {
		w := keys[rng.IntN(len(keys))]
		var got, want error
		var desc string
		switch r := rng.IntN(400); {
		case r < 270: // store
			var parent uint64
			hasParent := false
			cur := ref.root
			if held := heldHashes(w); len(held) > 0 && rng.IntN(10) < 6 {
				parent, hasParent = held[rng.IntN(len(held))], true
				cur = ref.handles[w][parent].node
			} else if rng.IntN(10) == 0 {
				parent, hasParent = rng.Uint64(), true
			}
			path := cur.path
			var blocks []Block
			for range 1 + rng.IntN(8) {
				local := uint64(1 + rng.IntN(alpha))
				if cur != nil && len(cur.kids) > 0 && rng.IntN(10) < 6 {
					local = cur.randomChild(rng)
				}
				if cur != nil {
					cur = cur.kids[local]
				}
				path = mix(path ^ local)
				eh := mix(path ^ salt[w])
				switch x := rng.IntN(100); {
				case x < 3:
					eh = mix(path ^ salt[w] ^ 0xabc) // a second name for the same block
				case x < 4:
					if held := heldHashes(w); len(held) > 0 {
						eh = held[rng.IntN(len(held))] // a name already used elsewhere
					}
				}
				blocks = append(blocks, Block{EngineHash: eh, LocalHash: local})
			}
			desc = fmt.Sprintf("store %v parent %#x/%v %v", w, parent, hasParent, blocks)
			got, want = ix.Store(w, parent, hasParent, blocks), ref.store(w, parent, hasParent, blocks)
		case r < 392: // remove
			var ehs []uint64
			held := heldHashes(w)
			for range 1 + rng.IntN(4) {
				if len(held) > 0 && rng.IntN(100) < 85 {
					ehs = append(ehs, held[rng.IntN(len(held))])
				} else {
					ehs = append(ehs, rng.Uint64())
				}
			}
			desc = fmt.Sprintf("remove %v %x", w, ehs)
			got, want = ix.Remove(w, ehs), ref.remove(w, ehs)
		case r < 398:
			desc = fmt.Sprintf("clear %d", w.WorkerID)
			ix.ClearWorker(w.WorkerID)
			ref.clear(w.WorkerID, false)
		default:
			desc = fmt.Sprintf("remove-worker %d", w.WorkerID)
			ix.RemoveWorker(w.WorkerID)
			ref.clear(w.WorkerID, true)
		}
		if !sameClass(got, want) {
			t.Fatalf("op %d %s: error %v, want class %v", op, desc, got, want)
		}
		maxSize = max(maxSize, ix.Size())
		if err := compare(ix, ref, rng, alpha); err != nil {
			t.Fatalf("op %d %s: %v", op, desc, err)
		}
	}
	t.Logf("stats %+v size %d (max %d) nodes %d", ix.Stats(), ix.Size(), maxSize, len(ix.nodes)-len(ix.freeNodes))
	// Snapshot round trip on the final state.
	if err := roundTrip(ix); err != nil {
		t.Fatal(err)
	}
}

func sameClass(got, want error) bool {
	if want == nil || got == nil {
		return got == nil && want == nil
	}
	return errors.Is(got, want)
}

// compare checks the index against the model: sizes, workers, invariants and random queries.
func compare(ix *Index, ref *refIndex, rng *rand.Rand, alpha int) error {
	if ix.Size() != ref.size() {
		return fmt.Errorf("size %d, want %d", ix.Size(), ref.size())
	}
	if got, want := ix.Workers(), ref.workers(); !slices.Equal(got, want) {
		return fmt.Errorf("workers %v, want %v", got, want)
	}
	for w, hs := range ref.handles {
		if got := ix.WorkerBlocks(w); got != len(hs) {
			return fmt.Errorf("worker %v blocks %d, want %d", w, got, len(hs))
		}
	}
	if err := checkInvariants(ix); err != nil {
		return fmt.Errorf("invariant: %v", err)
	}
	for range 4 {
		var q []uint64
		for x := ref.root; len(x.kids) > 0 && rng.IntN(8) != 0; {
			k := x.randomChild(rng)
			q = append(q, k)
			x = x.kids[k]
		}
		for range rng.IntN(3) {
			q = append(q, uint64(1+rng.IntN(alpha)))
		}
		got := ix.FindMatches(q, nil)
		sortScores(got)
		want := ref.findMatches(q)
		if !slices.Equal(got, want) {
			return fmt.Errorf("query %v: %v, want %v", q, got, want)
		}
		if got := matchScores(&ix.View, q); !slices.Equal(got, want) {
			return fmt.Errorf("query %v: Match %v, want %v", q, got, want)
		}
	}
	return nil
}

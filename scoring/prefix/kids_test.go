package prefix

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestChildTable drives one child set through random adds and removes (present and absent hashes,
// replaced children) across the switch from the inline form to the table, its growth and its
// backward-shift deletions, and after every operation compares every lookup, the count and the members
// with a Go map. Hashes come from a small pool, so that tables see collisions and long probe runs,
// and some share their home slot outright.
func TestChildTable(t *testing.T) {
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 11))
		pool := make([]uint64, 40+rng.IntN(400))
		for i := range pool {
			pool[i] = rng.Uint64()
			if i > 0 && rng.IntN(4) == 0 { // same top bits as the one before: the same home slot
				pool[i] = pool[i-1] ^ uint64(1+rng.IntN(1000))
			}
		}
		var c children
		want := map[uint64]uint32{}
		for op := range 6000 {
			h := pool[rng.IntN(len(pool))]
			if rng.IntN(100) < 55 {
				k := uint32(1 + rng.IntN(1<<20))
				if _, ok := want[h]; ok && !c.table {
					c.remove(h) // the inline form is never given a hash it holds: the index removes it first
				}
				c.add(h, k)
				want[h] = k
			} else {
				c.remove(h)
				delete(want, h)
			}
			if c.len() != len(want) {
				t.Fatalf("seed %d op %d: %d children, want %d", seed, op, c.len(), len(want))
			}
			for _, h := range pool {
				k, ok := c.get(h)
				if wk, wok := want[h]; ok != wok || k != wk {
					t.Fatalf("seed %d op %d: get(%#x) = %d, %v; want %d, %v", seed, op, h, k, ok, wk, wok)
				}
			}
			got := map[uint64]uint32{}
			c.each(func(x kid) { got[x.hash] = x.node })
			if !maps.Equal(got, want) {
				t.Fatalf("seed %d op %d: members %v, want %v", seed, op, got, want)
			}
		}
	}
}

// TestChildTablesInTheView: a node with hundreds of children (every branch below one shared prefix) is a
// table, which a view brings up to date by replaying its changes; after random batches of new and dropped
// branches, synced between batches, the index's own view and the synced copy answer every branch's query
// as the reference model does.
func TestChildTablesInTheView(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 5))
			ix, ref := New(), newRef()
			view := ix.NewView()
			keys := []WorkerKey{wk(1), wk(2), wk(3)}
			for _, w := range keys {
				if err, want := ix.Store(w, 0, false, blocks(1, 10*w.WorkerID, 4)), ref.store(w, 0, false, blocks(1, 10*w.WorkerID, 4)); !sameClass(err, want) {
					t.Fatalf("store: %v, want %v", err, want)
				}
			}
			const branches = 400
			held := map[WorkerKey][]uint64{}
			for batch := range 30 {
				for range 1 + rng.IntN(60) {
					w := keys[rng.IntN(len(keys))]
					if b := uint64(rng.IntN(branches)); rng.IntN(3) > 0 {
						eh := 1_000_000*w.WorkerID + 1000*b
						bl := blocks(10_000+100*b, eh, 1+rng.IntN(3))
						err, want := ix.Store(w, 10*w.WorkerID+3, true, bl), ref.store(w, 10*w.WorkerID+3, true, bl)
						if !sameClass(err, want) {
							t.Fatalf("batch %d store: %v, want %v", batch, err, want)
						}
						if err == nil {
							held[w] = append(held[w], eh)
						}
					} else if hs := held[w]; len(hs) > 0 {
						i := rng.IntN(len(hs))
						eh := hs[i]
						held[w] = slices.Delete(hs, i, i+1)
						if err, want := ix.Remove(w, []uint64{eh}), ref.remove(w, []uint64{eh}); !sameClass(err, want) {
							t.Fatalf("batch %d remove: %v, want %v", batch, err, want)
						}
					}
				}
				ix.Sync(view)
				if err := checkInvariants(ix); err != nil {
					t.Fatalf("batch %d: %v", batch, err)
				}
				for b := range uint64(branches) {
					q := append(seq(1, 4), seq(10_000+100*b, 3)...)
					want := ref.findMatches(q)
					for name, v := range map[string]*View{"index": &ix.View, "view": view} {
						got := v.FindMatches(q, nil)
						sortScores(got)
						if !slices.Equal(got, want) {
							t.Fatalf("batch %d branch %d: %s %v, want %v", batch, b, name, got, want)
						}
					}
				}
			}
			if n := ix.nodes[ix.nodes[rootNode].kids.first.node].numKids(); n <= maxInlineKids {
				t.Fatalf("the shared prefix has %d children: no table was exercised", n)
			}
		})
	}
}

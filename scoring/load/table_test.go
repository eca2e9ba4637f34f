package load

import (
	"math/rand/v2"
	"testing"
)

// TestRefTableMatchesMap drives the table and a Go map with the same random operations, with a key
// space small enough to force long probe runs, wrap-around and growth.
func TestRefTableMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	tab := newRefTable()
	ref := map[uint64]uint32{}
	keys := make([]uint64, 300)
	for i := range keys {
		keys[i] = rng.Uint64() & 0xffff // low bits collide often
	}
	keys[0] = 0
	for step := range 200000 {
		k := keys[rng.IntN(len(keys))]
		if rng.IntN(2) == 0 {
			tab.Inc(k)
			ref[k]++
		} else {
			tab.Dec(k)
			if ref[k] > 1 {
				ref[k]--
			} else {
				delete(ref, k)
			}
		}
		if tab.Len() != len(ref) {
			t.Fatalf("step %d: len %d, want %d", step, tab.Len(), len(ref))
		}
		if step%997 == 0 {
			for _, k := range keys {
				_, want := ref[k]
				if tab.Has(k) != want {
					t.Fatalf("step %d: Has(%#x) = %v", step, k, !want)
				}
			}
		}
	}
}

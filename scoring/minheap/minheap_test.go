package minheap

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func less(a, b *int) bool { return *a < *b }

// The heap pops in sorted order whatever mix of Push, Init and Pop built it (oracle: slices.Sort).
func TestHeapSortsLikeSort(t *testing.T) {
	tests := []struct {
		name string
		n    int
		init bool // fill the slice raw, then Init
	}{
		{"empty", 0, false},
		{"one", 1, false},
		{"push 100", 100, false},
		{"init 100", 100, true},
		{"init 1000 dups", 1000, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(tc.n)))
			var h, want []int
			for range tc.n {
				x := r.IntN(tc.n/2 + 1)
				want = append(want, x)
				if tc.init {
					h = append(h, x)
				} else {
					h = Push(h, x, less)
				}
			}
			if tc.init {
				Init(h, less)
			}
			slices.Sort(want)
			var got []int
			for len(h) > 0 {
				var x int
				x, h = Pop(h, less)
				got = append(got, x)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("popped %v, want %v", got, want)
			}
		})
	}
}

package sched

import (
	"math/rand/v2"
	"testing"

	"github.com/kvroute/kvroute/scoring"
)

// TestPosTable: every (worker, rank) of a fleet with lease-style and sequential ids is found at its
// index, and keys not in the fleet are not, including ranks of present workers.
func TestPosTable(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, n := range []int{0, 1, 2, 3, 17, 256, 1000} {
		var keys []scoring.WorkerKey
		for i := range n {
			id := uint64(i)
			if i%2 == 1 {
				id = rng.Uint64()
			}
			keys = append(keys, scoring.WorkerKey{WorkerID: id, DPRank: uint32(i % 3)})
		}
		p := newPosTable(len(keys))
		for i, k := range keys {
			p.put(k, i)
		}
		for i, k := range keys {
			if got, ok := p.find(k); !ok || got != i {
				t.Fatalf("n=%d: %v found at %d (%v), want %d", n, k, got, ok, i)
			}
			if _, ok := p.find(scoring.WorkerKey{WorkerID: k.WorkerID, DPRank: k.DPRank + 7}); ok {
				t.Fatalf("n=%d: absent rank of %v found", n, k)
			}
		}
		if _, ok := p.find(scoring.WorkerKey{WorkerID: 1 << 62}); ok {
			t.Fatalf("n=%d: absent worker found", n)
		}
	}
}

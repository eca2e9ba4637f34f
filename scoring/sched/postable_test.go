package sched

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
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

// TestPosTableDelete: keys put and deleted at random (runs that wrap the table's end included) are
// found exactly when present, at their last index, against a map.
func TestPosTableDelete(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for _, n := range []int{1, 8, 300} {
		p := newPosTable(n)
		want := map[scoring.WorkerKey]int{}
		keys := make([]scoring.WorkerKey, 2*n)
		for i := range keys {
			keys[i] = scoring.WorkerKey{WorkerID: rng.Uint64() % uint64(4*n), DPRank: uint32(rng.IntN(2))}
		}
		for step := range 20 * n {
			k := keys[rng.IntN(len(keys))]
			if _, ok := want[k]; ok && rng.IntN(2) == 0 {
				p.del(k)
				delete(want, k)
			} else if ok || len(want) < n {
				p.put(k, step)
				want[k] = step
			}
			for _, q := range keys {
				i, ok := p.find(q)
				if w, present := want[q]; ok != present || (ok && i != w) {
					t.Fatalf("n=%d step %d: %v found %v at %d, want %v at %d", n, step, q, ok, i, present, w)
				}
			}
		}
	}
}

// TestOverlapsFollowScoreOrderAndFleet: the overlap scatter (with its memo of last time's positions)
// puts every score at its worker's position whatever order the index lists them in, ignores workers
// the machine does not know, and follows the fleet when workers join and leave.
func TestOverlapsFollowScoreOrderAndFleet(t *testing.T) {
	m, now := kvMachine(t, 0), time.Unix(0, 0)
	rng := rand.New(rand.NewPCG(2, 3))
	fleet := map[uint64]bool{}
	for step := range 400 {
		switch id := uint64(rng.IntN(24)); {
		case step%7 == 0 && fleet[id]:
			m.RemoveWorker(now, id)
			delete(fleet, id)
		case step%3 == 0 && !fleet[id]:
			m.AddWorker(now, Worker{ID: id})
			fleet[id] = true
		}
		var scores []prefix.Score
		for _, id := range rng.Perm(24) {
			if rng.IntN(4) > 0 {
				scores = append(scores, prefix.Score{Worker: prefix.WorkerKey{WorkerID: uint64(id)}, Blocks: uint32(1 + rng.IntN(100))})
			}
		}
		if step%2 == 1 { // half the time the index repeats its order, as it does between decisions
			scores = scores[:0]
			for id := range 24 {
				scores = append(scores, prefix.Score{Worker: prefix.WorkerKey{WorkerID: uint64(id)}, Blocks: uint32(1 + rng.IntN(100))})
			}
		}
		ov := m.overlaps(overlap{scores: scores})
		want := make([]uint32, len(m.list))
		for _, s := range scores {
			if tg := m.find(scoring.WorkerKey(s.Worker)); tg != nil {
				want[tg.i] = s.Blocks
			}
		}
		if !slices.Equal(ov, want) {
			t.Fatalf("step %d: overlaps %v, want %v", step, ov, want)
		}
	}
}

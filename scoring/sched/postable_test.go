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

// TestOverlapsFollowScoreOrderAndFleet: the overlap scatter (with its memo of last time's positions)
// puts every score at its worker's position whatever order the index lists them in, ignores workers
// the machine does not know, and follows the fleet when workers join and leave.
func TestOverlapsFollowScoreOrderAndFleet(t *testing.T) {
	cfg := scoring.DefaultConfig()
	cfg.Mode, cfg.BlockSize = scoring.ModeKV, 16
	m, err := New(cfg, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
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

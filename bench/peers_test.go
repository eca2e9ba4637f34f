package bench

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kvroute/kvroute/scoring"
)

func cand(id uint64, overlap uint32, inflight uint32, usedBlocks, totalBlocks uint64) scoring.Candidate {
	return scoring.Candidate{Worker: scoring.WorkerKey{WorkerID: id}, Overlap: scoring.Overlap{Device: overlap},
		Load:     scoring.Load{Known: true, ActiveRequests: inflight},
		Capacity: scoring.Capacity{TotalKVBlocks: totalBlocks, KVUsedBlocks: usedBlocks, KVUsedKnown: totalBlocks > 0}}
}

func TestLLMDSelector(t *testing.T) {
	s := NewLLMDSelector(16)
	req := scoring.Request{ISL: 160} // 10 blocks
	tests := []struct {
		name  string
		cands []scoring.Candidate
		want  uint64
	}{
		// prefix 2×1.0 beats queue+kv 1+1 of an idle worker without the prefix: (2+0+0.5)/4 vs (0+1+1)/4.
		{"prefix dominates", []scoring.Candidate{cand(1, 10, 4, 50, 100), cand(2, 0, 0, 0, 100)}, 1},
		// Half the prefix does not: (1+0+0.5)/4 = 0.375 < (0+1+1)/4 = 0.5.
		{"half prefix loses to idle", []scoring.Candidate{cand(1, 5, 4, 50, 100), cand(2, 0, 0, 0, 100)}, 2},
		{"equal prefix, shorter queue", []scoring.Candidate{cand(1, 3, 5, 10, 100), cand(2, 3, 1, 10, 100), cand(3, 3, 3, 10, 100)}, 2},
		{"equal all but kv", []scoring.Candidate{cand(1, 0, 1, 90, 100), cand(2, 0, 1, 10, 100)}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := s.Select(req, tc.cands, rand.New(rand.NewPCG(1, 2)))
			if err != nil {
				t.Fatal(err)
			}
			if d.Worker.WorkerID != tc.want {
				t.Fatalf("picked %d, want %d (cost %v)", d.Worker.WorkerID, tc.want, d.Cost)
			}
		})
	}
	// The published formula, by hand: prefix 0.5, queue (5−1)/(5−1)=1 for the idlest, kv 1−0.1.
	cs := []scoring.Candidate{cand(1, 5, 1, 10, 100), cand(2, 0, 5, 10, 100)}
	if got, want := s.Score(&req, cs, 0), (2*0.5+1*1+1*0.9)/4; math.Abs(got-want) > 1e-12 {
		t.Fatalf("score %v, want %v", got, want)
	}
	if _, err := s.Select(req, nil, rand.New(rand.NewPCG(1, 2))); !errors.Is(err, scoring.ErrNoWorkers) {
		t.Fatalf("empty fleet: %v", err)
	}
	pin := req
	pin.Pinned, pin.Pin = true, scoring.WorkerKey{WorkerID: 2}
	if d, _ := s.Select(pin, cs, rand.New(rand.NewPCG(1, 2))); d.Worker.WorkerID != 2 {
		t.Fatal("pin ignored")
	}
}

func TestSGLangSelector(t *testing.T) {
	s := NewSGLangSelector(16)
	req := scoring.Request{ISL: 160}
	tests := []struct {
		name  string
		cands []scoring.Candidate
		want  uint64
	}{
		// Imbalanced (40−2 > 32 and 40 > 1.1×2): least loaded, even though worker 1 holds the whole prefix.
		{"imbalance goes to shortest queue", []scoring.Candidate{cand(1, 10, 40, 5, 100), cand(2, 0, 2, 50, 100), cand(3, 0, 10, 1, 100)}, 2},
		// Balanced and match 60 % > 50 %: cache-affine.
		{"match above threshold", []scoring.Candidate{cand(1, 6, 30, 5, 100), cand(2, 2, 2, 50, 100)}, 1},
		// Match 40 % ≤ 50 %: smallest cache.
		{"match below threshold", []scoring.Candidate{cand(1, 4, 3, 70, 100), cand(2, 0, 2, 50, 100), cand(3, 0, 9, 10, 100)}, 3},
		// Gap 35 > 32 but 400 ≤ 1.1 × 365: balanced, so the prefix holder wins.
		{"abs and rel both needed", []scoring.Candidate{cand(1, 8, 400, 5, 100), cand(2, 0, 365, 1, 100)}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := s.Select(req, tc.cands, rand.New(rand.NewPCG(3, 4)))
			if err != nil {
				t.Fatal(err)
			}
			if d.Worker.WorkerID != tc.want {
				t.Fatalf("picked %d, want %d (cost %v)", d.Worker.WorkerID, tc.want, d.Cost)
			}
		})
	}
	sizes := map[uint64]float64{1: 9, 2: 3}
	s.CacheSize = func(w scoring.WorkerKey) float64 { return sizes[w.WorkerID] }
	if d, _ := s.Select(req, []scoring.Candidate{cand(1, 0, 1, 0, 100), cand(2, 0, 1, 90, 100)}, rand.New(rand.NewPCG(3, 4))); d.Worker.WorkerID != 2 {
		t.Fatal("CacheSize ignored")
	}
	// Ties are spread uniformly.
	counts := map[uint64]int{}
	rng := rand.New(rand.NewPCG(5, 6))
	s.CacheSize = nil
	for range 300 {
		d, _ := s.Select(req, []scoring.Candidate{cand(1, 0, 1, 5, 100), cand(2, 0, 1, 5, 100), cand(3, 0, 1, 5, 100)}, rng)
		counts[d.Worker.WorkerID]++
	}
	for id, n := range counts {
		if n < 60 {
			t.Fatalf("worker %d picked %d/300 times on a three-way tie", id, n)
		}
	}
}

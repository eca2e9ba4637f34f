package sched

import (
	"cmp"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/kvroute/kvroute/scoring"
)

// TestCheapestWorkers: the cheapest candidate of each of the n cheapest workers, busy ones left out, is
// what a stable sort of every candidate by cost (NaN last) gives once each worker's later candidates
// are dropped and the first n kept; over random costs with many ties, NaNs, busy candidates and
// workers of several ranks.
func TestCheapestWorkers(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	m := kvMachine(t, 0)
	for trial := range 2000 {
		costs := make([]scoring.CandidateCost, rng.IntN(60))
		for i := range costs {
			c := scoring.CandidateCost{Worker: scoring.WorkerKey{WorkerID: uint64(rng.IntN(25)), DPRank: uint32(rng.IntN(3))},
				Cost: float64(rng.IntN(12)), Busy: rng.IntN(6) == 0}
			if rng.IntN(15) == 0 {
				c.Cost = math.NaN()
			}
			costs[i] = c
		}
		n := 1 + rng.IntN(17)
		var want []scoring.CandidateCost
		for _, c := range costs {
			if !c.Busy {
				want = append(want, c)
			}
		}
		slices.SortStableFunc(want, func(a, b scoring.CandidateCost) int {
			if an, bn := math.IsNaN(a.Cost), math.IsNaN(b.Cost); an || bn {
				return cmp.Compare(btoi(an), btoi(bn))
			}
			return cmp.Compare(a.Cost, b.Cost)
		})
		seen := map[uint64]bool{}
		want = slices.DeleteFunc(want, func(c scoring.CandidateCost) bool {
			dup := seen[c.Worker.WorkerID]
			seen[c.Worker.WorkerID] = true
			return dup
		})
		want = want[:min(n, len(want))]
		got := m.candidatesOf(costs, n)
		if len(got) != len(want) || (len(got) > 0 && !reflect.DeepEqual(keysOf(got), keysOf(want))) {
			t.Fatalf("trial %d (n %d): got %v, want %v", trial, n, got, want)
		}
	}
	all := []scoring.CandidateCost{{Cost: 2}, {Cost: 1, Busy: true}}
	if got := m.candidatesOf(all, 0); !reflect.DeepEqual(got, all) {
		t.Fatalf("top 0 kept %v, want every candidate", got)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// candKey is a candidate's worker, rank and cost bits, for comparing lists that may hold NaN costs.
type candKey struct {
	w    scoring.WorkerKey
	cost uint64
}

func keysOf(cs []scoring.CandidateCost) []candKey {
	out := make([]candKey, len(cs))
	for i, c := range cs {
		out[i] = candKey{c.Worker, math.Float64bits(c.Cost)}
	}
	return out
}

package sched

import (
	"cmp"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
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

// TestCostsTopAsEveryCost: a decision asked for the cheapest workers' rows alone (CostsTop) returns
// what cheapestWorkers takes from every candidate's row, and routes where the decision with every row
// does: two machines alike, random fleets of 1 to 90 workers of 1 to 3 ranks with random loads and
// overlaps, through the vector kernel (nothing filtered) and the scalar loop (exclusions, busy
// thresholds), idle fleets whose costs all tie.
func TestCostsTopAsEveryCost(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for round := range 300 {
		cfg := twinConfig(rng, round, false)
		n := 1 + round%90
		ms := twins(t, rng, cfg, uint64(round), n, 3, 0, true)
		var scores []prefix.Score
		for id := range n {
			if rng.IntN(3) == 0 {
				scores = append(scores, prefix.Score{Worker: prefix.WorkerKey{WorkerID: uint64(id + 1)}, Blocks: uint32(rng.IntN(40))})
			}
		}
		var exclude []uint64
		if round%4 == 1 {
			for id := range n {
				if rng.IntN(3) == 0 {
					exclude = append(exclude, uint64(id+1))
				}
			}
		}
		top := 1 + rng.IntN(17)
		req := Request{ID: "asked", Local: prompt(99, 40), ISL: 40 + rng.IntN(300), Scores: scores, Matched: true, Exclude: exclude, ReturnCosts: true}
		all, errAll := routeOnce(ms[0], req)
		req.CostsTop = top
		some, errSome := routeOnce(ms[1], req)
		if (errAll == nil) != (errSome == nil) {
			t.Fatalf("round %d: every row: %v; top %d: %v", round, errAll, top, errSome)
		}
		if errAll != nil {
			continue
		}
		if want := cheapestWorkers(all.Candidates, top); all.Worker != some.Worker || !slices.Equal(some.Candidates, want) {
			t.Fatalf("round %d (%d workers, top %d): routed to %v and %v; rows %v, want %v", round, n, top, all.Worker, some.Worker, some.Candidates, want)
		}
	}
}

// twinConfig is round's configuration for twins: kv mode, blocks of one token, a random busy threshold
// every third round and, with dynamo, Dynamo's cost every other round.
func twinConfig(rng *rand.Rand, round int, dynamo bool) scoring.Config {
	cfg := scoring.DefaultConfig()
	cfg.Mode, cfg.BlockSize = scoring.ModeKV, 1
	if dynamo && round%2 == 1 {
		cfg.Preset = scoring.PresetDynamo
	}
	if round%3 == 2 {
		cfg.ActivePrefillTokensThreshold = scoring.Some(float64(50 + rng.IntN(400)))
	}
	return cfg
}

// twins returns two machines alike for cfg and seed: n workers of 1 to ranks ranks, one in sickOdds
// marked unhealthy (none at 0), carrying the same random requests (pinned at random when pinned), both
// machines deciding them alike.
func twins(t *testing.T, rng *rand.Rand, cfg scoring.Config, seed uint64, n, ranks, sickOdds int, pinned bool) [2]*Machine {
	t.Helper()
	var ms [2]*Machine
	for k := range ms {
		ms[k] = seededMachine(t, cfg, seed)
	}
	for id := range n {
		w, sick := Worker{ID: uint64(id + 1), DPRanks: 1 + id%ranks}, sickOdds > 0 && rng.IntN(sickOdds) == 0
		for _, m := range ms {
			m.AddWorker(time.Unix(0, 0), w)
			if sick {
				m.SetHealthy(time.Unix(0, 0), w.ID, false)
			}
		}
	}
	for r := range rng.IntN(3 * n) {
		req := Request{ID: "load-" + strconv.Itoa(r), Local: prompt(uint64(r), 4+rng.IntN(60)), ISL: 100 + rng.IntN(400), Matched: true}
		if pinned {
			req.Pin = &scoring.WorkerKey{WorkerID: uint64(1 + rng.IntN(n))}
		}
		a, errA := routeOnce(ms[0], req)
		b, errB := routeOnce(ms[1], req)
		if (errA == nil) != (errB == nil) || a.Worker != b.Worker { // busy pins fail on both
			t.Fatalf("the machines differ before the decision asked")
		}
	}
	return ms
}

// routeOnce routes a copy of req on m at a fixed time.
func routeOnce(m *Machine, req Request) (Decision, error) {
	d, _, err := m.Route(time.Unix(2, 0), &req)
	return d, err
}

// TestOnlyAsItsComplement: a request limited to a subset of workers (Only) is decided as the same
// request excluding every other worker: the same worker or the same error, on two machines alike.
// Subsets short and long (the per-worker and the bitmap paths), with ids listed twice or unknown,
// beside exclusions, pins, busy thresholds and unhealthy workers; both the kvroute cost and Dynamo's.
func TestOnlyAsItsComplement(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for round := range 300 {
		cfg := twinConfig(rng, round, true)
		n := 1 + rng.IntN(150)
		ms := twins(t, rng, cfg, uint64(round), n, 2, 12, false)
		var only, exclude []uint64
		for range 1 + rng.IntN([]int{6, 100}[rng.IntN(2)]) {
			only = append(only, uint64(1+rng.IntN(n+3))) // some listed twice, some unknown
		}
		for range rng.IntN(3) {
			exclude = append(exclude, uint64(1+rng.IntN(n)))
		}
		complement := slices.Clone(exclude)
		for id := range n {
			if !slices.Contains(only, uint64(id+1)) {
				complement = append(complement, uint64(id+1))
			}
		}
		req := Request{ID: "asked", Local: prompt(99, 30), ISL: 40 + rng.IntN(300), Matched: true, Exclude: exclude, Only: only}
		if rng.IntN(4) == 0 {
			req.Pin = &scoring.WorkerKey{WorkerID: uint64(1 + rng.IntN(n))}
		}
		got, errGot := routeOnce(ms[0], req)
		req.Exclude, req.Only = complement, nil
		want, errWant := routeOnce(ms[1], req)
		if !errors.Is(errGot, errWant) && (errGot == nil || errWant == nil || errGot.Error() != errWant.Error()) {
			t.Fatalf("round %d: only %v: %v; its complement: %v", round, only, errGot, errWant)
		}
		if errGot == nil && got.Worker != want.Worker {
			t.Fatalf("round %d: only %v routed to %v, its complement to %v", round, only, got.Worker, want.Worker)
		}
	}
}

// TestShortVisitsAsTheFullPass: decisions of pinned requests (worker or rank) and of requests limited to
// a few workers, classified over their targets alone, and of requests limited to more workers or
// excluding many (marked from the bitmap of their positions), equal those of the pass over every target
// on a twin machine: the worker, cost and overlap, every returned cost row, and the error; with busy
// thresholds, unhealthy workers and both costs, over the twins' evolving loads.
func TestShortVisitsAsTheFullPass(t *testing.T) {
	defer func() { shortVisits = true }()
	rng := rand.New(rand.NewPCG(6, 6))
	decided := 0
	for round := range 200 {
		n := 1 + rng.IntN(120)
		ms := twins(t, rng, twinConfig(rng, round, true), uint64(round), n, 3, 10, false)
		for r := range 12 {
			req := Request{ID: "asked-" + strconv.Itoa(r), Local: prompt(uint64(r%3), 20+rng.IntN(20)), ISL: 40 + rng.IntN(300), Matched: true,
				ReturnCosts: rng.IntN(2) == 0}
			switch rng.IntN(3) {
			case 0:
				req.Pin, req.PinRank = &scoring.WorkerKey{WorkerID: uint64(1 + rng.IntN(n+2)), DPRank: uint32(rng.IntN(3))}, rng.IntN(2) == 0
			case 1: // a few workers, or up to the whole fleet (read through the bitmap)
				k := 1 + rng.IntN(max(n/4, 1))
				if rng.IntN(2) == 0 {
					k = 1 + rng.IntN(n+2)
				}
				for range k {
					req.Only = append(req.Only, uint64(1+rng.IntN(n+2)))
				}
			}
			switch rng.IntN(6) {
			case 0, 1:
				req.Exclude = []uint64{uint64(1 + rng.IntN(n))}
			case 2: // longer than the lists read as they are
				for range shortExclude + 1 + rng.IntN(n) {
					req.Exclude = append(req.Exclude, uint64(1+rng.IntN(n+2)))
				}
			}
			shortVisits = true
			got, errGot := routeOnce(ms[0], req)
			shortVisits = false
			want, errWant := routeOnce(ms[1], req)
			if (errGot == nil) != (errWant == nil) || errGot != nil && errGot.Error() != errWant.Error() {
				t.Fatalf("round %d, request %d (%+v): %v; the full pass: %v", round, r, req, errGot, errWant)
			}
			if errGot == nil {
				decided++
				if got.Worker != want.Worker || got.Cost != want.Cost || got.OverlapBlocks != want.OverlapBlocks || !slices.Equal(got.Candidates, want.Candidates) {
					t.Fatalf("round %d, request %d: %+v; the full pass: %+v", round, r, got, want)
				}
			}
		}
	}
	if decided == 0 {
		t.Fatal("nothing decided")
	}
}

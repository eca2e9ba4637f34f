package sched

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
)

// agedFleet is roomFleet with every cache full, and one request of prompt(family, 0) routed to and
// ended on each worker, worker w's at ended[w-1] seconds: its last block is what an eviction of it names.
func agedFleet(t *testing.T, ended ...int64) *Machine {
	t.Helper()
	m := roomFleet(t, 300, 300, 300)
	for i, at := range ended {
		pin := scoring.WorkerKey{WorkerID: uint64(i + 1)}
		id := string(rune('a' + i))
		if _, _, err := m.Route(time.Unix(at-1, 0), &Request{ID: id, Local: prompt(uint64(20+i), 0), ISL: 100, Pin: &pin, Matched: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Free(time.Unix(at, 0), id); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// evictLast reports that worker w's engine evicted the last block of the request agedFleet ended there.
func evictLast(m *Machine, w int) {
	leaf := prompt(uint64(20+w-1), 0)
	m.Evicted([]prefix.Evicted{{Worker: prefix.WorkerKey{WorkerID: uint64(w)}, Local: leaf[len(leaf)-1], Depth: uint32(len(leaf) - 1)}})
}

// fresh asks, at 100 s, where a 100-token prompt no worker holds goes, with every candidate's cost.
func fresh(t *testing.T, m *Machine) (uint64, []scoring.CandidateCost) {
	t.Helper()
	d, err := m.Query(time.Unix(100, 0), &Request{ID: "fresh", Local: prompt(99, 0), ISL: 100, Matched: true, ReturnCosts: true})
	if err != nil {
		t.Fatal(err)
	}
	return d.Worker.WorkerID, d.Candidates
}

// TestEvictionAge: with every cache full, a request's uncached tokens go where the engine evicts the
// oldest blocks. Workers 1, 2 and 3 evicted the last blocks of requests that ended at 30, 10 and 50 s:
// at 100 s what they evict is 70, 90 and 50 s old, so a fresh prompt goes to worker 2, and the others
// are charged scoring.EvictionAgeWeight × (1 − age / 90 s) a token. An eviction of a block whose release
// is not recorded counts as the oldest; a worker that has evicted nothing takes the request while every
// evicting worker pays the whole weight; the Dynamo preset keeps no ages.
func TestEvictionAge(t *testing.T) {
	m := agedFleet(t, 30, 10, 50)
	_, base := fresh(t, m)
	for w := 1; w <= 3; w++ {
		evictLast(m, w)
	}
	w, costs := fresh(t, m)
	if w != 2 {
		t.Fatalf("went to worker %d, want 2 (the oldest evictions); costs %+v", w, costs)
	}
	for i, age := range []float64{70, 90, 50} {
		want := scoring.EvictionAgeWeight * (1 - age/90) * 100
		if got := costs[i].Cost - base[i].Cost; math.Abs(got-want) > 1e-6 {
			t.Errorf("worker %d charged %v, want %v", i+1, got, want)
		}
	}
	// An eviction not in the records (here: worker 3's request's first block) counts as the oldest.
	m = agedFleet(t, 30, 10, 50)
	evictLast(m, 1)
	evictLast(m, 2)
	m.Evicted([]prefix.Evicted{{Worker: prefix.WorkerKey{WorkerID: 3}, Local: prompt(22, 0)[0], Depth: 0}})
	if w, costs := fresh(t, m); w != 3 {
		t.Fatalf("unrecorded eviction: went to worker %d, want 3; costs %+v", w, costs)
	}
	// Worker 3 has evicted nothing: it takes the request, and the evicting workers pay the whole weight.
	m = agedFleet(t, 30, 10, 50)
	evictLast(m, 1)
	evictLast(m, 2)
	w, costs = fresh(t, m)
	if w != 3 {
		t.Fatalf("a worker that evicted nothing: went to worker %d, want 3; costs %+v", w, costs)
	}
	for i := range 2 {
		if got, want := costs[i].Cost-base[i].Cost, scoring.EvictionAgeWeight*100; math.Abs(got-want) > 1e-6 {
			t.Errorf("worker %d charged %v, want the whole weight %v", i+1, got, want)
		}
	}
	// While some worker is spacious the room charge decides (room.go): the ages change nothing.
	m = agedFleet(t, 30, 10, 50)
	m.SetCachedBlocks(scoring.WorkerKey{WorkerID: 3}, 0)
	_, roomy := fresh(t, m)
	for w := 1; w <= 3; w++ {
		evictLast(m, w)
	}
	if _, costs := fresh(t, m); !slices.Equal(costs, roomy) {
		t.Fatalf("a spacious worker: costs %+v with ages, %+v without", costs, roomy)
	}
	cfg := m.Config()
	cfg.Preset = scoring.PresetDynamo
	d := agedFleet(t, 30, 10, 50)
	if _, err := d.SetConfig(time.Unix(99, 0), cfg.Resolved()); err != nil {
		t.Fatal(err)
	}
	if d.KeepsAges() {
		t.Fatal("the Dynamo preset keeps eviction ages")
	}
}

// TestEvictionAgeBounded: a worker's records keep at most as many ended requests as its cache has
// blocks (the oldest go first), whether or not its engine ever evicts.
func TestEvictionAgeBounded(t *testing.T) {
	m := roomFleet(t, 300, 300, 300)
	pin := scoring.WorkerKey{WorkerID: 1}
	for i := range 1000 {
		id := string(rune(0x4e00 + i))
		if _, _, err := m.Route(time.Unix(int64(i), 0), &Request{ID: id, Local: prompt(uint64(1000+i), 0), ISL: 100, Pin: &pin, Matched: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Free(time.Unix(int64(i), 1), id); err != nil {
			t.Fatal(err)
		}
	}
	a := &m.find(pin).age
	if len(a.routed) != 0 || len(a.released) != 300 || len(a.order) > 600 {
		t.Fatalf("records: %d routed, %d released, %d in order; want 0, 300, ≤ 600", len(a.routed), len(a.released), len(a.order))
	}
	newest := prompt(1999, 0)
	if _, ok := a.released[leafKey{newest[len(newest)-1], uint32(len(newest) - 1)}]; !ok {
		t.Fatal("the newest release was dropped")
	}
}

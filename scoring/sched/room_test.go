package sched

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/kvroute/kvroute/scoring"
)

// roomFleet is three workers of 300 KV blocks (block size 1), with the given cached blocks reported for
// each (a negative count: none reported).
func roomFleet(t *testing.T, cached ...int) *Machine {
	t.Helper()
	m := sharedMachine(t, 0, 0)
	for id := range 3 {
		m.AddWorker(time.Unix(0, 0), Worker{ID: uint64(id + 1), TotalKVBlocks: 300})
	}
	for i, c := range cached {
		if c >= 0 {
			m.SetCachedBlocks(scoring.WorkerKey{WorkerID: uint64(i + 1)}, uint64(c))
		}
	}
	return m
}

// newConversation asks where a 104-token prompt goes whose first 4 tokens (a system prompt) worker 1
// holds: the worker and every candidate's cost.
func newConversation(t *testing.T, m *Machine) (uint64, []scoring.CandidateCost) {
	t.Helper()
	d, err := m.Query(time.Unix(1, 0), &Request{ID: "new", Local: prompt(5, 4), ISL: 104,
		Scores: onWorker1(4), Matched: true, ReturnCosts: true})
	if err != nil {
		t.Fatal(err)
	}
	return d.Worker.WorkerID, d.Candidates
}

// TestEvictionCharge: a new conversation leaves the full holder of its system prompt for a spacious
// worker (the holder's 100 uncached tokens evict as many cached ones, charged at
// scoring.EvictionWeight; a copy of the 4-token prompt elsewhere costs WorkWeight a token), and the
// charge is off whenever no eligible worker with more than half its cache free has room for the whole
// request: every cost then equals the decision's without counts.
func TestEvictionCharge(t *testing.T) {
	w, base := newConversation(t, roomFleet(t))
	if w != 1 {
		t.Fatalf("without cached counts the new conversation went to worker %d, want the prompt's holder 1", w)
	}
	if w, costs := newConversation(t, roomFleet(t, 300, 0, 0)); w == 1 {
		t.Fatalf("holder full, workers 2 and 3 empty: went to the holder (costs %+v)", costs)
	} else if got, want := costs[0].Cost-base[0].Cost, float64(100*scoring.EvictionWeight); math.Abs(got-want) > 1e-9 {
		t.Fatalf("the full holder's charge is %v, want %v (100 tokens evicted)", got, want)
	}
	neutral := []struct {
		name   string
		cached []int
	}{
		{"every cache full", []int{300, 300, 300}},
		{"every cache with room", []int{0, 0, 0}},
		{"room for part of the request only", []int{300, 250, 300}},
		{"room for the request, but not half the cache free", []int{300, 180, 300}},
		{"a count not reported", []int{300, -1, 300}},
		{"a count beyond the capacity", []int{350, 360, 300}},
	}
	for _, tc := range neutral {
		w, costs := newConversation(t, roomFleet(t, tc.cached...))
		if w != 1 || !slices.Equal(costs, base) {
			t.Errorf("%s: worker %d, costs %+v, want worker 1 and %+v", tc.name, w, costs, base)
		}
	}
	// The prefill queued on a worker takes its room: 200 free blocks less 100 tokens routed there leave
	// 100, too few for the request's 104, so the costs are those of the same fleet without counts.
	queued := func(m *Machine) *Machine {
		pin := scoring.WorkerKey{WorkerID: 2}
		if _, _, err := m.Route(time.Unix(0, 0), &Request{ID: "queued", Local: prompt(9, 0)[:100], ISL: 100, Pin: &pin, Matched: true}); err != nil {
			t.Fatal(err)
		}
		return m
	}
	_, want := newConversation(t, queued(roomFleet(t)))
	if _, costs := newConversation(t, queued(roomFleet(t, 300, 100, 300))); !slices.Equal(costs, want) {
		t.Errorf("worker 2's room taken by its queued prefill: costs %+v, want %+v", costs, want)
	}
	if _, costs := newConversation(t, queued(roomFleet(t, 300, 100, 0))); math.Abs(costs[0].Cost-want[0].Cost-100*scoring.EvictionWeight) > 1e-9 ||
		math.Abs(costs[1].Cost-want[1].Cost-4*scoring.EvictionWeight) > 1e-9 || costs[2].Cost != want[2].Cost {
		t.Errorf("worker 3 empty: costs %+v, want the holder charged 100 evicted tokens and worker 2 4 (%+v)", costs, want)
	}
	// A count reported then the worker's capacity learned: the room follows (SetCapacity).
	m := sharedMachine(t, 0, 0)
	for id := range 3 {
		m.AddWorker(time.Unix(0, 0), Worker{ID: uint64(id + 1)})
		m.SetCachedBlocks(scoring.WorkerKey{WorkerID: uint64(id + 1)}, 0)
	}
	m.SetCachedBlocks(scoring.WorkerKey{WorkerID: 1}, 300)
	if w, _ := newConversation(t, m); w != 1 {
		t.Fatalf("capacities unknown: went to worker %d", w)
	}
	for id := range 3 {
		m.SetCapacity(uint64(id+1), 300, 0)
	}
	if w, _ := newConversation(t, m); w == 1 {
		t.Fatal("capacities learned, holder full: went to the holder")
	}
	// A worker leaving keeps the others' rooms (drop), and the count of spacious workers stays theirs.
	m.RemoveWorker(time.Unix(0, 0), 3)
	if w, _ := newConversation(t, m); w != 2 {
		t.Fatalf("after worker 3 left: went to worker %d, want 2", w)
	}
	m.SetCachedBlocks(scoring.WorkerKey{WorkerID: 2}, 299)
	spaciousNow := 0
	for i, l := range m.lines {
		if spacious(l.room, m.tmpl[i].totalKV) {
			spaciousNow++
		}
	}
	if m.roomy != spaciousNow || m.roomy != 0 {
		t.Fatalf("roomy %d, spacious lines %d, want 0", m.roomy, spaciousNow)
	}
}

package prefix

import (
	"slices"
	"testing"
)

// matchScores is v's Match of q as sorted Scores, to compare with FindMatches and the reference.
func matchScores(v *View, q []uint64) []Score {
	var qq Query
	qq.Reset(q)
	var m Matches
	v.Match(&qq, &m)
	if m.Len() == 0 {
		return nil
	}
	got := m.AppendScores(nil)
	sortScores(got)
	return got
}

// TestMatchesGroups: a query's Match holds one group per word and depth where workers drop out, in the
// walk's order, and AppendScores lists FindMatches' Scores in FindMatches' order.
func TestMatchesGroups(t *testing.T) {
	ix := New()
	for w := range 130 { // three bitset words
		n := 2
		if w%2 == 0 {
			n = 4
		}
		if err := ix.Store(WorkerKey{WorkerID: uint64(w)}, 0, false, blocks(1, uint64(w)<<32+1, n)); err != nil {
			t.Fatal(err)
		}
	}
	q := seq(1, 6)
	var qq Query
	qq.Reset(q)
	var m Matches
	ix.View.Match(&qq, &m)
	if m.Parts() != 1 || len(m.Scores) != 0 {
		t.Fatalf("parts %d, scores %d; want one part of groups", m.Parts(), len(m.Scores))
	}
	keys, groups := m.Part(0)
	if len(keys) != 130 {
		t.Fatalf("%d keys, want 130", len(keys))
	}
	// Odd workers stop after 2 blocks, even ones after 4: a group per word at each depth.
	var depths []uint32
	for _, g := range groups {
		depths = append(depths, g.Blocks)
	}
	if want := []uint32{2, 2, 2, 4, 4, 4}; !slices.Equal(depths, want) {
		t.Fatalf("group depths %v, want %v", depths, want)
	}
	if most, tiered := m.Most(); most != 4 || tiered {
		t.Fatalf("Most %d %v, want 4 false", most, tiered)
	}
	if got, want := m.AppendScores(nil), ix.FindMatches(q, nil); !slices.Equal(got, want) {
		t.Fatalf("AppendScores %v,\nFindMatches %v", got, want)
	}
	m.Reset()
	if m.Len() != 0 || m.Parts() != 0 {
		t.Fatalf("after Reset: len %d parts %d", m.Len(), m.Parts())
	}
}

// TestMatchesOutliveWrites: a Matches taken from a view keeps its answer while the index is written and
// synced into that view, even when a removed worker's slot goes to a new worker (the keys table it holds
// is never written).
func TestMatchesOutliveWrites(t *testing.T) {
	ix := New()
	view := ix.NewView()
	for w := range 3 {
		if err := ix.Store(WorkerKey{WorkerID: uint64(w)}, 0, false, blocks(1, uint64(w)<<32+1, 3)); err != nil {
			t.Fatal(err)
		}
	}
	ix.Sync(view)
	q := seq(1, 3)
	before := view.FindMatches(q, nil)
	var qq Query
	qq.Reset(q)
	var m Matches
	view.Match(&qq, &m)

	ix.RemoveWorker(1)
	if err := ix.Store(WorkerKey{WorkerID: 9}, 0, false, blocks(1, 9<<32+1, 2)); err != nil {
		t.Fatal(err)
	}
	ix.Sync(view)
	if got := m.AppendScores(nil); !slices.Equal(got, before) {
		t.Fatalf("held Matches now %v, was %v", got, before)
	}
	now := matchScores(view, q)
	want := []Score{{Worker: WorkerKey{WorkerID: 0}, Blocks: 3}, {Worker: WorkerKey{WorkerID: 2}, Blocks: 3}, {Worker: WorkerKey{WorkerID: 9}, Blocks: 2}}
	if !slices.Equal(now, want) {
		t.Fatalf("after the writes %v, want %v", now, want)
	}
}

// TestMatchPastStackSetsAllocatesNothing: a view of more worker slots than the walk's stack buffers hold
// (2,048) answers Match from the Matches' own sets, device-only and tiered alike: nothing is allocated
// once m has grown, and the answer is FindMatches'.
func TestMatchPastStackSetsAllocatesNothing(t *testing.T) {
	const workers = 3000
	ix := New()
	for w := range uint64(workers) {
		if err := ix.Store(wk(w), 0, false, blocks(1, w<<32+1, 1+int(w%7))); err != nil {
			t.Fatal(err)
		}
	}
	q := seq(1, 8)
	var qq Query
	var m Matches
	match := func() {
		m.Reset()
		qq.Reset(q)
		ix.View.Match(&qq, &m)
	}
	for _, tiered := range []bool{false, true} {
		if tiered { // a host copy of worker 5's chain past its device blocks: the view answers in Scores
			if err := ix.StoreTier(wk(5), TierHost, 0, false, blocks(1, 5<<32+1, 8)); err != nil {
				t.Fatal(err)
			}
		}
		if allocs := testing.AllocsPerRun(20, match); allocs != 0 {
			t.Fatalf("tiered %v: %v allocations per Match, want 0", tiered, allocs)
		}
		want := ix.FindMatches(q, nil)
		sortScores(want)
		if got := matchScores(&ix.View, q); len(got) != workers || !slices.Equal(got, want) {
			t.Fatalf("tiered %v: Match gave %d scores, FindMatches %d (or they differ)", tiered, len(got), len(want))
		}
		match() // twice through the same sets: the second answer is the first's
		got := m.AppendScores(nil)
		sortScores(got)
		if !slices.Equal(got, want) {
			t.Fatalf("tiered %v: Match with reused sets differs from FindMatches", tiered)
		}
	}
}

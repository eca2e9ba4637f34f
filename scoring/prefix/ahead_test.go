package prefix

import (
	"slices"
	"testing"
)

// TestAheadFollowsThePath: a chain of 12 runs (a worker more on each, so each run is its own node)
// matched by a query of the whole chain; Ahead steps once per node on the query's path, stops at
// aheadSteps, at the first hash no child has, and at the query's end, and FindMatches answers the same
// after it.
func TestAheadFollowsThePath(t *testing.T) {
	ix := New()
	chain := seq(1000, 12*10)
	for w := range 12 {
		// Worker w holds the first (12-w)*10 blocks: the runs split every 10 blocks.
		n := (12 - w) * 10
		bl := make([]Block, n)
		for j := range bl {
			bl[j] = Block{EngineHash: uint64(w)<<32 | uint64(j+1), LocalHash: chain[j]}
		}
		if err := ix.Store(wk(uint64(w)), 0, false, bl); err != nil {
			t.Fatal(err)
		}
	}
	steps := func(q []uint64) int {
		var qr Query
		qr.Reset(q)
		var a Ahead
		a.Reset(&ix.View, &qr)
		n := 0
		for a.Step(&qr) {
			n++
		}
		if a.Step(&qr) {
			t.Fatal("Step after the end")
		}
		return n
	}
	tests := []struct {
		name  string
		query []uint64
		want  int
	}{
		{"whole chain, bounded", chain, aheadSteps},
		{"three runs", chain[:30], 3},
		{"into the fourth run", chain[:31], 4},
		{"unknown first hash", []uint64{7}, 0},
		{"empty", nil, 0},
		{"stops at a miss", append(slices.Clone(chain[:20]), 9), 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := ix.FindMatches(tc.query, nil)
			if got := steps(tc.query); got != tc.want {
				t.Fatalf("%d steps, want %d", got, tc.want)
			}
			if after := ix.FindMatches(tc.query, nil); !slices.Equal(after, before) {
				t.Fatalf("matches after Ahead %v, before %v", after, before)
			}
		})
	}
	var zero Ahead
	var q Query
	if zero.Step(&q) {
		t.Fatal("the zero Ahead stepped")
	}
}

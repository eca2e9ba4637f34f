package indexer

import (
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/testutil"
	"github.com/kvroute/kvroute/scoring/prefix"
)

// TestReadersNeverWaitForTheWriter parks a reader inside the shard's live view, then writes. The writer
// may wait for that reader (before it syncs the view the reader is in), but readers never wait for the
// writer: new readers see the write as soon as the index's view is published, the parked reader's view
// is left untouched, and the write completes once the parked reader leaves.
func TestReadersNeverWaitForTheWriter(t *testing.T) {
	x := newIndexer(t, 1)
	s := x.shards[0]
	blocks := chain(100, 1, 4)
	q := localsOf(blocks)

	parked, k := s.enter()
	done := make(chan struct{})
	if err := x.Apply(&Apply{WorkerID: 7, Ops: []Op{{Kind: OpStore, Blocks: blocks}}, Done: done}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the write to reach new readers", func() bool {
		out := x.FindMatches(q, nil)
		return len(out) == 1 && out[0].Blocks == 4
	})
	// The writer now waits for the parked reader before it brings the parked view up to date.
	select {
	case <-done:
		t.Fatal("the write finished while a reader was inside the view it syncs")
	default:
	}
	if out := parked.FindMatches(q, nil); len(out) != 0 {
		t.Fatalf("the parked reader's view changed under it: %+v", out)
	}
	s.leave(k)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the write did not finish after the parked reader left")
	}
	// Both views now answer alike: the next reader may enter either.
	for i := range 2 {
		if out := s.views[i].FindMatches(q, nil); len(out) != 1 || out[0] != (prefix.Score{Worker: prefix.WorkerKey{WorkerID: 7}, Blocks: 4}) {
			t.Fatalf("view %d answers %+v", i, out)
		}
	}
}

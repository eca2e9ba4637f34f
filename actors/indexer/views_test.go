package indexer

import (
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

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
		if out := s.g.views[i].FindMatches(q, nil); len(out) != 1 || out[0] != (prefix.Score{Worker: prefix.WorkerKey{WorkerID: 7}, Blocks: 4}) {
			t.Fatalf("view %d answers %+v", i, out)
		}
	}
}

// TestMatchesUnderWorkerChurn: readers take Matches while workers join and leave, so that shards reuse
// freed slots for other workers. Every answer pairs each worker with the overlap only it can have (worker
// id stores 1 + id%4 blocks of one chain), also when re-read after later writes: a held answer's keys
// table is never written (a reused slot gets a new one). Run with -race, it also checks that readers
// and the shard writers share nothing unsynchronized. The writer waits for a read every 25 of its 400
// steps, so reads fall inside the churn however the two goroutines are scheduled.
func TestMatchesUnderWorkerChurn(t *testing.T) {
	x := newIndexer(t, 2)
	full := chain(100, 0, 4)
	q := localsOf(full)
	store := func(id uint64) {
		blocks := chain(100, id<<8, 1+int(id%4))
		if err := x.Apply(&Apply{WorkerID: id, Ops: []Op{{Kind: OpStore, Blocks: blocks}}}); err != nil {
			t.Error(err)
		}
	}
	check := func(scores []prefix.Score) error {
		for _, s := range scores {
			if id := s.Worker.WorkerID; id < 1 || id > 40 || s.Blocks != 1+uint32(id%4) {
				return fmt.Errorf("worker %d with %d blocks", id, s.Blocks)
			}
		}
		return nil
	}
	done := make(chan struct{})
	var reads atomic.Int64
	go func() {
		defer close(done)
		present := map[uint64]bool{}
		seen := int64(0)
		for i := range 400 {
			if i%25 == 0 { // let the reader in between: wait for a read after the last wait
				for reads.Load() == seen {
					runtime.Gosched()
				}
				seen = reads.Load()
			}
			id := uint64(1 + (i*7)%40)
			if present[id] {
				if err := x.RemoveWorker(id); err != nil {
					t.Error(err)
				}
			} else {
				store(id)
			}
			present[id] = !present[id]
		}
		x.Flush()
	}()
	var held prefix.Matches
	var heldScores []prefix.Score
	for running := true; running; reads.Add(1) {
		select {
		case <-done:
			running = false
		default:
		}
		var m prefix.Matches
		x.Match(q, &m)
		scores := m.AppendScores(nil)
		n := reads.Load()
		if err := check(scores); err != nil {
			t.Fatalf("read %d: %v", n, err)
		}
		if n%4 == 0 { // hold this answer; the last one held must not have changed
			if again := held.AppendScores(nil); !slices.Equal(again, heldScores) {
				t.Fatalf("read %d: a held answer changed from %v to %v", n, heldScores, again)
			}
			held, heldScores = m, scores
		}
	}
}

// TestGateIsACacheLine: a shard's gate fills one cache line, so that the gates of an indexer's shards,
// one array, put each on a line of its own.
func TestGateIsACacheLine(t *testing.T) {
	if n := unsafe.Sizeof(gate{}); n != 64 {
		t.Fatalf("gate is %d bytes, want 64", n)
	}
}

package indexer

import (
	"testing"
	"time"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/scoring/prefix"
)

// TestGateCountsReads: leaving a view counts a read and no reader inside; the warmer's exit counts
// neither, so that its passes alone do not look like queries.
func TestGateCountsReads(t *testing.T) {
	var g gate
	g.views[0], g.views[1] = &prefix.View{}, &prefix.View{}
	r0 := g.reads()
	_, k := g.enter(g.live.Load())
	if uint32(g.readers[k].Load()) != 1 {
		t.Fatalf("one reader inside: count %#x", g.readers[k].Load())
	}
	g.leave(k)
	r1 := g.reads()
	if r1 == r0 || uint32(g.readers[k].Load()) != 0 {
		t.Fatalf("after leave: reads %d → %d, inside %d", r0, r1, uint32(g.readers[k].Load()))
	}
	g.waitReaders(k) // returns: nobody inside, whatever the reads
	_, k = g.enter(g.live.Load())
	g.exit(k)
	if g.reads() != r1 || uint32(g.readers[k].Load()) != 0 {
		t.Fatalf("exit counted a read (%d → %d) or left a reader inside", r1, g.reads())
	}
}

// TestWarmPassFollowsQueries: a pass warms the shards some query read since the last pass, and none
// when nothing read them (its own reads are not queries); the index answers the same before and after.
func TestWarmPassFollowsQueries(t *testing.T) {
	x := newIndexer(t, 3)
	for w := uint64(0); w < 30; w++ {
		_ = x.Apply(&Apply{WorkerID: w, Ops: []Op{{Kind: OpStore, Blocks: chain(7, w<<20, 1+int(w))}}})
	}
	x.Flush()
	last := make([]int64, len(x.gates))
	if n := x.warmPass(last); n != 0 {
		t.Fatalf("no query yet, %d shards warmed", n)
	}
	q := localsOf(chain(7, 0, 40))
	before := x.FindMatches(q, nil)
	if n := x.warmPass(last); n != 3 {
		t.Fatalf("after a query of every shard, %d shards warmed, want 3", n)
	}
	if n := x.warmPass(last); n != 0 {
		t.Fatalf("the warmer's own reads counted as queries: %d shards warmed", n)
	}
	if after := x.FindMatches(q, nil); len(after) != len(before) || len(before) != 30 {
		t.Fatalf("scores %d before warming, %d after, want 30", len(before), len(after))
	}
	if got := x.Warmed(); got.Views != 3 || got.Busy <= 0 {
		t.Fatalf("warmer's counts %+v, want 3 views and the time spent reading them", got)
	}
}

// TestWarmerRunsAndStops: with a period set, a query is followed by a warming pass on the warmer's own
// goroutine, and Stop ends that goroutine.
func TestWarmerRunsAndStops(t *testing.T) {
	system := actors.NewSystem(nil)
	defer system.Shutdown()
	waitFor(t, func() bool { return warmKind.Live() == 0 }) // an earlier test's warmer counts itself out after its Stop
	x, err := New(system, Config{Shards: 2, MailboxSize: 64, WarmEvery: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if x.WarmEvery() != time.Millisecond || warmKind.Live() != 1 {
		t.Fatalf("period %v, warmers %d, want 1", x.WarmEvery(), warmKind.Live())
	}
	_ = x.Apply(&Apply{WorkerID: 1, Ops: []Op{{Kind: OpStore, Blocks: chain(7, 1, 8)}}})
	x.Flush()
	x.FindMatches(localsOf(chain(7, 0, 8)), nil)
	waitFor(t, func() bool { return x.warmed.Load() >= 2 })
	x.Stop() // returns once the warmer has left its loop; the goroutine then counts itself out
	waitFor(t, func() bool { return warmKind.Live() == 0 })
	if _, err := New(system, Config{Shards: 1, MailboxSize: 1, WarmEvery: time.Microsecond}); err == nil {
		t.Fatal("a warm period under a millisecond accepted")
	}
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
	}
}

// TestWarmerBesideWrites: the warmer reads a shard's live view while its writer adds and clears 300
// workers (slots past the inline words, whose separate words the writer allocates and clears) and a
// reader keeps it warming. Under -race it checks that a pass reads nothing the writer or Sync writes; the
// last answer is the index's.
func TestWarmerBesideWrites(t *testing.T) {
	system := actors.NewSystem(nil)
	defer system.Shutdown()
	x, err := New(system, Config{Shards: 1, MailboxSize: 64, WarmEvery: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Stop()
	const workers = 300
	q := localsOf(chain(7, 0, 40))
	stop := make(chan struct{})
	read := make(chan int)
	go func() { // the reader that keeps the shard warming
		n := 0
		for {
			select {
			case <-stop:
				read <- n
				return
			default:
				x.FindMatches(q, nil)
				n++
			}
		}
	}()
	held := map[uint64]uint32{} // blocks of the chain each worker holds: its longest store since its last clear
	for round := range 3 {
		for w := uint64(1); w <= workers; w++ {
			n := 10 + int(w+uint64(round))%30
			_ = x.Apply(&Apply{WorkerID: w, Ops: []Op{{Kind: OpStore, Blocks: chain(7, w<<20, n)}}})
			held[w] = max(held[w], uint32(n))
		}
		x.Flush()
		if round < 2 {
			for w := uint64(1); w <= workers; w += 2 {
				_ = x.ClearWorker(w)
				held[w] = 0
			}
			x.Flush()
		}
	}
	waitFor(t, func() bool { return x.Warmed().Views >= 2 })
	close(stop)
	if n := <-read; n == 0 {
		t.Fatal("the reader never read")
	}
	out := x.FindMatches(q, nil)
	if len(out) != workers {
		t.Fatalf("%d scores after the writes, want %d", len(out), workers)
	}
	for _, s := range out {
		if want := held[s.Worker.WorkerID]; s.Blocks != want {
			t.Fatalf("worker %d matches %d blocks, want %d", s.Worker.WorkerID, s.Blocks, want)
		}
	}
}

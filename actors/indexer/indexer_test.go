package indexer

import (
	"cmp"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"testing"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
)

func newIndexer(t testing.TB, shards int) *Indexer {
	t.Helper()
	system := actors.NewSystem(nil)
	x, err := New(system, Config{Shards: shards, MailboxSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		x.Stop()
		system.Shutdown()
	})
	return x
}

// chain returns n blocks whose local hashes are base+i and engine hashes engineBase+i.
func chain(base, engineBase uint64, n int) []prefix.Block {
	out := make([]prefix.Block, n)
	for i := range out {
		out[i] = prefix.Block{EngineHash: engineBase + uint64(i), LocalHash: base + uint64(i)}
	}
	return out
}

func localsOf(blocks []prefix.Block) []uint64 {
	out := make([]uint64, len(blocks))
	for i, b := range blocks {
		out[i] = b.LocalHash
	}
	return out
}

func TestValidate(t *testing.T) {
	for _, c := range []Config{{Shards: 0, MailboxSize: 1}, {Shards: 1, MailboxSize: 0}, {Shards: 1000, MailboxSize: 1}} {
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if d := DefaultConfig(); d.Validate() != nil || d.Shards != min(4, runtime.GOMAXPROCS(0)) {
		t.Fatalf("default %+v", d)
	}
}

// 1,000 workers across 4 shards: each holds a prefix of one shared 64-block chain of its own length
// (worker w holds w%64+1 blocks) plus a private branch; every query answer must be exact.
func TestThousandWorkersFourShards(t *testing.T) {
	x := newIndexer(t, 4)
	const workers, depth = 1000, 64
	shared := chain(1<<32, 0, depth)
	for w := uint64(0); w < workers; w++ {
		n := int(w%depth) + 1
		blocks := make([]prefix.Block, n)
		copy(blocks, shared[:n])
		if err := x.Apply(&Apply{WorkerID: w, Ops: []Op{
			{Kind: OpStore, Blocks: blocks},
			{Kind: OpStore, Parent: uint64(n - 1), HasParent: true, Blocks: chain(w<<40|1<<20, 1<<30, 3)},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	x.Flush()
	counts := x.ShardWorkers()
	sort.Ints(counts)
	if counts[0] != 250 || counts[3] != 250 {
		t.Fatalf("shard assignment unbalanced: %v", counts)
	}
	scores := x.FindMatches(localsOf(shared), nil)
	if len(scores) != workers {
		t.Fatalf("%d scores, want %d", len(scores), workers)
	}
	for _, s := range scores {
		if want := uint32(s.Worker.WorkerID%depth) + 1; s.Blocks != want {
			t.Fatalf("worker %d: overlap %d, want %d", s.Worker.WorkerID, s.Blocks, want)
		}
	}
	// A worker's private branch matches only that worker.
	w := uint64(777)
	n := int(w%depth) + 1
	q := append(localsOf(shared[:n]), localsOf(chain(w<<40|1<<20, 0, 3))...)
	best := map[uint64]uint32{}
	for _, s := range x.FindMatches(q, nil) {
		best[s.Worker.WorkerID] = s.Blocks
	}
	if best[w] != uint32(n+3) {
		t.Fatalf("worker %d: overlap %d, want %d", w, best[w], n+3)
	}
	if x.Size() != workers*3+sumPrefix(workers, depth) {
		t.Fatalf("size %d", x.Size())
	}
	if st := x.Stats(5); st.Events != 2 || st.RejectedStores != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func sumPrefix(workers, depth int) int {
	n := 0
	for w := 0; w < workers; w++ {
		n += w%depth + 1
	}
	return n
}

func TestRejectedStoreAndRemovals(t *testing.T) {
	x := newIndexer(t, 2)
	w := prefix.WorkerKey{WorkerID: 1, DPRank: 1}
	done := make(chan struct{})
	_ = x.Apply(&Apply{WorkerID: 1, Done: done, Ops: []Op{
		{Kind: OpStore, DPRank: 1, Blocks: chain(100, 10, 2)},
		{Kind: OpStore, DPRank: 1, Parent: 999, HasParent: true, Blocks: chain(500, 50, 1)}, // unknown parent
		{Kind: OpRemove, DPRank: 1, Hashes: []uint64{12345}},                                // unknown hash
	}})
	<-done
	st := x.Stats(1)
	if st.RejectedStores != 1 || st.MissingRemoves != 1 || st.Events != 3 {
		t.Fatalf("stats %+v", st)
	}
	if x.Blocks(w) != 2 {
		t.Fatalf("blocks %d", x.Blocks(w))
	}
	_ = x.Apply(&Apply{WorkerID: 1, Ops: []Op{{Kind: OpRemove, DPRank: 1, Hashes: []uint64{11}}}})
	x.Flush()
	if got := x.FindMatches([]uint64{100, 101}, nil); len(got) != 1 || got[0].Blocks != 1 || got[0].Worker != w {
		t.Fatalf("after remove: %+v", got)
	}
	// A clear comes from one rank's block pool: rank 1 keeps its block.
	_ = x.Apply(&Apply{WorkerID: 1, Ops: []Op{{Kind: OpStore, DPRank: 0, Blocks: chain(100, 10, 1)}, {Kind: OpClear, DPRank: 0}}})
	x.Flush()
	if x.Size() != 1 || x.Blocks(w) != 1 {
		t.Fatalf("size after clearing rank 0: %d, rank 1 holds %d", x.Size(), x.Blocks(w))
	}
	// So does an engine restart of one rank.
	_ = x.Apply(&Apply{WorkerID: 1, Ops: []Op{{Kind: OpStore, DPRank: 0, Blocks: chain(100, 10, 1)}}})
	_ = x.Send(1, &ClearRank{WorkerID: 1, DPRank: 0})
	x.Flush()
	if x.Size() != 1 || x.Blocks(w) != 1 {
		t.Fatalf("size after the restart of rank 0: %d, rank 1 holds %d", x.Size(), x.Blocks(w))
	}
	// A block offloaded to host memory is not device cache (it is host overlap), and its eviction from
	// host memory leaves the device copy.
	_ = x.Apply(&Apply{WorkerID: 1, Ops: []Op{
		{Kind: OpStore, DPRank: 0, Blocks: chain(300, 30, 1), Medium: scoring.MediumHostPinned},
		{Kind: OpRemove, DPRank: 1, Hashes: []uint64{10}, Medium: scoring.MediumHostPinned},
	}})
	x.Flush()
	if got := x.FindMatches([]uint64{300}, nil); len(got) != 1 || got[0].Blocks != 0 || got[0].Host != 1 {
		t.Fatalf("host-tier block: %+v, want device overlap 0 and host overlap 1", got)
	}
	if x.Blocks(w) != 1 || x.Stats(1).OtherTierOps != 2 {
		t.Fatalf("rank 1 holds %d blocks, stats %+v", x.Blocks(w), x.Stats(1))
	}
	_ = x.Apply(&Apply{WorkerID: 1, Ops: []Op{{Kind: OpClear, DPRank: 1}}})
	x.Flush()
	if x.Size() != 0 {
		t.Fatalf("size after clearing both ranks %d", x.Size())
	}
	if s, ok := x.ShardOf(1); !ok || s < 0 {
		t.Fatal("cleared worker lost its shard")
	}
	if err := x.RemoveWorker(1); err != nil {
		t.Fatal(err)
	}
	if _, ok := x.ShardOf(1); ok {
		t.Fatal("removed worker still assigned")
	}
	if c := x.ShardWorkers(); c[0]+c[1] != 0 {
		t.Fatalf("counts after removal %v", c)
	}
}

func TestStoppedIndexerRefuses(t *testing.T) {
	system := actors.NewSystem(nil)
	defer system.Shutdown()
	x, err := New(system, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	x.Stop()
	x.Stop()
	if err := x.Apply(&Apply{WorkerID: 1}); err != ErrStopped {
		t.Fatalf("apply after stop: %v", err)
	}
}

// The read path must agree with a query sent through the shard mailbox.
func TestQueryMessageAgrees(t *testing.T) {
	x := newIndexer(t, 1)
	rng := rand.New(rand.NewPCG(1, 2))
	for w := uint64(0); w < 20; w++ {
		_ = x.Apply(&Apply{WorkerID: w, Ops: []Op{{Kind: OpStore, Blocks: chain(7, w<<20, 1+rng.IntN(30))}}})
	}
	x.Flush()
	q := localsOf(chain(7, 0, 32))
	reply := make(chan []prefix.Score, 1)
	x.system.Root.Send(x.pids[0], &Query{Local: q, Reply: reply})
	a, b := <-reply, x.FindMatches(q, nil)
	if len(a) != len(b) {
		t.Fatalf("%d vs %d scores", len(a), len(b))
	}
}

// TestPendingBatchesKeepOrder sends many small batches (each extends a worker's chain by one block) from
// one goroutine per worker with a tiny pending list, interleaved with ClearWorker: batches are applied in
// order, a batch sent before a ClearWorker is applied before it, and senders that find the list full wait
// instead of losing batches.
func TestPendingBatchesKeepOrder(t *testing.T) {
	system := actors.NewSystem(nil)
	x, err := New(system, Config{Shards: 2, MailboxSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		x.Stop()
		system.Shutdown()
	})
	const workers, steps = 4, 300
	errs := make(chan string, workers)
	for w := uint64(1); w <= workers; w++ {
		go func() {
			base := w << 32
			for round := 0; round < 3; round++ {
				for i := uint64(0); i < steps; i++ {
					op := Op{Kind: OpStore, Blocks: chain(base+i, base+i, 1)}
					if i > 0 {
						op.Parent, op.HasParent = base+i-1, true
					}
					_ = x.Apply(&Apply{WorkerID: w, Ops: []Op{op}})
				}
				// Every batch chained onto its predecessor, so the whole chain matches only if each was
				// applied after the one before.
				done := make(chan struct{})
				_ = x.Send(w, &Barrier{Done: done})
				<-done
				if got := x.FindMatches(localsOf(chain(base, 0, steps)), nil); len(got) != 1 || got[0].Blocks != steps {
					errs <- "chain not applied in order"
					return
				}
				if err := x.ClearWorker(w); err != nil {
					errs <- err.Error()
					return
				}
				if n := x.Blocks(prefix.WorkerKey{WorkerID: w}); n != 0 {
					errs <- "batches applied after the ClearWorker sent behind them"
					return
				}
			}
			errs <- ""
		}()
	}
	for range workers {
		if e := <-errs; e != "" {
			t.Fatal(e)
		}
	}
	for w := uint64(1); w <= workers; w++ {
		if st := x.Stats(w); st.Events != 3*steps || st.RejectedStores != 0 {
			t.Fatalf("worker %d: %+v", w, st)
		}
	}
}

// TestClearBetweenBatches: a batch sent after a ClearWorker survives it, one sent before does not — the
// order of an engine restart (the old engine's last batches, the clear, the new engine's first ones).
func TestClearBetweenBatches(t *testing.T) {
	x := newIndexer(t, 1)
	w := prefix.WorkerKey{WorkerID: 1}
	for i := uint64(0); i < 200; i++ {
		_ = x.Apply(&Apply{WorkerID: 1, Ops: []Op{{Kind: OpStore, Blocks: chain(1000+i, 1000+i, 1)}}})
		_ = x.Send(1, &ClearWorker{WorkerID: 1})
		_ = x.Apply(&Apply{WorkerID: 1, Ops: []Op{{Kind: OpStore, Blocks: chain(5000+i, 5000+i, 1)}}})
		x.Flush()
		if n := x.Blocks(w); n != 1 {
			t.Fatalf("round %d: %d blocks after apply, clear, apply; want the last batch's 1", i, n)
		}
		if got := x.FindMatches([]uint64{5000 + i}, nil); len(got) != 1 {
			t.Fatalf("round %d: the batch sent after the clear is gone", i)
		}
		_ = x.Send(1, &ClearWorker{WorkerID: 1})
	}
}

// TestEvictionLog: with logging on, the device removals of workers on every shard come back from
// TakeEvicted (local hash and depth), once; host-tier removals and logging off keep nothing.
func TestEvictionLog(t *testing.T) {
	x := newIndexer(t, 2)
	_ = x.Apply(&Apply{WorkerID: 1, Ops: []Op{{Kind: OpStore, Blocks: chain(100, 10, 3)}}})
	_ = x.Apply(&Apply{WorkerID: 2, Ops: []Op{{Kind: OpStore, Blocks: chain(200, 20, 2)}}})
	_ = x.Apply(&Apply{WorkerID: 1, Ops: []Op{{Kind: OpRemove, Hashes: []uint64{12}}}})
	x.Flush()
	if got := x.TakeEvicted(nil); len(got) != 0 {
		t.Fatalf("logged while off: %v", got)
	}
	x.LogEvictions(true)
	_ = x.Apply(&Apply{WorkerID: 1, Ops: []Op{{Kind: OpRemove, Hashes: []uint64{11}}}})
	_ = x.Apply(&Apply{WorkerID: 2, Ops: []Op{
		{Kind: OpRemove, Hashes: []uint64{21}},
		{Kind: OpStore, Blocks: chain(300, 30, 1), Medium: scoring.MediumHostPinned},
		{Kind: OpRemove, Hashes: []uint64{30}, Medium: scoring.MediumHostPinned},
	}})
	x.Flush()
	got := x.TakeEvicted(nil)
	slices.SortFunc(got, func(a, b prefix.Evicted) int { return cmp.Compare(a.Worker.WorkerID, b.Worker.WorkerID) })
	want := []prefix.Evicted{{Worker: prefix.WorkerKey{WorkerID: 1}, Local: 101, Depth: 1}, {Worker: prefix.WorkerKey{WorkerID: 2}, Local: 201, Depth: 1}}
	if !slices.Equal(got, want) {
		t.Fatalf("logged %v, want %v", got, want)
	}
	if got := x.TakeEvicted(nil); len(got) != 0 {
		t.Fatalf("taken twice: %v", got)
	}
	x.LogEvictions(false)
	_ = x.Apply(&Apply{WorkerID: 1, Ops: []Op{{Kind: OpRemove, Hashes: []uint64{10}}}})
	x.Flush()
	if got := x.TakeEvicted(nil); len(got) != 0 {
		t.Fatalf("logged after off: %v", got)
	}
}

package prefix

import (
	"errors"
	"slices"
	"testing"
)

// blocks returns a chain of n blocks with local hashes from local and engine hashes from eh, each counting
// up by one.
func blocks(local, eh uint64, n int) []Block {
	out := make([]Block, n)
	for i := range out {
		out[i] = Block{EngineHash: eh + uint64(i), LocalHash: local + uint64(i)}
	}
	return out
}

// seq returns the local hashes from..from+n-1.
func seq(from uint64, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = from + uint64(i)
	}
	return out
}

func wk(id uint64) WorkerKey { return WorkerKey{WorkerID: id} }

func matches(ix *Index, q []uint64) map[WorkerKey]uint32 {
	out := map[WorkerKey]uint32{}
	for _, s := range ix.FindMatches(q, nil) {
		if _, dup := out[s.Worker]; dup {
			panic("worker scored twice")
		}
		out[s.Worker] = s.Blocks
	}
	return out
}

// op is one step of a table test; it returns the step's error.
type op func(ix *Index) error

func store(w WorkerKey, parent uint64, hasParent bool, bs []Block) op {
	return func(ix *Index) error { return ix.Store(w, parent, hasParent, bs) }
}

func remove(w WorkerKey, ehs ...uint64) op {
	return func(ix *Index) error { return ix.Remove(w, ehs) }
}

func clearW(id uint64) op { return func(ix *Index) error { ix.ClearWorker(id); return nil } }

func clearRank(w WorkerKey) op { return func(ix *Index) error { ix.ClearRank(w); return nil } }

func removeW(id uint64) op { return func(ix *Index) error { ix.RemoveWorker(id); return nil } }

func TestIndexRules(t *testing.T) {
	r0, r1 := WorkerKey{WorkerID: 7, DPRank: 0}, WorkerKey{WorkerID: 7, DPRank: 1}
	tests := []struct {
		name    string
		ops     []op
		errs    []error // per op; nil entries mean success
		query   []uint64
		want    map[WorkerKey]uint32
		blocks  map[WorkerKey]int // WorkerBlocks after the ops
		workers []WorkerKey
		stats   Stats
	}{
		{
			name:    "chain and extension by parent",
			ops:     []op{store(wk(1), 0, false, blocks(10, 100, 4)), store(wk(1), 103, true, blocks(14, 104, 4))},
			errs:    []error{nil, nil},
			query:   seq(10, 10),
			want:    map[WorkerKey]uint32{wk(1): 8},
			blocks:  map[WorkerKey]int{wk(1): 8},
			workers: []WorkerKey{wk(1)},
			stats:   Stats{StoredBlocks: 8},
		},
		{
			name:    "unknown parent rejects the whole store and is counted",
			ops:     []op{store(wk(1), 0, false, blocks(10, 100, 2)), store(wk(1), 999, true, blocks(12, 102, 3)), store(wk(2), 100, true, blocks(11, 101, 1))},
			errs:    []error{nil, ErrParentNotFound, ErrParentNotFound},
			query:   seq(10, 5),
			want:    map[WorkerKey]uint32{wk(1): 2},
			blocks:  map[WorkerKey]int{wk(1): 2, wk(2): 0},
			workers: []WorkerKey{wk(1)}, // a rejected store does not register its worker
			stats:   Stats{StoredBlocks: 2, RejectedParentNotFound: 2},
		},
		{
			name:   "duplicate store is refcounted",
			ops:    []op{store(wk(1), 0, false, blocks(10, 100, 3)), store(wk(1), 0, false, blocks(10, 100, 3)), remove(wk(1), 102)},
			errs:   []error{nil, nil, nil},
			query:  seq(10, 3),
			want:   map[WorkerKey]uint32{wk(1): 3},
			blocks: map[WorkerKey]int{wk(1): 3},
			stats:  Stats{StoredBlocks: 6, RemovedBlocks: 1},
		},
		{
			name:   "duplicate store leaves at the second removal",
			ops:    []op{store(wk(1), 0, false, blocks(10, 100, 3)), store(wk(1), 0, false, blocks(10, 100, 3)), remove(wk(1), 102), remove(wk(1), 102)},
			errs:   []error{nil, nil, nil, nil},
			query:  seq(10, 3),
			want:   map[WorkerKey]uint32{wk(1): 2},
			blocks: map[WorkerKey]int{wk(1): 2},
			stats:  Stats{StoredBlocks: 6, RemovedBlocks: 2},
		},
		{
			name: "middle removal is exact: blocks below the gap never count",
			// Worker 1 still holds blocks 5..9 (under worker 2's block 4) but they must not count.
			ops: []op{
				store(wk(1), 0, false, blocks(10, 100, 10)),
				store(wk(2), 0, false, blocks(10, 100, 10)),
				remove(wk(1), 104),
			},
			errs:   []error{nil, nil, nil},
			query:  seq(10, 10),
			want:   map[WorkerKey]uint32{wk(1): 4, wk(2): 10},
			blocks: map[WorkerKey]int{wk(1): 9, wk(2): 10},
			stats:  Stats{StoredBlocks: 20, RemovedBlocks: 1},
		},
		{
			name: "middle removal, then the worker stores the block again",
			ops: []op{
				store(wk(1), 0, false, blocks(10, 100, 10)),
				store(wk(2), 0, false, blocks(10, 100, 6)),
				remove(wk(1), 104),
				store(wk(1), 103, true, blocks(14, 104, 1)),
			},
			errs:   []error{nil, nil, nil, nil},
			query:  seq(10, 10),
			want:   map[WorkerKey]uint32{wk(1): 10, wk(2): 6},
			blocks: map[WorkerKey]int{wk(1): 10, wk(2): 6},
			stats:  Stats{StoredBlocks: 17, RemovedBlocks: 1},
		},
		{
			name: "a block without workers drops its subtree (cascade)",
			ops: []op{
				store(wk(1), 0, false, blocks(10, 100, 3)),
				store(wk(2), 0, false, blocks(10, 100, 3)),
				remove(wk(1), 101),
				remove(wk(2), 101),
			},
			errs:   []error{nil, nil, nil, nil},
			query:  seq(10, 3),
			want:   map[WorkerKey]uint32{wk(1): 1, wk(2): 1},
			blocks: map[WorkerKey]int{wk(1): 1, wk(2): 1}, // both lost block 102 with its parent
			stats:  Stats{StoredBlocks: 6, RemovedBlocks: 2, CascadedBlocks: 2},
		},
		{
			name: "unknown hashes in a removal are counted, the rest applied, the first returned",
			ops: []op{
				store(wk(1), 0, false, blocks(10, 100, 3)),
				remove(wk(1), 555, 102, 556),
				remove(wk(9), 100),
			},
			errs:   []error{nil, ErrBlockNotFound, ErrBlockNotFound},
			query:  seq(10, 3),
			want:   map[WorkerKey]uint32{wk(1): 2},
			blocks: map[WorkerKey]int{wk(1): 2},
			stats:  Stats{StoredBlocks: 3, RemovedBlocks: 1, BlockNotFound: 3},
		},
		{
			name:  "a block that is its own parent is invalid",
			ops:   []op{store(wk(1), 0, false, blocks(10, 100, 2)), store(wk(1), 101, true, []Block{{EngineHash: 101, LocalHash: 50}})},
			errs:  []error{nil, ErrInvalidBlockSequence},
			query: seq(10, 2),
			want:  map[WorkerKey]uint32{wk(1): 2},
			stats: Stats{StoredBlocks: 2, RejectedInvalidBlock: 1},
		},
		{
			name:   "an engine hash naming another block stops the store after the blocks before it",
			ops:    []op{store(wk(1), 0, false, blocks(10, 100, 2)), store(wk(1), 0, false, []Block{{200, 20}, {201, 21}, {100, 22}, {203, 23}})},
			errs:   []error{nil, ErrInvalidBlockSequence},
			query:  seq(20, 4),
			want:   map[WorkerKey]uint32{wk(1): 2},
			blocks: map[WorkerKey]int{wk(1): 4},
			stats:  Stats{StoredBlocks: 4, RejectedInvalidBlock: 1},
		},
		{
			name: "dp ranks are distinct caches",
			ops: []op{
				store(r0, 0, false, blocks(10, 100, 4)),
				store(r1, 0, false, blocks(10, 100, 2)),
				remove(r1, 103), // rank 1 never held it
			},
			errs:    []error{nil, nil, ErrBlockNotFound},
			query:   seq(10, 4),
			want:    map[WorkerKey]uint32{r0: 4, r1: 2},
			blocks:  map[WorkerKey]int{r0: 4, r1: 2},
			workers: []WorkerKey{r0, r1},
			stats:   Stats{StoredBlocks: 6, BlockNotFound: 1},
		},
		{
			name: "clear drops every dp rank and keeps the worker",
			ops: []op{
				store(r0, 0, false, blocks(10, 100, 4)),
				store(r1, 0, false, blocks(10, 100, 2)),
				store(wk(8), 0, false, blocks(10, 100, 3)),
				clearW(7),
			},
			errs:    []error{nil, nil, nil, nil},
			query:   seq(10, 4),
			want:    map[WorkerKey]uint32{wk(8): 3},
			blocks:  map[WorkerKey]int{r0: 0, r1: 0, wk(8): 3},
			workers: []WorkerKey{r0, r1, wk(8)},
			stats:   Stats{StoredBlocks: 9, ClearedBlocks: 6},
		},
		{
			name: "clearing one rank keeps the other ranks' blocks",
			ops: []op{
				store(r0, 0, false, blocks(10, 100, 4)),
				store(r1, 0, false, blocks(10, 100, 2)),
				clearRank(r0),
				store(r0, 0, false, blocks(10, 200, 1)), // the restarted rank starts over
			},
			errs:    []error{nil, nil, nil, nil},
			query:   seq(10, 4),
			want:    map[WorkerKey]uint32{r0: 1, r1: 2},
			blocks:  map[WorkerKey]int{r0: 1, r1: 2},
			workers: []WorkerKey{r0, r1},
			stats:   Stats{StoredBlocks: 7, ClearedBlocks: 4},
		},
		{
			name: "remove-worker forgets every rank; a store under an old parent is rejected",
			ops: []op{
				store(r0, 0, false, blocks(10, 100, 4)),
				store(r1, 0, false, blocks(10, 100, 2)),
				store(wk(8), 0, false, blocks(10, 100, 3)),
				removeW(7),
				store(r0, 103, true, blocks(14, 104, 1)),
			},
			errs:    []error{nil, nil, nil, nil, ErrParentNotFound},
			query:   seq(10, 4),
			want:    map[WorkerKey]uint32{wk(8): 3},
			blocks:  map[WorkerKey]int{wk(8): 3},
			workers: []WorkerKey{wk(8)},
			stats:   Stats{StoredBlocks: 9, ClearedBlocks: 6, RejectedParentNotFound: 1},
		},
		{
			name: "clear keeps blocks other workers hold below a shared prefix",
			ops: []op{
				store(wk(1), 0, false, blocks(10, 100, 6)),
				store(wk(2), 0, false, blocks(10, 100, 3)),
				store(wk(2), 102, true, []Block{{300, 40}, {301, 41}}),
				clearW(1),
			},
			errs:   []error{nil, nil, nil, nil},
			query:  []uint64{10, 11, 12, 40, 41},
			want:   map[WorkerKey]uint32{wk(2): 5},
			blocks: map[WorkerKey]int{wk(1): 0, wk(2): 5},
			stats:  Stats{StoredBlocks: 11, ClearedBlocks: 6},
		},
		{
			name: "branches score their own workers",
			ops: []op{
				store(wk(1), 0, false, blocks(10, 100, 3)),
				store(wk(1), 102, true, []Block{{200, 20}, {201, 21}}),
				store(wk(2), 0, false, blocks(10, 100, 3)),
				store(wk(2), 102, true, []Block{{300, 30}, {301, 31}}),
				store(wk(3), 0, false, blocks(10, 100, 1)),
			},
			errs:   []error{nil, nil, nil, nil, nil},
			query:  []uint64{10, 11, 12, 30, 31, 32},
			want:   map[WorkerKey]uint32{wk(1): 3, wk(2): 5, wk(3): 1},
			blocks: map[WorkerKey]int{wk(1): 5, wk(2): 5, wk(3): 1},
			stats:  Stats{StoredBlocks: 11},
		},
		{
			name:  "no match",
			ops:   []op{store(wk(1), 0, false, blocks(10, 100, 3))},
			errs:  []error{nil},
			query: seq(11, 3),
			want:  map[WorkerKey]uint32{},
			stats: Stats{StoredBlocks: 3},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ix := New()
			for i, o := range tc.ops {
				err := o(ix)
				if want := tc.errs[i]; (want == nil) != (err == nil) || (want != nil && !errors.Is(err, want)) {
					t.Fatalf("op %d: error %v, want %v", i, err, want)
				}
				if err := checkInvariants(ix); err != nil {
					t.Fatalf("op %d: %v", i, err)
				}
			}
			got := matches(ix, tc.query)
			if len(got) != len(tc.want) {
				t.Fatalf("matches %v, want %v", got, tc.want)
			}
			for w, n := range tc.want {
				if got[w] != n {
					t.Fatalf("matches %v, want %v", got, tc.want)
				}
			}
			size := 0
			for w, n := range tc.blocks {
				if got := ix.WorkerBlocks(w); got != n {
					t.Errorf("WorkerBlocks(%v) = %d, want %d", w, got, n)
				}
				size += n
			}
			if tc.blocks != nil && ix.Size() != size {
				t.Errorf("Size() = %d, want %d", ix.Size(), size)
			}
			if tc.workers != nil && !slices.Equal(ix.Workers(), tc.workers) {
				t.Errorf("Workers() = %v, want %v", ix.Workers(), tc.workers)
			}
			if ix.Stats() != tc.stats {
				t.Errorf("Stats() = %+v, want %+v", ix.Stats(), tc.stats)
			}
			if err := roundTrip(ix); err != nil {
				t.Errorf("round trip: %v", err)
			}
		})
	}
}

// TestThousandWorkers spreads 1,000 workers over 16 bitset words: each holds a shared system prompt and a
// private tail of its own length.
func TestThousandWorkers(t *testing.T) {
	ix := New()
	const n = 1000
	for i := range uint64(n) {
		w := WorkerKey{WorkerID: i / 4, DPRank: uint32(i % 4)}
		if err := ix.Store(w, 0, false, blocks(1, 1, 32)); err != nil {
			t.Fatal(err)
		}
		// Worker i also holds i%50 more blocks of the first conversation.
		if k := int(i % 50); k > 0 {
			if err := ix.Store(w, 32, true, blocks(33, 33, k)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := checkInvariants(ix); err != nil {
		t.Fatal(err)
	}
	got := ix.FindMatches(seq(1, 100), nil)
	if len(got) != n {
		t.Fatalf("%d scores, want %d", len(got), n)
	}
	for _, s := range got {
		i := s.Worker.WorkerID*4 + uint64(s.Worker.DPRank)
		if want := uint32(32 + i%50); s.Blocks != want {
			t.Fatalf("worker %v: %d blocks, want %d", s.Worker, s.Blocks, want)
		}
	}
	// Every other worker leaves; the rest still score exactly.
	for id := uint64(0); id < n/4; id += 2 {
		ix.RemoveWorker(id)
	}
	if got := len(ix.FindMatches(seq(1, 100), nil)); got != n/2 {
		t.Fatalf("%d scores after removals, want %d", got, n/2)
	}
	if err := checkInvariants(ix); err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(ix); err != nil {
		t.Fatal(err)
	}
}

// TestWideFanOut: 50 branches under one block and 50 at the root (past the inline child slice, into the
// map), then half of them removed.
func TestWideFanOut(t *testing.T) {
	ix, ref := New(), newRef()
	apply := func(w WorkerKey, parent uint64, hasParent bool, bs []Block) {
		t.Helper()
		if err, want := ix.Store(w, parent, hasParent, bs), ref.store(w, parent, hasParent, bs); !sameClass(err, want) {
			t.Fatalf("store: %v, want %v", err, want)
		}
	}
	apply(wk(1), 0, false, blocks(1, 1, 4))
	for i := range uint64(50) {
		w := wk(1 + i%3)
		if i%3 != 0 {
			apply(w, 0, false, blocks(1, 1, 4))
		}
		apply(w, 4, true, blocks(1000+100*i, 1000+100*i, 3))
		apply(w, 0, false, blocks(50000+100*i, 50000+100*i, 2))
	}
	for i := uint64(0); i < 50; i += 2 {
		w := wk(1 + i%3)
		for _, eh := range []uint64{1000 + 100*i, 50000 + 100*i} {
			if err, want := ix.Remove(w, []uint64{eh}), ref.remove(w, []uint64{eh}); !sameClass(err, want) {
				t.Fatalf("remove: %v, want %v", err, want)
			}
		}
	}
	if err := checkInvariants(ix); err != nil {
		t.Fatal(err)
	}
	for i := range uint64(50) {
		for _, q := range [][]uint64{append(seq(1, 4), seq(1000+100*i, 3)...), seq(50000+100*i, 2)} {
			got := ix.FindMatches(q, nil)
			sortScores(got)
			if want := ref.findMatches(q); !slices.Equal(got, want) {
				t.Fatalf("query %v: %v, want %v", q, got, want)
			}
		}
	}
	if err := roundTrip(ix); err != nil {
		t.Fatal(err)
	}
}

// TestFindMatchesAllocations: with room in out, a query allocates nothing.
func TestFindMatchesAllocations(t *testing.T) {
	ix := New()
	for i := range uint64(300) {
		if err := ix.Store(wk(i), 0, false, blocks(1, 1, 1+int(i))); err != nil {
			t.Fatal(err)
		}
	}
	q := seq(1, 512)
	out := make([]Score, 0, 512)
	allocs := testing.AllocsPerRun(100, func() { out = ix.FindMatches(q, out[:0]) })
	if allocs != 0 {
		t.Fatalf("%v allocations per query, want 0", allocs)
	}
	if len(out) != 300 {
		t.Fatalf("%d scores, want 300", len(out))
	}
}

// TestDumpRoundTripWithGap: a worker that lost a middle block keeps the blocks below it; they cannot be
// replayed under a parent it holds, so Dump reports them as skipped and the replay matches alike.
func TestDumpRoundTripWithGap(t *testing.T) {
	ix := New()
	for _, w := range []WorkerKey{wk(1), wk(2)} {
		if err := ix.Store(w, 0, false, blocks(10, 100, 6)); err != nil {
			t.Fatal(err)
		}
	}
	if err := ix.Store(wk(1), 0, false, blocks(10, 100, 6)); err != nil { // refcount 2 on every block
		t.Fatal(err)
	}
	if err := ix.Remove(wk(2), []uint64{102}); err != nil {
		t.Fatal(err)
	}
	var n int
	skipped := ix.Dump(func(DumpEntry) { n++ })
	if skipped != 3 || n != 6*2+2 {
		t.Fatalf("skipped %d, emitted %d; want 3 and 14", skipped, n)
	}
	if err := roundTrip(ix); err != nil {
		t.Fatal(err)
	}
}

func TestHandleTable(t *testing.T) {
	var tab handleTable
	ref := map[uint64]uint32{}
	for i := range uint64(5000) {
		eh := i * 0x1000 // sequential, badly spread keys
		tab.insert(eh, uint32(i))
		ref[eh] = uint32(i)
		if i%3 == 0 {
			j, ok := tab.find((i / 2) * 0x1000)
			if ok {
				tab.deleteAt(j)
				delete(ref, (i/2)*0x1000)
			}
		}
	}
	if tab.n != len(ref) {
		t.Fatalf("%d entries, want %d", tab.n, len(ref))
	}
	for eh, id := range ref {
		j, ok := tab.find(eh)
		if !ok || tab.id(j) != id {
			t.Fatalf("%#x: found %v", eh, ok)
		}
	}
	if _, ok := tab.find(12345); ok {
		t.Fatal("found an absent key")
	}
}

// TestConcurrentReaders backs the concurrency model in doc.go: FindMatches writes nothing shared, so
// readers under a read lock may run in parallel (the race detector checks it).
func TestConcurrentReaders(t *testing.T) {
	ix := New()
	for i := range uint64(100) {
		if err := ix.Store(wk(i), 0, false, blocks(1, 1, 1+int(i))); err != nil {
			t.Fatal(err)
		}
	}
	q := seq(1, 128)
	done := make(chan []Score)
	for range 4 {
		go func() {
			var out []Score
			for range 50 {
				out = ix.FindMatches(q, out[:0])
			}
			done <- out
		}()
	}
	for range 4 {
		if got := <-done; len(got) != 100 {
			t.Errorf("%d scores, want 100", len(got))
		}
	}
}

// TestCommonPrefix: the shared leading hashes of two equal-length runs, for every length up to 40 and
// every mismatch position (the whole-run byte compare and the hash-by-hash scan agree).
func TestCommonPrefix(t *testing.T) {
	for n := 0; n <= 40; n++ {
		a := make([]uint64, n)
		for i := range a {
			a[i] = uint64(i)*0x9e3779b97f4a7c15 + 1
		}
		if got := commonPrefix(a, slices.Clone(a)); got != n {
			t.Fatalf("equal runs of %d: %d", n, got)
		}
		for at := 0; at < n; at++ {
			b := slices.Clone(a)
			b[at] ^= 1 << 40
			if got := commonPrefix(a, b); got != at {
				t.Fatalf("length %d, mismatch at %d: %d", n, at, got)
			}
		}
	}
}

// TestCascadeLeavesDeadHandles drops blocks that workers hold under engine hashes other than the ones
// of the store that created them: the cascade marks their handles dead without searching their tables,
// the counts are exact at once, a lookup of a dead hash misses, a store reuses it, and compaction keeps
// dead handles at most half of a table and frees the dropped blocks' ids.
func TestCascadeLeavesDeadHandles(t *testing.T) {
	ix := New()
	a, b := wk(1), wk(2)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if err := checkInvariants(ix); err != nil {
			t.Fatal(err)
		}
	}
	must(ix.Store(a, 0, false, blocks(100, 1000, 64)))
	must(ix.Store(b, 0, false, blocks(100, 5000, 64)))
	// Both leave block 32: it and the 31 blocks below it lose their last worker (a cascade), and both
	// workers' handles there are dropped.
	must(ix.Remove(a, []uint64{1032}))
	must(ix.Remove(b, []uint64{5032}))
	for _, w := range []WorkerKey{a, b} {
		if got := ix.WorkerBlocks(w); got != 32 {
			t.Fatalf("%v holds %d blocks, want 32", w, got)
		}
		if ws := ix.workers[ix.slotOf[w]]; ws.dead != 31 {
			t.Fatalf("%v has %d dead handles, want 31", w, ws.dead)
		}
	}
	if got, want := ix.Size(), 64; got != want {
		t.Fatalf("size %d, want %d", got, want)
	}
	if got := ix.Positions(); got != 32 {
		t.Fatalf("%d positions, want 32", got)
	}
	if err := ix.Remove(b, []uint64{5040}); !errors.Is(err, ErrBlockNotFound) {
		t.Fatalf("removing a dropped block: %v", err)
	}
	// b stores the dropped part again under the same engine hashes: they name the new blocks.
	must(ix.Store(b, 5031, true, blocks(132, 5032, 32)))
	if got := matches(ix, seq(100, 64))[b]; got != 64 {
		t.Fatalf("b matches %d blocks, want 64", got)
	}
	// a stores and evicts chains of its own, each under new engine hashes: dead handles pile up until
	// compaction deletes them.
	for i := range uint64(20) {
		must(ix.Store(a, 0, false, blocks(1<<20, 9000+100*i, 64)))
		must(ix.Remove(a, []uint64{9000 + 100*i}))
	}
	if ws := ix.workers[ix.slotOf[a]]; 2*ws.dead > ws.handles.n || ws.live() != 32 {
		t.Fatalf("a: %d dead of %d handles, %d live", ws.dead, ws.handles.n, ws.live())
	}
	if got := ix.Positions(); got != 64 {
		t.Fatalf("%d positions, want 64", got)
	}
}

// TestEvictionLog: with logging on, each removal is logged with the block's local hash and depth, in
// the order applied, whatever node the block sits in; TakeEvicted empties the log; off, nothing is kept.
func TestEvictionLog(t *testing.T) {
	ix := New()
	if err := ix.Store(wk(1), 0, false, blocks(10, 100, 6)); err != nil {
		t.Fatal(err)
	}
	if err := ix.Remove(wk(1), []uint64{105}); err != nil { // not logged yet
		t.Fatal(err)
	}
	if got := ix.TakeEvicted(nil); len(got) != 0 {
		t.Fatalf("logged while off: %v", got)
	}
	ix.LogEvictions(true)
	// Worker 2 shares the first three blocks, then branches: blocks in two nodes.
	if err := ix.Store(wk(2), 0, false, append(blocks(10, 200, 3), blocks(50, 300, 2)...)); err != nil {
		t.Fatal(err)
	}
	if err := ix.Remove(wk(1), []uint64{104, 103}); err != nil {
		t.Fatal(err)
	}
	if err := ix.Remove(wk(2), []uint64{301, 202}); err != nil {
		t.Fatal(err)
	}
	_ = ix.Remove(wk(2), []uint64{999}) // unknown: not logged
	want := []Evicted{{wk(1), 14, 4}, {wk(1), 13, 3}, {wk(2), 51, 4}, {wk(2), 12, 2}}
	got := ix.TakeEvicted(nil)
	if !slices.Equal(got, want) {
		t.Fatalf("logged %v, want %v", got, want)
	}
	if got := ix.TakeEvicted(got[:0]); len(got) != 0 {
		t.Fatalf("log not emptied: %v", got)
	}
	ix.LogEvictions(false)
	_ = ix.Remove(wk(1), []uint64{102})
	if got := ix.TakeEvicted(nil); len(got) != 0 {
		t.Fatalf("logged after off: %v", got)
	}
}

package prefix

import (
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"
)

// emitKernels lists the vector kernels this CPU runs: the AVX-512 one (emitWide) and the AVX2 one.
func emitKernels() (wide []bool) {
	if haveEmitAVX512 {
		wide = append(wide, true)
	}
	if haveEmitAVX2 {
		wide = append(wide, false)
	}
	return wide
}

// TestEmitKernel: each vector emit writes the Scores the scalar loop writes, after what out already
// holds, for random slot sets (full and empty nibbles, the word's last slot) over key arrays that end
// before slot 63.
func TestEmitKernel(t *testing.T) {
	if !haveEmitKernel {
		t.Skip("no vector emit on this CPU")
	}
	defer func(k int) { emitKernel, emitKernelMin, emitWide = haveEmitKernel, k, haveEmitAVX512 }(emitKernelMin)
	emitKernelMin = 1
	for _, wide := range emitKernels() {
		emitWide = wide
		rng := rand.New(rand.NewPCG(1, 2))
		for round := range 5000 {
			keys := make([]WorkerKey, 1+rng.IntN(64))
			for i := range keys {
				keys[i] = WorkerKey{WorkerID: rng.Uint64(), DPRank: rng.Uint32()}
			}
			var set uint64
			dense := rng.IntN(4)
			for i := range keys {
				if rng.IntN(4) < dense+1 {
					set |= 1 << i
				}
			}
			depth := rng.Uint32()
			prior := []Score{{Worker: WorkerKey{WorkerID: 9}, Blocks: 1}, {Blocks: 2}}
			emitKernel = false
			want := emit(append(make([]Score, 0, 80), prior...), keys, set, depth)
			emitKernel = true
			got := emit(append(make([]Score, 0, 80), prior...), keys, set, depth)
			if !slices.Equal(got, want) {
				t.Fatalf("wide %v, round %d, set %#x over %d keys: %v, want %v", wide, round, set, len(keys), got, want)
			}
		}
	}
}

// BenchmarkEmit: one op emits the Scores of 16 words of slots, 1,001 of 1,024 set (a query's first
// dropout: nearly the whole shard), with the vector kernel and with the scalar loop.
func BenchmarkEmit(b *testing.B) {
	sets := make([]uint64, 16)
	for i := range sets {
		sets[i] = ^uint64(0)
	}
	sets[3], sets[7], sets[15] = 0x0fffffffffffffff, 0xfffeffffffffffff, 0x000fffffffefffff
	keys := make([]WorkerKey, 64*len(sets))
	for i := range keys {
		keys[i] = WorkerKey{WorkerID: uint64(i) * 7, DPRank: uint32(i & 3)}
	}
	out := make([]Score, 0, len(keys))
	run := func(name string, kernel, wide bool) {
		b.Run(name, func(b *testing.B) {
			emitKernel, emitWide = kernel, wide
			defer func() { emitKernel, emitWide = haveEmitKernel, haveEmitAVX512 }()
			for b.Loop() {
				out = out[:0]
				for i, s := range sets {
					out = emit(out, keys[i<<6:], s, 100)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(out)), "ns/score")
		})
	}
	for _, wide := range emitKernels() {
		run(map[bool]string{true: "kernel=avx512", false: "kernel=avx2"}[wide], true, wide)
	}
	run("kernel=scalar", false, false)
}

// TestWarmReadsOnly: Warm clamps its range to the view's nodes, and reads without writing: a query on
// another goroutine beside it is race-free (go test -race) and answers as before. 300 workers, so that
// worker sets have words past the inline ones, which Warm reads too.
func TestWarmReadsOnly(t *testing.T) {
	ix := New()
	const workers = 300
	for w := range uint32(workers) {
		if err := ix.Store(WorkerKey{WorkerID: uint64(w)}, 0, false, blocks(1, uint64(w)<<20, 100+int(w)*5)); err != nil {
			t.Fatal(err)
		}
	}
	v := ix.NewView()
	q := make([]uint64, 2000)
	for i := range q {
		q[i] = uint64(1 + i)
	}
	want := v.FindMatches(q, nil)
	if v.Warm(v.Nodes(), v.Nodes()+5) != 0 || v.Warm(3, 3) != 0 || v.Nodes() < 2 {
		t.Fatalf("empty ranges read something, or too few nodes (%d)", v.Nodes())
	}
	done := make(chan []Score)
	go func() { done <- v.FindMatches(q, nil) }()
	_ = v.Warm(0, v.Nodes()+100)
	if got := <-done; !slices.Equal(got, want) || len(want) != workers {
		t.Fatalf("scores beside Warm %v, want %v", got, want)
	}
}

// TestWarmSkipsWhatSyncWrites: the node fields Sync writes in the index's own nodes while queries read
// them lie in the two words Warm skips (a layout change that moves them fails here, not as a race).
func TestWarmSkipsWhatSyncWrites(t *testing.T) {
	var n node
	for name, off := range map[string]uintptr{"dirty": unsafe.Offsetof(n.dirty), "kidsFull": unsafe.Offsetof(n.kidsFull), "synced": unsafe.Offsetof(n.synced)} {
		if w := int(off / 8); w != warmSkip && w != warmSkip+1 {
			t.Errorf("node.%s in word %d, Warm skips words %d and %d", name, w, warmSkip, warmSkip+1)
		}
	}
	if warmSkip+3 >= nodeWords {
		t.Errorf("the word Warm reads instead, %d, is past the node's %d", warmSkip+3, nodeWords)
	}
}

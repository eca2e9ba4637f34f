package prefix

import (
	"math/rand/v2"
	"slices"
	"testing"
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

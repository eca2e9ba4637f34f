package prefix

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestEmitKernel: the vector emit writes the Scores the scalar loop writes, after what out already
// holds, for random slot sets (full and empty nibbles, the word's last slot) over key arrays that end
// before slot 63.
func TestEmitKernel(t *testing.T) {
	if !haveEmitKernel {
		t.Skip("no AVX-512")
	}
	defer func() { emitKernel = haveEmitKernel }()
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
			t.Fatalf("round %d, set %#x over %d keys: %v, want %v", round, set, len(keys), got, want)
		}
	}
}

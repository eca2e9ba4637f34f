package scoring

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/zeebo/xxh3"
)

// batchTokens returns n random tokens over the full u32 range, with runs of 0 and 0xFFFFFFFF (the
// extremes of every partial product) and of realistic ids mixed in.
func batchTokens(rng *rand.Rand, n int) []uint32 {
	tokens := make([]uint32, n)
	for i := range tokens {
		switch rng.IntN(8) {
		case 0:
			tokens[i] = 0xFFFFFFFF
		case 1:
			tokens[i] = 0
		case 2:
			tokens[i] = rng.Uint32N(200000)
		default:
			tokens[i] = rng.Uint32()
		}
	}
	return tokens
}

func batchSeed(rng *rand.Rand, i int) uint64 {
	seeds := []uint64{0, Seed, ^uint64(0), 1 << 63, DeriveSeed("lora", "")}
	if i%2 == 0 {
		return seeds[i/2%len(seeds)]
	}
	return rng.Uint64()
}

// TestBatchHashMatchesScalar: each vector kernel the CPU has gives hash16Tokens (and XXH3 itself) for
// every block it takes and ChainStep from the given value, or from the first block, for the chain,
// takes every whole group of its 8 (AVX-512) or 4 (AVX2) blocks, and writes nothing past them.
func TestBatchHashMatchesScalar(t *testing.T) {
	if !haveBatchHash {
		t.Skip("no batched block hash on this CPU")
	}
	defer func() { batchWide = haveBatchAVX512 }()
	for _, wide := range []bool{true, false} {
		if wide && !haveBatchAVX512 {
			continue
		}
		batchWide = wide
		t.Run(map[bool]string{true: "avx512", false: "avx2"}[wide], testBatchHash)
	}
}

func testBatchHash(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	g := batchBlocks()
	for i := range 400 {
		blocks := i % 41
		tokens := batchTokens(rng, 16*blocks+rng.IntN(16))
		seed, prev := batchSeed(rng, i), rng.Uint64()
		const sentinel = 0x5a5a5a5a5a5a5a5a
		local, chain := make([]uint64, blocks+1), make([]uint64, blocks+1)
		for j := range local {
			local[j], chain[j] = sentinel, sentinel
		}
		start := i%3 == 0
		done, last := hashChainBatch(tokens, seed, prev, start, local[:blocks], chain[:blocks])
		if done != blocks/g*g {
			t.Fatalf("%d blocks: kernel took %d", blocks, done)
		}
		want := prev
		for b := range done {
			blk := tokens[16*b : 16*b+16]
			var buf []byte
			for _, tok := range blk {
				buf = binary.LittleEndian.AppendUint32(buf, tok)
			}
			h := hash16Tokens((*[16]uint32)(blk), seed)
			if x := xxh3.HashSeed(buf, seed); h != x {
				t.Fatalf("hash16Tokens %v seed %d: %d, XXH3 %d", blk, seed, h, x)
			}
			if want = ChainStep(want, h); b == 0 && start {
				want = h
			}
			if local[b] != h || chain[b] != want {
				t.Fatalf("%d blocks, seed %d, start %v, block %d: kernel %d %d, scalar %d %d",
					blocks, seed, start, b, local[b], chain[b], h, want)
			}
		}
		if last != want {
			t.Fatalf("%d blocks: kernel returned chain %d, want %d", blocks, last, want)
		}
		for j := done; j < len(local); j++ {
			if local[j] != sentinel || chain[j] != sentinel {
				t.Fatalf("%d blocks: kernel wrote block %d", blocks, j)
			}
		}
	}
}

// promptHashesScalar is PromptHashes with the vector kernel switched off.
func promptHashesScalar(local, chain []uint64, tokens []uint32, blockSize int, seed uint64) ([]uint64, []uint64) {
	defer func(on bool) { batchHash = on }(batchHash)
	batchHash = false
	return PromptHashes(local, chain, tokens, blockSize, seed)
}

// TestPromptHashesBatchMatchesScalar: PromptHashes gives the two scalar passes' values with the vector
// kernel on and off, for every prompt length up to 40 blocks, with and without a partial block.
func TestPromptHashesBatchMatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 41 * 4 {
		blocks, extra := i/4, []int{0, 1, 8, 15}[i%4]
		tokens := batchTokens(rng, 16*blocks+extra)
		seed := batchSeed(rng, i)
		wantLocal := LocalBlockHashes([]uint64{1}, tokens, 16, seed, nil)
		wantChain := ChainHashes([]uint64{2, 3}, wantLocal[1:])
		gotLocal, gotChain := PromptHashes([]uint64{1}, []uint64{2, 3}, tokens, 16, seed)
		scLocal, scChain := promptHashesScalar([]uint64{1}, []uint64{2, 3}, tokens, 16, seed)
		if !slices.Equal(gotLocal, wantLocal) || !slices.Equal(gotChain, wantChain) {
			t.Fatalf("%d tokens, seed %d: PromptHashes %v %v, two passes %v %v", len(tokens), seed, gotLocal, gotChain, wantLocal, wantChain)
		}
		if !slices.Equal(scLocal, wantLocal) || !slices.Equal(scChain, wantChain) {
			t.Fatalf("%d tokens, seed %d: scalar PromptHashes %v %v, two passes %v %v", len(tokens), seed, scLocal, scChain, wantLocal, wantChain)
		}
	}
}

// FuzzPromptHashesBatch: the vector and scalar PromptHashes agree on any tokens and seed.
func FuzzPromptHashesBatch(f *testing.F) {
	f.Add(make([]byte, 4*16*9), uint64(0))
	f.Add(slices.Repeat([]byte{0xff}, 4*16*17+12), ^uint64(0))
	f.Add([]byte("a prompt shorter than one block"), Seed)
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		tokens := make([]uint32, len(data)/4)
		for i := range tokens {
			tokens[i] = binary.LittleEndian.Uint32(data[4*i:])
		}
		gotLocal, gotChain := PromptHashes(nil, nil, tokens, 16, seed)
		wantLocal, wantChain := promptHashesScalar(nil, nil, tokens, 16, seed)
		if !slices.Equal(gotLocal, wantLocal) || !slices.Equal(gotChain, wantChain) {
			t.Fatalf("seed %d: %v %v, scalar %v %v", seed, gotLocal, gotChain, wantLocal, wantChain)
		}
	})
}

// BenchmarkPromptHashesBatch: one op is PromptHashes of a prompt of B 16-token blocks, with the vector
// kernel (where the CPU has it) and with the scalar loop, short prompts included because their
// blocks past the last whole group of 8 take the scalar loop.
func BenchmarkPromptHashesBatch(b *testing.B) {
	for _, blocks := range []int{7, 20, 100, 512} {
		tokens := randTokens(16 * blocks)
		local, chain := make([]uint64, 0, blocks), make([]uint64, 0, blocks)
		for _, kernel := range []bool{true, false} {
			name := fmt.Sprintf("B=%d/batch=%v", blocks, kernel && haveBatchHash)
			b.Run(name, func(b *testing.B) {
				defer func(on bool) { batchHash = on }(batchHash)
				batchHash = kernel && haveBatchHash
				for range b.N {
					local, chain = PromptHashes(local[:0], chain[:0], tokens, 16, Seed)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*blocks), "ns/block")
			})
		}
	}
}

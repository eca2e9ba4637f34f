//go:build amd64

package scoring

import "golang.org/x/sys/cpu"

// The batched block hash (xxh3batch_amd64.s) computes hash16Tokens for 8 blocks at once with AVX-512:
// a vector lane holds one XXH3 product of one block, not one block. Each pair of blocks is interleaved
// (unpack low/high qwords) into a vector of their even words and one of their odd words, the four
// 64×64→128 products of a vector pair are built from 32×32→64 multiplies and folded, the folds are
// summed per block across 128-bit chunks, which leaves block b's accumulator in lane b, and the
// avalanche runs on all eight lanes. The prefix chain of a group runs in the scalar unit while the
// next group's vector work is in flight. AVX-512DQ is needed for the 64-bit multiply of the avalanche.
//
// Without AVX-512, hashChain16x4AVX2 does the same 4 blocks at a time in 256-bit vectors, the
// avalanche's 64-bit multiply built from 32-bit ones.
var haveBatchHash = haveBatchAVX512 || cpu.X86.HasAVX2

// batchWide selects the AVX-512 kernel; a variable so that tests can run the AVX2 one where both exist.
var batchWide = haveBatchAVX512

var haveBatchAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ

// batchBlocks is the blocks a kernel step hashes: 8 with AVX-512, 4 with AVX2.
func batchBlocks() int {
	if batchWide {
		return 8
	}
	return 4
}

//go:noescape
func hashChain16x4AVX2(tokens *uint32, groups int, keys *[8]uint64, prev uint64, local *uint64, chain *uint64, start bool) uint64

//go:noescape
func hashChain16x8AVX512(tokens *uint32, groups int, keys *[8]uint64, prev uint64, local *uint64, chain *uint64, start bool) uint64

// hashChainBatch hashes as many whole groups of batchBlocks() blocks of 16 tokens as tokens, local and
// chain hold: block i's hash16Tokens with seed to local[i], its chain value to chain[i], continued from prev or,
// when start is set, begun at block 0 (chain[0] = local[0], prev unused). It returns the number of
// blocks done and the last chain value (prev when none).
func hashChainBatch(tokens []uint32, seed, prev uint64, start bool, local, chain []uint64) (int, uint64) {
	g := batchBlocks()
	groups := min(len(tokens)/(g*16), len(local)/g, len(chain)/g)
	if groups == 0 {
		return 0, prev
	}
	keys := wordKeys(seed)
	if !batchWide {
		return g * groups, hashChain16x4AVX2(&tokens[0], groups, &keys, prev, &local[0], &chain[0], start)
	}
	return g * groups, hashChain16x8AVX512(&tokens[0], groups, &keys, prev, &local[0], &chain[0], start)
}

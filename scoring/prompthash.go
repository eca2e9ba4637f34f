package scoring

import "slices"

// batchHash selects the batched block hash kernel (xxh3batch_amd64.s) where the CPU has one; tests
// switch it off to check both paths.
var batchHash = haveBatchHash

// PromptHashes appends the local block hashes and their prefix chain (ChainHashes) of tokens to local
// and chain in one pass: the same values as LocalBlockHashes(local, tokens, blockSize, seed, nil) followed
// by ChainHashes(chain, local's new part). The chain step of block i depends on block i−1's chain value,
// so a separate pass is bound by the latency of that chain; interleaved with the independent block
// hashes, the out-of-order core overlaps the two. With AVX-512 (xxh3batch_amd64.s) the block hashes of
// whole groups of 8 blocks are computed 8 at a time and the chain runs beside them, with AVX2 4 at a
// time (BenchmarkPromptHashesBatch on a Zen 3, 512 blocks: 3.3–3.5 ns a block against 6.2–7.0 for the
// scalar loop); the blocks past the last whole group take the scalar loop.
func PromptHashes(local, chain []uint64, tokens []uint32, blockSize int, seed uint64) ([]uint64, []uint64) {
	if blockSize != 16 {
		start := len(local)
		local = LocalBlockHashes(local, tokens, blockSize, seed, nil)
		return local, ChainHashes(chain, local[start:])
	}
	n := len(tokens) / 16
	local, chain = slices.Grow(local, n), slices.Grow(chain, n)
	l, s := local[len(local):len(local)+n], chain[len(chain):len(chain)+n]
	if n == 0 {
		return local, chain
	}
	// hash16Tokens is too big for the inliner; as a call, the chain value would round-trip through the
	// stack on every block, adding a store-to-load delay to the chain's critical path. The loop therefore
	// computes the block hash in place (the same arithmetic; TestPromptHashesMatchTwoPasses holds them
	// equal), with the seed-dependent keys hoisted.
	k0, k1, k2, k3 := xxKey000+seed, xxKey008-seed, xxKey016+seed, xxKey024-seed
	k4, k5, k6, k7 := xxKey032+seed, xxKey040-seed, xxKey048+seed, xxKey056-seed
	p1 := uint64(xxPrime64x1)
	p64 := 64 * p1 // wraps, as in hash16Tokens
	var i int
	var prev uint64
	if batchHash && n >= 8 { // below 8 blocks the call costs more than the AVX2 kernel saves
		i, prev = hashChainBatch(tokens[:16*n], seed, 0, true, l, s)
	}
	if i == 0 {
		prev = hash16Tokens((*[16]uint32)(tokens), seed)
		l[0], s[0] = prev, prev
		i = 1
	}
	for ; i < n; i++ {
		t := (*[16]uint32)(tokens[16*i:])
		acc := p64
		acc += xxMulFold(lane(t, 2)^k4, lane(t, 3)^k5)
		acc += xxMulFold(lane(t, 4)^k6, lane(t, 5)^k7)
		acc += xxMulFold(lane(t, 0)^k0, lane(t, 1)^k1)
		acc += xxMulFold(lane(t, 6)^k2, lane(t, 7)^k3)
		h := xxAvalanche(acc)
		l[i] = h
		prev = ChainStep(prev, h)
		s[i] = prev
	}
	return local[:len(local)+n], chain[:len(chain)+n]
}

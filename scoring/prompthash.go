package scoring

import "slices"

// PromptHashes appends the local block hashes and the chained sequence hashes of tokens to local and seq
// in one pass: the same values as LocalBlockHashes(local, tokens, blockSize, seed, nil) followed by
// SequenceHashes(seq, local's new part). The chain step of block i depends on block i−1's sequence hash,
// so a separate pass is bound by the latency of that chain; interleaved with the independent block
// hashes, the out-of-order core overlaps the two and the pair costs little more than the block hashes.
func PromptHashes(local, seq []uint64, tokens []uint32, blockSize int, seed uint64) ([]uint64, []uint64) {
	if blockSize != 16 {
		start := len(local)
		local = LocalBlockHashes(local, tokens, blockSize, seed, nil)
		return local, SequenceHashes(seq, local[start:])
	}
	n := len(tokens) / 16
	local, seq = slices.Grow(local, n), slices.Grow(seq, n)
	l, s := local[len(local):len(local)+n], seq[len(seq):len(seq)+n]
	var prev uint64
	for i := range l {
		h := hash16Tokens((*[16]uint32)(tokens[16*i:]), seed)
		l[i] = h
		if i == 0 {
			prev = h
		} else {
			prev = hashPair(prev, h, Seed)
		}
		s[i] = prev
	}
	return local[:len(local)+n], seq[:len(seq)+n]
}

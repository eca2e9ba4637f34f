package scoring

import (
	"encoding/binary"
	"math/bits"
	"slices"

	"github.com/zeebo/xxh3"
)

// Seed is Dynamo's XXH3_SEED: the seed of every local block hash without LoRA or salt, and of every
// sequence (chain) hash.
const Seed uint64 = 1337

// saltSeed is the XXH3 seed of the cache-namespace (salt) contribution to the block-hash seed.
const saltSeed uint64 = 1

// stackBlockBytes is the stack buffer that hashes one block without allocating: 64 tokens and four
// mm hashes. It is small on purpose: Go zeroes the whole array on every call, and a 4 KiB buffer cost
// four times the hash itself.
const stackBlockBytes = 288

// DeriveSeed returns the local-block-hash seed for a LoRA adapter name and a cache namespace (salt):
// 1337 + XXH3(lora, 0) + XXH3(namespace, 1), each term only when its string is non-empty, with wrapping
// addition.
func DeriveSeed(loraName, cacheNamespace string) uint64 {
	seed := Seed
	if loraName != "" {
		seed += xxh3.HashString(loraName)
	}
	if cacheNamespace != "" {
		seed += xxh3.HashStringSeed(cacheNamespace, saltSeed)
	}
	return seed
}

// BlockHash is the local hash of one block: its tokens as u32le, then (legacy multimodal scheme) the
// block's mm_hash values sorted ascending as u64le, hashed with XXH3-64 and seed. mmHashes is not
// modified; offsets of multimodal objects never enter the hash.
func BlockHash(tokens []uint32, mmHashes []uint64, seed uint64) uint64 {
	if len(tokens) == 16 && len(mmHashes) == 0 {
		return hash16Tokens((*[16]uint32)(tokens), seed)
	}
	n := 4*len(tokens) + 8*len(mmHashes)
	if n > stackBlockBytes {
		h, _ := blockHashBuf(make([]byte, 0, n), tokens, mmHashes, seed)
		return h
	}
	var stack [stackBlockBytes]byte
	h, _ := blockHashBuf(stack[:0], tokens, mmHashes, seed)
	return h
}

// blockHashBuf is BlockHash writing into buf (reset to length 0); it returns buf for reuse.
func blockHashBuf(buf []byte, tokens []uint32, mmHashes []uint64, seed uint64) (uint64, []byte) {
	buf = buf[:0]
	for _, t := range tokens {
		buf = binary.LittleEndian.AppendUint32(buf, t)
	}
	switch len(mmHashes) {
	case 0:
	case 1:
		buf = binary.LittleEndian.AppendUint64(buf, mmHashes[0])
	default:
		sorted := slices.Clone(mmHashes)
		slices.Sort(sorted)
		for _, h := range sorted {
			buf = binary.LittleEndian.AppendUint64(buf, h)
		}
	}
	return xxh3.HashSeed(buf, seed), buf
}

// LocalBlockHashes appends to dst the local hash of every full block of tokens (a trailing partial block
// is dropped) and returns the extended slice. blockMM, when non-nil, gives the legacy mm_hash suffix of
// block i as blockMM[i] (nil or empty for blocks without images); it may be shorter than the block count.
func LocalBlockHashes(dst []uint64, tokens []uint32, blockSize int, seed uint64, blockMM [][]uint64) []uint64 {
	if blockSize <= 0 {
		return dst
	}
	n := len(tokens) / blockSize
	dst = slices.Grow(dst, n)
	// One buffer for every block: no per-block zeroing, no allocation for blocks up to the stack size.
	var stack [4 * 256]byte
	buf := stack[:0]
	if 4*blockSize > len(stack) {
		buf = make([]byte, 0, 4*blockSize+64)
	}
	var h uint64
	for i := 0; i < n; i++ {
		var mm []uint64
		if i < len(blockMM) {
			mm = blockMM[i]
		}
		blk := tokens[i*blockSize : (i+1)*blockSize]
		if blockSize == 16 && len(mm) == 0 {
			// The common block size: XXH3 straight from the tokens (xxh3fast.go), no byte buffer.
			dst = append(dst, hash16Tokens((*[16]uint32)(blk), seed))
			continue
		}
		h, buf = blockHashBuf(buf, blk, mm, seed)
		dst = append(dst, h)
	}
	return dst
}

// EagleBlockHashes is LocalBlockHashes for Eagle speculative decoding: each window is blockSize+1 tokens
// advanced by blockSize, so the last token of a window is the first of the next; a block is hashed only
// when its whole window is present.
func EagleBlockHashes(dst []uint64, tokens []uint32, blockSize int, seed uint64) []uint64 {
	if blockSize <= 0 {
		return dst
	}
	for start := 0; start+blockSize+1 <= len(tokens); start += blockSize {
		dst = append(dst, BlockHash(tokens[start:start+blockSize+1], nil, seed))
	}
	return dst
}

// ChainHashes appends the prefix chain of every local hash to dst: chain[0] = local[0], chain[i] =
// ChainStep(chain[i-1], local[i]). The load tracker and approximate mode key a prompt's blocks by it.
func ChainHashes(dst []uint64, local []uint64) []uint64 {
	return chained(dst, local, ChainStep)
}

// chained appends the chain of local under step to dst: local[0], then step(previous, local[i]).
func chained(dst, local []uint64, step func(prev, local uint64) uint64) []uint64 {
	dst = slices.Grow(dst, len(local))
	var prev uint64
	for i, h := range local {
		if i == 0 {
			prev = h
		} else {
			prev = step(prev, h)
		}
		dst = append(dst, prev)
	}
	return dst
}

// chainMul is odd, so multiplying by it is a bijection of uint64 (2^64 · golden ratio, rounded to odd).
const chainMul = 0x9e3779b97f4a7c15

// ChainStep extends a prefix chain by one block's local hash. Like the sequence hash it identifies a
// block together with every block before it, which is all the load tracker and approximate mode need of
// a key: two prompts agree on chain[i] only when they agree on local[0…i] (up to 64-bit collisions of
// well-mixed values). For a fixed block the step is a bijection of the previous value (xor, an odd
// multiply, a rotation), so different prefixes followed by the same block never meet. It costs one
// multiply of latency per block where the sequence hash (XXH3 of the pair) costs some fourteen cycles, and
// a prompt's chain is a serial dependency: it bounded the routing path's hashing (docs/benchmarks.md).
func ChainStep(prev, local uint64) uint64 {
	return bits.RotateLeft64((prev^local)*chainMul, 29)
}

// NextSequenceHash chains one local hash onto the previous sequence hash:
// XXH3(u64le(prev) || u64le(local), 1337).
func NextSequenceHash(prev, local uint64) uint64 {
	return hashPair(prev, local, Seed)
}

// SequenceHashes appends the chained sequence hash of every local hash to dst: seq[0] = local[0],
// seq[i] = NextSequenceHash(seq[i-1], local[i]).
func SequenceHashes(dst []uint64, local []uint64) []uint64 {
	return chained(dst, local, NextSequenceHash)
}

// Pad-value constants of the canonical multimodal scheme, shared with SGLang.
const (
	MMPadShift    = 1_000_000
	MMPadHashMask = 1<<30 - 1
)

// PadValue maps an image's mm_hash to the token value that stands for every one of its positions in the
// routing tokens: 1_000_000 + (mm_hash & (2^30 - 1)).
func PadValue(mmHash uint64) uint32 {
	return uint32(MMPadShift + (mmHash & MMPadHashMask))
}

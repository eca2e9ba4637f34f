package scoring

import "math/bits"

// Specialised XXH3-64 (with seed) for the two shapes on the routing hot path: a block of 16 u32 tokens
// (64 bytes) and a chain step (two u64, 16 bytes). They compute exactly XXH3_64bits_withSeed for those
// lengths (the 17–128 and 9–16 byte branches of the algorithm) but read the tokens in place, without
// building a byte buffer and without the generic length dispatch. TestFastHashesMatchXXH3 checks them
// against github.com/zeebo/xxh3 on random inputs and seeds; the values are the spec's.
//
// The constants are XXH3's default secret read as little-endian u64 at the offsets named, and PRIME64_1.

const (
	xxPrime64x1 = 11400714785074694791

	xxKey000 = 0xbe4ba423396cfeb8
	xxKey008 = 0x1cad21f72c81017c
	xxKey016 = 0xdb979083e96dd4de
	xxKey024 = 0x1f67b3b7a4a44072
	xxKey032 = 0x78e5c0cc4ee679cb
	xxKey040 = 0x2172ffcc7dd05a82
	xxKey048 = 0x8e2443f7744608b8
	xxKey056 = 0x4c263a81e69035e0
)

func xxMulFold(x, y uint64) uint64 {
	hi, lo := bits.Mul64(x, y)
	return hi ^ lo
}

func xxAvalanche(x uint64) uint64 {
	x ^= x >> 37
	x *= 0x165667919e3779f9
	return x ^ x>>32
}

// lane is the little-endian u64 at byte offset 8*i of a block of u32 tokens.
func lane(t *[16]uint32, i int) uint64 {
	return uint64(t[2*i]) | uint64(t[2*i+1])<<32
}

// hash16Tokens is XXH3-64 with seed of the 64 bytes of 16 tokens as u32le (the 33–64 byte branch).
func hash16Tokens(t *[16]uint32, seed uint64) uint64 {
	p1 := uint64(xxPrime64x1)
	acc := 64 * p1 // wraps, as in the spec
	acc += xxMulFold(lane(t, 2)^(xxKey032+seed), lane(t, 3)^(xxKey040-seed))
	acc += xxMulFold(lane(t, 4)^(xxKey048+seed), lane(t, 5)^(xxKey056-seed))
	acc += xxMulFold(lane(t, 0)^(xxKey000+seed), lane(t, 1)^(xxKey008-seed))
	acc += xxMulFold(lane(t, 6)^(xxKey016+seed), lane(t, 7)^(xxKey024-seed))
	return xxAvalanche(acc)
}

// wordKeys are the keys hash16Tokens xors with the block's eight u64 words, in word order.
func wordKeys(seed uint64) [8]uint64 {
	return [8]uint64{
		xxKey000 + seed, xxKey008 - seed, xxKey032 + seed, xxKey040 - seed,
		xxKey048 + seed, xxKey056 - seed, xxKey016 + seed, xxKey024 - seed,
	}
}

// hashPair is XXH3-64 with seed of u64le(a) || u64le(b) (the 9–16 byte branch).
func hashPair(a, b, seed uint64) uint64 {
	lo := a ^ (xxKey024 ^ xxKey032 + seed)
	hi := b ^ (xxKey040 ^ xxKey048 - seed)
	return xxAvalanche(16 + bits.ReverseBytes64(lo) + hi + xxMulFold(lo, hi))
}

package scoring

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/zeebo/xxh3"
)

func TestFastHashesMatchXXH3(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	seeds := []uint64{0, Seed, DeriveSeed("lora", ""), DeriveSeed("", "tenant"), ^uint64(0)}
	for i := 0; i < 20000; i++ {
		var blk [16]uint32
		var buf []byte
		for j := range blk {
			blk[j] = rng.Uint32()
			if i%3 == 0 {
				blk[j] %= 200000 // realistic token ids
			}
			buf = binary.LittleEndian.AppendUint32(buf, blk[j])
		}
		seed := seeds[i%len(seeds)]
		if i%7 == 0 {
			seed = rng.Uint64()
		}
		if got, want := hash16Tokens(&blk, seed), xxh3.HashSeed(buf, seed); got != want {
			t.Fatalf("block %v seed %d: %d, want %d", blk, seed, got, want)
		}
		a, b := rng.Uint64(), rng.Uint64()
		var pair [16]byte
		binary.LittleEndian.PutUint64(pair[:8], a)
		binary.LittleEndian.PutUint64(pair[8:], b)
		if got, want := hashPair(a, b, seed), xxh3.HashSeed(pair[:], seed); got != want {
			t.Fatalf("pair %d,%d seed %d: %d, want %d", a, b, seed, got, want)
		}
	}
	// The spec vectors through the fast paths.
	if got := hashPair(14643705804678351452, 16777012769546811212, Seed); got != 4945711292740353085 {
		t.Fatalf("chain vector: %d", got)
	}
}

// TestPromptHashesMatchTwoPasses: the fused pass gives the values of LocalBlockHashes then ChainHashes,
// appended after existing elements, for the fast block size and others, with a trailing partial block.
func TestPromptHashesMatchTwoPasses(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	for _, bs := range []int{16, 1, 4, 32} {
		for _, n := range []int{0, 1, 15, 16, 17, 100, 16*37 + 5} {
			tokens := make([]uint32, n)
			for i := range tokens {
				tokens[i] = rng.Uint32N(200000)
			}
			seed := DeriveSeed("lora", "")
			wantLocal := LocalBlockHashes([]uint64{1, 2}, tokens, bs, seed, nil)
			wantSeq := ChainHashes([]uint64{3}, wantLocal[2:])
			gotLocal, gotSeq := PromptHashes([]uint64{1, 2}, []uint64{3}, tokens, bs, seed)
			if !slices.Equal(gotLocal, wantLocal) || !slices.Equal(gotSeq, wantSeq) {
				t.Fatalf("block size %d, %d tokens: fused %v %v, two passes %v %v", bs, n, gotLocal, gotSeq, wantLocal, wantSeq)
			}
		}
	}
}

// TestChainIdentifiesPrefixes: two prompts agree on chain[i] exactly when they agree on every block up
// to i — a shared prefix gives equal values, a different block anywhere before gives different values at
// every later position, also when every later block is the same.
func TestChainIdentifiesPrefixes(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	seen := make(map[uint64]string)
	for trial := range 2000 {
		n := 1 + rng.IntN(40)
		a := make([]uint64, n)
		for i := range a {
			a[i] = rng.Uint64()
		}
		b := slices.Clone(a)
		at := rng.IntN(n) // b differs from a in block at only
		b[at] ^= 1 << rng.IntN(64)
		ca, cb := ChainHashes(nil, a), ChainHashes(nil, b)
		for i := range n {
			if same := ca[i] == cb[i]; same != (i < at) {
				t.Fatalf("trial %d: blocks differ at %d, chains equal at %d: %v", trial, at, i, same)
			}
		}
		// No value repeats across unrelated prompts and positions.
		for i, h := range ca {
			key := fmt.Sprintf("%d/%d", trial, i)
			if prev, ok := seen[h]; ok {
				t.Fatalf("chain value %x at %s and %s", h, key, prev)
			}
			seen[h] = key
		}
	}
}

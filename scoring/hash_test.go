package scoring

import (
	"encoding/binary"
	"testing"

	"github.com/zeebo/xxh3"
)

// Every Dynamo hashing test vector that concerns this package.
func TestHashVectors(t *testing.T) {
	tests := []struct {
		name string
		got  uint64
		want uint64
	}{
		{"1 test data", xxh3.HashSeed([]byte("test data"), Seed), 13226331709069118873},
		{"2 tokens 1..4", BlockHash([]uint32{1, 2, 3, 4}, nil, Seed), 14643705804678351452},
		{"3 tokens 5..8", BlockHash([]uint32{5, 6, 7, 8}, nil, Seed), 16777012769546811212},
		{"4 chain", NextSequenceHash(14643705804678351452, 16777012769546811212), 4945711292740353085},
		{"5 legacy mm suffix", BlockHash([]uint32{1, 2, 3, 4}, []uint64{0x1234}, Seed), 669095413716296041},
		{"6 pad 0", uint64(PadValue(0)), 1000000},
		{"7 url mm_hash", xxh3.HashString("https://example.com/cat.png"), 0x2f97f006c0e2eb2e},
		{"8 pad url", uint64(PadValue(0x2f97f006c0e2eb2e)), 15871342},
		{"derived pad", uint64(PadValue(9533257059414191570)), 49115154},
		{"derived normalized block", BlockHash([]uint32{10, 20, 49115154, 49115154}, nil, Seed), 71881790567603244},
		{"derived raw image block", BlockHash([]uint32{10, 20, 151655, 151655}, nil, Seed), 7076040045504640663},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Fatalf("got %d, want %d", tc.got, tc.want)
			}
		})
	}
}

func TestLocalAndSequenceHashes(t *testing.T) {
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9} // the trailing 9 is a partial block
	local := LocalBlockHashes(nil, tokens, 4, Seed, nil)
	if len(local) != 2 || local[0] != 14643705804678351452 || local[1] != 16777012769546811212 {
		t.Fatalf("local = %v", local)
	}
	seq := SequenceHashes(nil, local)
	if seq[0] != local[0] || seq[1] != 4945711292740353085 {
		t.Fatalf("seq = %v", seq)
	}
	if got := LocalBlockHashes(nil, tokens, 0, Seed, nil); len(got) != 0 {
		t.Fatalf("block size 0 hashed %d blocks", len(got))
	}
}

func TestLegacyMMSuffixSortedWithDuplicates(t *testing.T) {
	toks := []uint32{1, 2, 3, 4}
	a := BlockHash(toks, []uint64{9, 3, 3}, Seed)
	b := BlockHash(toks, []uint64{3, 9, 3}, Seed)
	if a != b {
		t.Fatal("suffix is not order independent")
	}
	var buf []byte
	for _, v := range toks {
		buf = binary.LittleEndian.AppendUint32(buf, v)
	}
	for _, h := range []uint64{3, 3, 9} {
		buf = binary.LittleEndian.AppendUint64(buf, h)
	}
	if want := xxh3.HashSeed(buf, Seed); a != want {
		t.Fatalf("got %d want %d", a, want)
	}
	if BlockHash(toks, []uint64{3, 9}, Seed) == a {
		t.Fatal("duplicates must be kept")
	}
	in := []uint64{9, 3}
	BlockHash(toks, in, Seed)
	if in[0] != 9 {
		t.Fatal("BlockHash sorted its input in place")
	}
}

func TestDeriveSeed(t *testing.T) {
	if DeriveSeed("", "") != Seed {
		t.Fatal("empty lora and salt must give 1337")
	}
	if got, want := DeriveSeed("adapter", ""), Seed+xxh3.HashString("adapter"); got != want {
		t.Fatalf("lora seed %d want %d", got, want)
	}
	if got, want := DeriveSeed("a", "tenant"), Seed+xxh3.HashString("a")+xxh3.HashStringSeed("tenant", 1); got != want {
		t.Fatalf("salt seed %d want %d", got, want)
	}
	toks := []uint32{1, 2, 3, 4}
	if BlockHash(toks, nil, DeriveSeed("adapter", "")) == BlockHash(toks, nil, Seed) {
		t.Fatal("lora must change the block hash")
	}
}

func TestEagleWindows(t *testing.T) {
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	got := EagleBlockHashes(nil, toks, 4, Seed)
	if len(got) != 2 {
		t.Fatalf("got %d windows", len(got))
	}
	if got[0] != BlockHash([]uint32{1, 2, 3, 4, 5}, nil, Seed) || got[1] != BlockHash([]uint32{5, 6, 7, 8, 9}, nil, Seed) {
		t.Fatal("eagle windows wrong")
	}
	if n := len(EagleBlockHashes(nil, toks[:8], 4, Seed)); n != 1 {
		t.Fatalf("8 tokens gave %d eagle blocks, want 1", n)
	}
}

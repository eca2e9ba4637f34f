package kvevents

import (
	"fmt"
	"testing"

	"github.com/kvroute/kvroute/scoring"
)

func TestRekeyText(t *testing.T) {
	ev := Event{Kind: Stored, BlockHashes: []uint64{11, 12}, TokenIDs: []uint32{1, 2, 3, 4, 5, 6, 7, 8}, BlockSize: 4}
	local, partial := Rekey(&ev, 4, scoring.Seed, nil)
	// Dynamo's block-hash vectors.
	if partial != 0 || len(local) != 2 || local[0] != 14643705804678351452 || local[1] != 16777012769546811212 {
		t.Fatalf("got %v partial %d", local, partial)
	}
}

func TestRekeyPartial(t *testing.T) {
	tests := []struct {
		name        string
		ev          Event
		bs          int
		wantBlocks  int
		wantPartial int
	}{
		{"short last block", Event{Kind: Stored, BlockHashes: []uint64{1, 2, 3}, TokenIDs: make([]uint32, 10), BlockSize: 4}, 4, 2, 1},
		{"no tokens", Event{Kind: Stored, BlockHashes: []uint64{1, 2}, BlockSize: 4}, 4, 0, 2},
		{"engine block size differs", Event{Kind: Stored, BlockHashes: []uint64{1, 2}, TokenIDs: make([]uint32, 32), BlockSize: 16}, 4, 0, 2},
		{"extra tokens ignored", Event{Kind: Stored, BlockHashes: []uint64{1}, TokenIDs: make([]uint32, 6), BlockSize: 4}, 4, 1, 0},
		{"block size from router", Event{Kind: Stored, BlockHashes: []uint64{1, 2}, TokenIDs: make([]uint32, 8)}, 4, 2, 0},
		{"removed is not rekeyed", Event{Kind: Removed, BlockHashes: []uint64{1}}, 4, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			local, partial := Rekey(&tc.ev, tc.bs, scoring.Seed, nil)
			if len(local) != tc.wantBlocks || partial != tc.wantPartial {
				t.Fatalf("got %d blocks, %d partial; want %d, %d", len(local), partial, tc.wantBlocks, tc.wantPartial)
			}
		})
	}
}

// TestRekeyImages is the vector of Dynamo's vllm_event_normalizes_to_frontend_pad_value_hash test.
func TestRekeyImages(t *testing.T) {
	const img, mmHash = 151655, 9533257059414191570
	id := fmt.Sprintf("%016x", uint64(mmHash)) + "000000000000000000000000000000000000000000000000"
	ev := Event{
		Kind: Stored, BlockHashes: []uint64{99}, TokenIDs: []uint32{10, 20, img, img}, BlockSize: 4,
		ExtraKeys: [][]ExtraKey{{{Kind: ExtraMM, Str: id, Int: 2}}},
	}
	local, partial := RekeyImages(&ev, 4, scoring.Seed, img, 0, nil)
	if partial != 0 || len(local) != 1 {
		t.Fatalf("got %v, partial %d", local, partial)
	}
	pad := scoring.PadValue(mmHash)
	if pad != 49115154 {
		t.Fatalf("pad = %d", pad)
	}
	if want := scoring.BlockHash([]uint32{10, 20, pad, pad}, nil, scoring.Seed); local[0] != want || want != 71881790567603244 {
		t.Fatalf("normalized hash %d, want %d (= 71881790567603244)", local[0], want)
	}
	if ev.TokenIDs[2] != img {
		t.Fatal("RekeyImages modified the event")
	}
	// Without normalization: the legacy suffix scheme, never the plain token hash.
	legacy, _ := Rekey(&ev, 4, scoring.Seed, nil)
	if legacy[0] != scoring.BlockHash(ev.TokenIDs, []uint64{mmHash}, scoring.Seed) || legacy[0] == 7076040045504640663 {
		t.Fatalf("legacy hash %d", legacy[0])
	}
}

func TestNormalizeImageRuns(t *testing.T) {
	const img = 99
	block := []uint32{img, 1, img, img, 2, img, 3, img}
	NormalizeImageRuns(block, img, []uint64{0, 1})
	p0, p1 := scoring.PadValue(0), scoring.PadValue(1)
	want := []uint32{p0, 1, p1, p1, 2, p1, 3, p1}
	for i := range want {
		if block[i] != want[i] {
			t.Fatalf("got %v want %v", block, want)
		}
	}
}

func TestParseMMIdentifier(t *testing.T) {
	tests := []struct {
		id   string
		want uint64
		ok   bool
	}{
		{"2f97f006c0e2eb2e000000000000000000000000000000000000000000000000", 0x2f97f006c0e2eb2e, true},
		{"2F97F006C0E2EB2E000000000000000000000000000000000000000000000000", 0x2f97f006c0e2eb2e, true},
		{"2f97f006c0e2eb2e", 0, false},
		{"sku-1234-a", 0, false},
		{"lora:2f97f006c0e2eb2e0000000000000000000000000000000000000000000", 0, false},
	}
	for _, tc := range tests {
		got, ok := ParseMMIdentifier(tc.id)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%q: got %#x %v", tc.id, got, ok)
		}
	}
}

func TestRekeyGoldenMM(t *testing.T) {
	var b Batch
	if err := Decode(loadHex(t, "stored_mm_map"), &b); err != nil {
		t.Fatal(err)
	}
	local, partial := RekeyImages(&b.Events[0], 4, scoring.Seed, 151655, 0, nil)
	pad := scoring.PadValue(0x2f97f006c0e2eb2e)
	if partial != 0 || len(local) != 2 ||
		local[0] != scoring.BlockHash([]uint32{10, 20, pad, pad}, nil, scoring.Seed) ||
		local[1] != scoring.BlockHash([]uint32{pad, pad, pad, pad}, nil, scoring.Seed) {
		t.Fatalf("got %v partial %d", local, partial)
	}
}

// TestCacheSalt reads the salt of vLLM's block-0 extra keys: after the LoRA name and the multimodal
// tuples, absent on continuations and on unsalted requests.
func TestCacheSalt(t *testing.T) {
	s := func(v string) ExtraKey { return ExtraKey{Kind: ExtraString, Str: v} }
	mm := ExtraKey{Kind: ExtraMM, Str: "img", Int: 3}
	for _, c := range []struct {
		name string
		ev   Event
		want string
	}{
		{"salt only", Event{Kind: Stored, ExtraKeys: [][]ExtraKey{{s("tenant-a")}, nil}}, "tenant-a"},
		{"lora and salt", Event{Kind: Stored, LoraName: "ad", ExtraKeys: [][]ExtraKey{{s("ad"), mm, s("tenant-a")}}}, "tenant-a"},
		{"lora only", Event{Kind: Stored, LoraName: "ad", ExtraKeys: [][]ExtraKey{{s("ad"), mm}}}, ""},
		{"salt equal to the lora name", Event{Kind: Stored, LoraName: "x", ExtraKeys: [][]ExtraKey{{s("x"), s("x")}}}, "x"},
		{"images only", Event{Kind: Stored, ExtraKeys: [][]ExtraKey{{mm}}}, ""},
		{"none", Event{Kind: Stored, ExtraKeys: [][]ExtraKey{nil}}, ""},
		{"no extra keys", Event{Kind: Stored}, ""},
		{"continuation", Event{Kind: Stored, HasParent: true, ParentHash: 7, ExtraKeys: [][]ExtraKey{{s("tenant-a")}}}, ""},
		{"removed", Event{Kind: Removed}, ""},
	} {
		if got := c.ev.CacheSalt(); got != c.want {
			t.Errorf("%s: salt %q, want %q", c.name, got, c.want)
		}
	}
}

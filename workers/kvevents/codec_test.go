package kvevents

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/scoring"
)

// loadHex reads a golden payload written by testdata/gen_fixtures.py.
func loadHex(t testing.TB, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name+".hex"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := hex.DecodeString(strings.Join(strings.Fields(string(raw)), ""))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return b
}

const (
	specHash = 15760518052499183552 // 0xdab89baa7b5857c0, kthena #1535 capture
	specTS   = 1700000000.5
	mmID     = "2f97f006c0e2eb2e000000000000000000000000000000000000000000000000"
)

// specStored is the BlockStored event of the golden examples.
func specStored() Event {
	return Event{
		Kind: Stored, BlockHashes: []uint64{specHash}, TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 4,
		Medium: "GPU", ExtraKeys: [][]ExtraKey{nil}, GroupIdx: 0, HasGroupIdx: true, SpecKind: "full_attention",
	}
}

func batchOf(dp uint32, hasDP bool, evs ...Event) *Batch {
	return &Batch{TS: specTS, Events: evs, DPRank: dp, HasDPRank: hasDP}
}

type golden struct {
	name   string
	layout Layout
	want   *Batch
	encode bool // the encoder must reproduce the fixture byte for byte
}

func goldens() []golden {
	removed := Event{Kind: Removed, BlockHashes: []uint64{specHash}, Medium: "GPU", HasGroupIdx: true}
	mm := Event{
		Kind: Stored, BlockHashes: []uint64{1, 200}, ParentHash: ^uint64(0), HasParent: true,
		TokenIDs:  []uint32{10, 20, 151655, 151655, 151655, 151655, 151655, 151655},
		BlockSize: 4, Medium: "GPU", HasGroupIdx: true, SpecKind: "full_attention",
		ExtraKeys: [][]ExtraKey{{{Kind: ExtraMM, Str: mmID, Int: 2}}, {{Kind: ExtraMM, Str: mmID, Int: -2}}},
	}
	v09 := Event{Kind: Stored, BlockHashes: []uint64{specHash}, TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 4}
	mixedStored := Event{
		Kind: Stored, BlockHashes: []uint64{0x18191a1b1c1d1e1f}, TokenIDs: []uint32{5, 6}, BlockSize: 2,
		LoraID: 7, HasLoraID: true, Medium: "CPU", Tier: scoring.MediumHostPinned, LoraName: "my-lora", Locality: "rack-1",
		ExtraKeys: [][]ExtraKey{{
			{Kind: ExtraString, Str: "my-lora"}, {Kind: ExtraString, Str: "salt-1"}, {Kind: ExtraBytes, Str: "\xab\xcd"},
		}},
	}
	return []golden{
		{"stored_map", LayoutMap, batchOf(0, true, specStored()), true},
		{"stored_array", LayoutArray, batchOf(0, true, specStored()), true},
		{"stored_v09", LayoutArray, batchOf(0, false, v09), false},
		{"removed_map", LayoutMap, batchOf(0, true, removed), true},
		{"cleared_map", LayoutMap, batchOf(0, true, Event{Kind: Cleared}), true},
		{"cleared_array", LayoutArray, batchOf(0, true, Event{Kind: Cleared}), true},
		{"stored_mm_map", LayoutMap, batchOf(1, true, mm), true},
		{"mixed_array", LayoutArray, batchOf(0, true,
			Event{Kind: Removed, BlockHashes: []uint64{^uint64(1)}, Medium: "GPU"}, mixedStored, Event{Kind: Cleared}), false},
	}
}

// sameBatch compares the exported content of two batches.
func sameBatch(t *testing.T, got, want *Batch) {
	t.Helper()
	if got.TS != want.TS || got.DPRank != want.DPRank || got.HasDPRank != want.HasDPRank {
		t.Fatalf("batch header: got ts=%v dp=%d/%v, want ts=%v dp=%d/%v",
			got.TS, got.DPRank, got.HasDPRank, want.TS, want.DPRank, want.HasDPRank)
	}
	if len(got.Events) != len(want.Events) {
		t.Fatalf("got %d events, want %d", len(got.Events), len(want.Events))
	}
	for i := range want.Events {
		g, w := exported(got.Events[i]), exported(want.Events[i])
		if !reflect.DeepEqual(g, w) {
			t.Errorf("event %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
}

// exported drops the reuse buffers and normalizes empty slices so DeepEqual compares content.
func exported(e Event) Event {
	e.ekBlocks, e.ekFlat, e.ekSpans = nil, nil, nil
	if len(e.BlockHashes) == 0 {
		e.BlockHashes = nil
	}
	if len(e.TokenIDs) == 0 {
		e.TokenIDs = nil
	}
	return e
}

func TestGoldenDecode(t *testing.T) {
	for _, tc := range goldens() {
		t.Run(tc.name, func(t *testing.T) {
			var b Batch
			if err := Decode(loadHex(t, tc.name), &b); err != nil {
				t.Fatal(err)
			}
			sameBatch(t, &b, tc.want)
		})
	}
}

func TestGoldenEncode(t *testing.T) {
	for _, tc := range goldens() {
		if !tc.encode {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			want := loadHex(t, tc.name)
			got := AppendBatch(nil, tc.want, tc.layout)
			if !bytes.Equal(got, want) {
				t.Fatalf("encoding differs\n got %x\nwant %x", got, want)
			}
		})
	}
}

func TestSpecSizes(t *testing.T) {
	if n := len(loadHex(t, "stored_map")); n != 188 {
		t.Errorf("§4.1 fixture is %d bytes, want 188", n)
	}
	if n := len(loadHex(t, "stored_array")); n != 66 {
		t.Errorf("§4.2 fixture is %d bytes, want 66", n)
	}
}

// TestRoundTrip re-encodes every decodable golden in both layouts and decodes it again.
func TestRoundTrip(t *testing.T) {
	for _, tc := range goldens() {
		for _, layout := range []Layout{LayoutMap, LayoutArray} {
			var b1, b2 Batch
			if err := Decode(loadHex(t, tc.name), &b1); err != nil {
				t.Fatal(err)
			}
			enc := AppendBatch(nil, &b1, layout)
			if err := Decode(enc, &b2); err != nil {
				t.Fatalf("%s/%d: %v (%x)", tc.name, layout, err, enc)
			}
			sameBatch(t, &b2, tc.want)
		}
	}
}

func TestEncodeInts(t *testing.T) {
	tests := []struct {
		v    int64
		want string
	}{
		{0, "00"}, {127, "7f"}, {128, "cc80"}, {200, "ccc8"}, {255, "ccff"}, {256, "cd0100"},
		{65536, "ce00010000"}, {1 << 32, "cf0000000100000000"}, {-1, "ff"}, {-4, "fc"}, {-32, "e0"},
		{-33, "d0df"}, {-129, "d1ff7f"}, {-40000, "d2ffff63c0"}, {-1 << 40, "d3ffffff0000000000"},
	}
	for _, tc := range tests {
		if got := hex.EncodeToString(appendInt(nil, tc.v)); got != tc.want {
			t.Errorf("appendInt(%d) = %s, want %s", tc.v, got, tc.want)
		}
	}
	if got := hex.EncodeToString(appendStr(nil, strings.Repeat("a", 32))[:2]); got != "d920" {
		t.Errorf("str8 header = %s", got)
	}
}

func TestDecodeVariants(t *testing.T) {
	hash := func(b []byte) uint64 {
		var bt Batch
		// [ts, [["BlockRemoved", [<b>]]]]
		p := append([]byte{0x92, 0x00, 0x91, 0x92}, appendStr(nil, "BlockRemoved")...)
		p = append(append(p, 0x91), b...)
		if err := Decode(p, &bt); err != nil {
			t.Fatalf("%x: %v", b, err)
		}
		return bt.Events[0].BlockHashes[0]
	}
	tests := []struct {
		name string
		enc  []byte
		want uint64
	}{
		{"fixint", []byte{0x05}, 5},
		{"u64", []byte{0xcf, 0xda, 0xb8, 0x9b, 0xaa, 0x7b, 0x58, 0x57, 0xc0}, specHash},
		{"neg fixint", []byte{0xff}, ^uint64(0)},
		{"i64", []byte{0xd3, 0x80, 0, 0, 0, 0, 0, 0, 1}, 1<<63 + 1},
		{"i8", []byte{0xd0, 0x80}, uint64(0xffffffffffffff80)},
		{"bin32", append([]byte{0xc4, 32}, bytes.Repeat([]byte{0}, 24)...), 0},
		{"bin short", []byte{0xc4, 2, 0x01, 0x02}, 0x0102},
	}
	tests[5].enc = append(tests[5].enc, 0xda, 0xb8, 0x9b, 0xaa, 0x7b, 0x58, 0x57, 0xc0)
	tests[5].want = specHash
	for _, tc := range tests {
		if got := hash(tc.enc); got != tc.want {
			t.Errorf("%s: got %#x want %#x", tc.name, got, tc.want)
		}
	}
}

func TestDecodeMapBatchAndUnknowns(t *testing.T) {
	// {"ts": 1.5, "foo": [1], "events": [{"type":"Future","x":1}, {"zzz": {"a": 1}, "type":"AllBlocksCleared"}],
	//  "data_parallel_rank": 3}
	var p []byte
	p = appendMapHeader(p, 4)
	p = appendStr(p, "ts")
	p = append(p, 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0)
	p = appendStr(p, "foo")
	p = append(p, 0x91, 0x01)
	p = appendStr(p, "events")
	p = append(p, 0x92)
	p = appendMapHeader(p, 2)
	p = appendStr(appendStr(p, "type"), "Future")
	p = append(appendStr(p, "x"), 0x01)
	p = appendMapHeader(p, 2)
	p = appendStr(p, "zzz")
	p = append(appendMapHeader(p, 1), appendStr(nil, "a")...)
	p = append(p, 0x01)
	p = appendStr(appendStr(p, "type"), "AllBlocksCleared")
	p = append(appendStr(p, "data_parallel_rank"), 0x03)
	var b Batch
	if err := Decode(p, &b); err != nil {
		t.Fatal(err)
	}
	if b.TS != 1.5 || !b.HasDPRank || b.DPRank != 3 || len(b.Events) != 1 || b.Events[0].Kind != Cleared || b.Skipped != 1 {
		t.Fatalf("got %+v", b)
	}
}

func TestDecodeMalformed(t *testing.T) {
	good := loadHex(t, "stored_map")
	tests := []struct {
		name string
		p    []byte
	}{
		{"empty", nil},
		{"not array", []byte{0x01}},
		{"short batch", []byte{0x91, 0x00}},
		{"huge array", []byte{0xdd, 0xff, 0xff, 0xff, 0xff}},
		{"huge tokens", append([]byte{0x92, 0x00, 0x91, 0x96}, append(appendStr(nil, "BlockStored"), 0x90, 0xc0, 0xdd, 0x7f, 0xff, 0xff, 0xff)...)},
		{"truncated", good[:len(good)-1]},
		{"trailing", append(append([]byte{}, good...), 0x00)},
		{"short legacy stored", append([]byte{0x92, 0x00, 0x91, 0x93}, append(appendStr(nil, "BlockStored"), 0x90, 0xc0)...)},
		{"map event without type", []byte{0x92, 0x00, 0x91, 0x80}},
		{"token negative", append([]byte{0x92, 0x00, 0x91, 0x96}, append(appendStr(nil, "BlockStored"), 0x90, 0xc0, 0x91, 0xff, 0x04, 0xc0)...)},
		{"deep nesting", append(append([]byte{0x92, 0x00, 0x91, 0x82, 0xa4, 't', 'y', 'p', 'e', 0xa1, 'X', 0xa1, 'z'}, bytes.Repeat([]byte{0x91}, 100)...), 0x00)},
	}
	for _, tc := range tests {
		var b Batch
		err := Decode(tc.p, &b)
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", tc.name, err)
		}
	}
}

// TestDecodeReuse checks that decoding into a used batch keeps no stale state and does not allocate.
func TestDecodeReuse(t *testing.T) {
	mixed, mm := loadHex(t, "mixed_array"), loadHex(t, "stored_mm_map")
	var b Batch
	for _, p := range [][]byte{mixed, mm, mixed} {
		if err := Decode(p, &b); err != nil {
			t.Fatal(err)
		}
	}
	want := goldens()[7].want
	sameBatch(t, &b, want)
	stored := loadHex(t, "stored_map")
	allocs := testing.AllocsPerRun(100, func() {
		if err := Decode(stored, &b); err != nil {
			t.Fatal(err)
		}
		if err := Decode(mm, &b); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("steady-state Decode allocates %.1f times per run", allocs)
	}
}

package kvevents

import (
	"bytes"
	"testing"

	"github.com/kvroute/kvroute/scoring"
)

// TestDialectGoldens decodes one golden payload per publisher dialect (testdata/gen_fixtures.py, written
// from the public formats independently of the Go encoder) and, where the dialect's encoder exists,
// checks that AppendDialect writes the same bytes.
func TestDialectGoldens(t *testing.T) {
	const h2 = 42
	stored := func(parent uint64, hasParent bool, hash uint64, toks ...uint32) Event {
		return Event{Kind: Stored, BlockHashes: []uint64{hash}, ParentHash: parent, HasParent: hasParent, TokenIDs: toks, BlockSize: 4, Medium: "GPU"}
	}
	removed := func(hash uint64) Event { return Event{Kind: Removed, BlockHashes: []uint64{hash}, Medium: "GPU"} }
	v09 := Event{Kind: Stored, BlockHashes: []uint64{specHash}, TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 4}
	cpu := stored(0, false, specHash, 1, 2, 3, 4)
	cpu.Medium, cpu.Tier = "CPU", scoring.MediumHostPinned
	none := Dialect(255)
	tests := []struct {
		name    string
		want    *Batch
		dialect Dialect // encodes the fixture byte for byte; none: decode only
	}{
		{"stored_map", batchOf(0, true, specStored()), DialectVLLM},
		{"stored_array", batchOf(0, true, specStored()), DialectVLLMArray},
		{"stored_v09", batchOf(0, false, v09), DialectVLLMv09},
		// Parent 0 is "no parent"; the second store continues the first.
		{"dialect_sim_array", batchOf(0, true, stored(0, false, specHash, 1, 2, 3, 4), stored(specHash, true, h2, 5, 6, 7, 8), removed(h2)), DialectSim},
		{"dialect_sglang_array", batchOf(1, true, stored(0, false, specHash, 1, 2, 3, 4), removed(specHash)), DialectSGLang},
		{"dialect_sglang_map", batchOf(0, true, stored(0, false, specHash, 1, 2, 3, 4)), none},
		{"dialect_vllm_cpu_array", batchOf(0, true, cpu), DialectVLLMArray},
		{"batch_map", &Batch{TS: specTS, Events: []Event{{Kind: Cleared}}, DPRank: 2, HasDPRank: true}, none},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			payload := loadHex(t, tc.name)
			var b Batch
			if err := Decode(payload, &b); err != nil {
				t.Fatal(err)
			}
			sameBatch(t, &b, tc.want)
			if tc.dialect == none {
				return
			}
			if got := AppendDialect(nil, tc.want, tc.dialect); !bytes.Equal(got, payload) {
				t.Fatalf("%v encoding differs\n got %x\nwant %x", tc.dialect, got, payload)
			}
		})
	}
}

// TestDialectRoundTrip writes a chain in every dialect and reads it back: what the dialect carries
// survives, and "no parent" stays "no parent" (0 in the simulator's layout).
func TestDialectRoundTrip(t *testing.T) {
	b := batchOf(1, true,
		Event{Kind: Stored, BlockHashes: []uint64{7, 8}, TokenIDs: []uint32{1, 2, 3, 4, 5, 6, 7, 8}, BlockSize: 4, Medium: "GPU"},
		Event{Kind: Stored, BlockHashes: []uint64{9}, ParentHash: 8, HasParent: true, TokenIDs: []uint32{9, 10, 11, 12}, BlockSize: 4, Medium: "GPU"},
		Event{Kind: Removed, BlockHashes: []uint64{9}, Medium: "GPU"},
		Event{Kind: Cleared},
	)
	for _, d := range Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			var got Batch
			if err := Decode(AppendDialect(nil, b, d), &got); err != nil {
				t.Fatal(err)
			}
			want := *b
			want.Events = append([]Event(nil), b.Events...)
			if d == DialectVLLMv09 {
				want.HasDPRank, want.DPRank = false, 0
				for i := range want.Events {
					want.Events[i].Medium = ""
				}
			}
			sameBatch(t, &got, &want)
			if p, err := ParseDialect(d.String()); err != nil || p != d {
				t.Errorf("ParseDialect(%q) = %v, %v", d, p, err)
			}
		})
	}
}

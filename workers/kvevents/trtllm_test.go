package kvevents

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/kvroute/kvroute/scoring"
)

// TestDecodeTRTLLMGolden decodes TensorRT-LLM's serialized event list (testdata/trtllm_events.json,
// written in the KVCacheEventSerializer layout: created, a 3-block stored event whose blocks carry
// mm_keys — a forwarded 16-hex id, a 64-hex digest, none — an updated event and a removed event).
func TestDecodeTRTLLMGolden(t *testing.T) {
	payload, err := os.ReadFile("testdata/trtllm_events.json")
	if err != nil {
		t.Fatal(err)
	}
	if !IsTRTLLM(payload) {
		t.Fatal("not recognised as a TRT-LLM payload")
	}
	var b Batch
	if err := DecodeTRTLLM(payload, 4, &b); err != nil {
		t.Fatal(err)
	}
	if len(b.Events) != 3 || b.Skipped != 1 || !b.HasDPRank || b.DPRank != 0 {
		t.Fatalf("events %d skipped %d dp %v/%d", len(b.Events), b.Skipped, b.HasDPRank, b.DPRank)
	}
	if b.Events[0].Kind != Cleared || b.Events[2].Kind != Removed {
		t.Fatalf("kinds %s %s", b.Events[0].Kind, b.Events[2].Kind)
	}
	st := b.Events[1]
	if st.Kind != Stored || st.HasParent || st.BlockSize != 4 || len(st.TokenIDs) != 12 {
		t.Fatalf("stored %+v", st)
	}
	if st.BlockHashes[0] != 8731246112357312897 || st.BlockHashes[1] != ^uint64(0) || st.BlockHashes[2] != 0x0123456789abcdef {
		t.Fatalf("block hashes %x", st.BlockHashes)
	}
	if got := b.Events[2].BlockHashes; len(got) != 2 || got[0] != 8731246112357312897 || got[1] != ^uint64(0) {
		t.Fatalf("removed %x", got)
	}
	for i, want := range [][]uint64{{0x2f97f006c0e2eb2e}, {0x2f97f006c0e2eb2e}, nil} {
		got := BlockMMHashes(st.ExtraKeys[i], nil)
		if len(got) != len(want) || (len(want) == 1 && got[0] != want[0]) {
			t.Fatalf("block %d mm hashes %x, want %x", i, got, want)
		}
	}
	// The block_mm_infos scheme (legacy suffix): tokens as stored, the image's mm_hash appended.
	legacy, partial := Rekey(&st, 4, scoring.Seed, nil)
	if partial != 0 || legacy[0] != scoring.BlockHash([]uint32{10, 20, 151655, 151655}, []uint64{0x2f97f006c0e2eb2e}, scoring.Seed) ||
		legacy[2] != scoring.BlockHash([]uint32{1, 2, 3, 4}, nil, scoring.Seed) {
		t.Fatalf("legacy rekey %v", legacy)
	}
	// The pad-value scheme reads the same events.
	pad := scoring.PadValue(0x2f97f006c0e2eb2e)
	norm, _ := RekeyImages(&st, 4, scoring.Seed, 151655, 0, nil)
	if norm[1] != scoring.BlockHash([]uint32{pad, pad, 30, 40}, nil, scoring.Seed) {
		t.Fatalf("normalized rekey %v", norm)
	}
}

func TestDecodeTRTLLMMalformed(t *testing.T) {
	for _, p := range []string{
		`{}`, `[{"data":{"type":"stored","blocks":[{"block_hash":null}]}}]`,
		`[{"data":{"type":"stored","blocks":[{"block_hash":1,"tokens":[{"token_id":-1}]}]}}]`,
		`[{"data":{"type":"removed","block_hashes":["zz"]}}]`, `[`,
	} {
		var b Batch
		if err := DecodeTRTLLM([]byte(p), 4, &b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// FuzzDecodeTRTLLM: the TensorRT-LLM decoder never panics, classifies every failure, and what it
// decodes re-keys without panicking.
func FuzzDecodeTRTLLM(f *testing.F) {
	if b, err := os.ReadFile("testdata/trtllm_events.json"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`[{"data":{"type":"removed","block_hashes":[1,"ff"]}}]`))
	f.Add([]byte(`[{"data":{"type":"stored","parent_hash":"abc","blocks":[{"block_hash":2,"tokens":[{"token_id":5}],"mm_keys":[{"type":"mm_key","hash":"00","start_offset":-3}]}]}}]`))
	f.Fuzz(func(t *testing.T, p []byte) {
		var b Batch
		if err := DecodeTRTLLM(p, 4, &b); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("unclassified %v", err)
			}
			return
		}
		for i := range b.Events {
			_, _ = Rekey(&b.Events[i], 4, scoring.Seed, nil)
			_, _ = RekeyImages(&b.Events[i], 4, scoring.Seed, 5, 0, nil)
		}
	})
}

// TestTRTLLMRoundTrip: what the simulator publishes in TensorRT-LLM's layout decodes back to the events
// it came from (hashes, tokens, mm identifiers), and a subscriber tells it from msgpack.
func TestTRTLLMRoundTrip(t *testing.T) {
	id := "2f97f006c0e2eb2e" + "000000000000000000000000000000000000000000000000"
	in := Batch{HasDPRank: true, DPRank: 1, Events: []Event{
		{Kind: Stored, BlockHashes: []uint64{7, ^uint64(0)}, ParentHash: 3, HasParent: true, BlockSize: 2,
			TokenIDs: []uint32{1, 151655, 151655, 9}, ExtraKeys: [][]ExtraKey{{{Kind: ExtraMM, Str: id, Int: 1}}, {{Kind: ExtraMM, Str: id, Int: -1}}}},
		{Kind: Removed, BlockHashes: []uint64{7}},
		{Kind: Cleared},
	}}
	payload := AppendBatch(nil, &in, LayoutTRTLLM)
	if !IsTRTLLM(payload) || IsTRTLLM(AppendBatch(nil, &in, LayoutMap)) {
		t.Fatal("layouts not told apart")
	}
	var out Batch
	if err := DecodeTRTLLM(payload, 2, &out); err != nil {
		t.Fatalf("%v\n%s", err, payload)
	}
	if len(out.Events) != 3 || out.DPRank != 1 || out.Events[1].Kind != Removed || out.Events[2].Kind != Cleared {
		t.Fatalf("%+v", out)
	}
	st := out.Events[0]
	if !st.HasParent || st.ParentHash != 3 || st.BlockHashes[1] != ^uint64(0) || len(st.TokenIDs) != 4 || st.TokenIDs[1] != 151655 {
		t.Fatalf("stored %+v", st)
	}
	for i := range 2 {
		if ks := st.ExtraKeys[i]; len(ks) != 1 || ks[0].Str != id || ks[0].Int != in.Events[0].ExtraKeys[i][0].Int {
			t.Fatalf("block %d keys %+v", i, ks)
		}
	}
	a, _ := Rekey(&in.Events[0], 2, scoring.Seed, nil)
	b, _ := Rekey(&st, 2, scoring.Seed, nil)
	if a[0] != b[0] || a[1] != b[1] {
		t.Fatal("re-keyed hashes differ after the round trip")
	}
}

// A worker registered with engine=trtllm is given the unpadded 16-hex id, which TensorRT-LLM echoes in
// mm_keys as it was given; the router reads it back as the padded identifier the vLLM form gives, so
// both forms re-key a block alike.
func TestTRTLLMEchoesHexID(t *testing.T) {
	const hex16 = "2f97f006c0e2eb2e"
	in := Batch{Events: []Event{{Kind: Stored, BlockHashes: []uint64{7}, BlockSize: 2, TokenIDs: []uint32{151655, 151655},
		ExtraKeys: [][]ExtraKey{{{Kind: ExtraMM, Str: hex16, Int: 0}}}}}}
	payload := AppendBatch(nil, &in, LayoutTRTLLM)
	if !bytes.Contains(payload, []byte(`"hash":"`+hex16+`"`)) {
		t.Fatalf("the 16-hex id is not echoed: %s", payload)
	}
	var out Batch
	if err := DecodeTRTLLM(payload, 2, &out); err != nil {
		t.Fatal(err)
	}
	if ks := out.Events[0].ExtraKeys[0]; len(ks) != 1 || ks[0].Str != hex16+"000000000000000000000000000000000000000000000000" {
		t.Fatalf("read back as %+v", ks)
	}
}

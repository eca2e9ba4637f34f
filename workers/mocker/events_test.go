package mocker

import (
	"bytes"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/workers/kvevents"
)

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile("../kvevents/testdata/" + name + ".hex")
	if err != nil {
		t.Fatal(err)
	}
	b, err := hex.DecodeString(strings.Join(strings.Fields(string(raw)), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// specTS is the batch timestamp of every golden event example.
var specTS = time.Unix(1700000000, 500_000_000)

const specHash BlockHash = 0xdab89baa7b5857c0

// TestEventBytesEqualSpecExamples feeds the inputs of the golden event examples through the mocker's
// event conversion and the kvevents encoder and compares with the golden bytes, in both layouts.
func TestEventBytesEqualSpecExamples(t *testing.T) {
	mmID := "2f97f006c0e2eb2e" + strings.Repeat("0", 48)
	stored := KVEvent{Kind: EventStored, Hashes: []BlockHash{specHash}, Tokens: []uint32{1, 2, 3, 4}, BlockSize: 4, Extra: []*ExtraKeys{nil}}
	tests := []struct {
		name    string
		events  []KVEvent
		dpRank  int
		layout  kvevents.Layout
		fixture string
	}{
		{"stored/map", []KVEvent{stored}, 0, kvevents.LayoutMap, "stored_map"},
		{"stored/array", []KVEvent{stored}, 0, kvevents.LayoutArray, "stored_array"},
		{"removed/map", []KVEvent{{Kind: EventRemoved, Hashes: []BlockHash{specHash}}}, 0, kvevents.LayoutMap, "removed_map"},
		{"cleared/map", []KVEvent{{Kind: EventCleared}}, 0, kvevents.LayoutMap, "cleared_map"},
		{"cleared/array", []KVEvent{{Kind: EventCleared}}, 0, kvevents.LayoutArray, "cleared_array"},
		{"stored-image/map", []KVEvent{{
			Kind: EventStored, Hashes: []BlockHash{1, 200}, Parent: ^BlockHash(0), HasParent: true,
			Tokens: []uint32{10, 20, 151655, 151655, 151655, 151655, 151655, 151655}, BlockSize: 4,
			Extra: []*ExtraKeys{{MM: []MMKey{{mmID, 2}}}, {MM: []MMKey{{mmID, -2}}}},
		}}, 1, kvevents.LayoutMap, "stored_mm_map"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b kvevents.Batch
			batchFromEvents(&b, tc.events, specTS, tc.dpRank)
			got := kvevents.AppendBatch(nil, &b, tc.layout)
			if want := fixture(t, tc.fixture); !bytes.Equal(got, want) {
				t.Fatalf("bytes differ\n got %x\nwant %x", got, want)
			}
		})
	}
}

// TestEngineStoredEventMatchesSpecExample runs the engine on the §4.1 inputs (block size 4, tokens 1..4):
// apart from the opaque hash, which the example fixes, the engine's own event encodes to the golden bytes.
func TestEngineStoredEventMatchesSpecExample(t *testing.T) {
	e := testEngine(t, nil)
	must(t, e.Add(Request{ID: "a", Prompt: []uint32{1, 2, 3, 4, 5}, MaxTokens: 1}))
	res := e.Step()
	if len(res.Events) != 1 || len(res.Events[0].Hashes) != 1 {
		t.Fatalf("events %+v", res.Events)
	}
	ev := res.Events[0]
	ev.Hashes = []BlockHash{specHash}
	for _, layout := range []struct {
		l    kvevents.Layout
		name string
	}{{kvevents.LayoutMap, "stored_map"}, {kvevents.LayoutArray, "stored_array"}} {
		var b kvevents.Batch
		batchFromEvents(&b, []KVEvent{ev}, specTS, 0)
		if got, want := kvevents.AppendBatch(nil, &b, layout.l), fixture(t, layout.name); !bytes.Equal(got, want) {
			t.Fatalf("%s: got %x want %x", layout.name, got, want)
		}
	}
}

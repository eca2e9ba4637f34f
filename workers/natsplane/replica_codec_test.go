package natsplane

import (
	"reflect"
	"testing"

	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/scoring"
)

func TestReplicaCodecRoundTrip(t *testing.T) {
	tr := true
	tests := []struct {
		name string
		ev   router.LoadEvent
	}{
		{"add", router.LoadEvent{Kind: router.LoadAdd, RequestID: "chatcmpl-1", Worker: scoring.WorkerKey{WorkerID: 7, DPRank: 2},
			SeqHashes: []uint64{1, 2, 1 << 63}, ISL: 48, OverlapBlocks: 2, ExpectedOutputTokens: 100, AssumeKVReuse: true, TrackPrefillTokens: &tr}},
		{"add-empty", router.LoadEvent{Kind: router.LoadAdd, RequestID: "x", SeqHashes: []uint64{}}},
		{"prefill", router.LoadEvent{Kind: router.LoadPrefillDone, RequestID: "a", Worker: scoring.WorkerKey{WorkerID: 1}}},
		{"free", router.LoadEvent{Kind: router.LoadFree, RequestID: "b", Worker: scoring.WorkerKey{WorkerID: 3, DPRank: 1}}},
		{"bind", router.LoadEvent{Kind: router.LoadBind, RequestID: "session-7", Worker: scoring.WorkerKey{WorkerID: 3, DPRank: 1}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id, got, err := decodeReplicaEvent(appendReplicaEvent(nil, "router-9", &tc.ev))
			if err != nil || id != "router-9" || !reflect.DeepEqual(got, tc.ev) {
				t.Fatalf("got %q %+v %v, want %+v", id, got, err, tc.ev)
			}
		})
	}
}

// FuzzReplicaDecode: no input panics, and what decodes re-encodes to the same bytes.
func FuzzReplicaDecode(f *testing.F) {
	f.Add(appendReplicaEvent(nil, "r", &router.LoadEvent{Kind: router.LoadAdd, RequestID: "q", SeqHashes: []uint64{5}}))
	f.Add(appendReplicaEvent(nil, "r", &router.LoadEvent{Kind: router.LoadFree, RequestID: "q"}))
	f.Add([]byte{1, 1, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		id, ev, err := decodeReplicaEvent(b)
		if err != nil {
			return
		}
		if again := appendReplicaEvent(nil, id, &ev); string(again) != string(b) && ev.Kind != router.LoadAdd {
			t.Fatalf("re-encoding differs: %x vs %x", again, b)
		}
	})
}

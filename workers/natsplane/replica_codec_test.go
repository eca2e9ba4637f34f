package natsplane

import (
	"reflect"
	"testing"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/sched"
)

func TestReplicaCodecRoundTrip(t *testing.T) {
	tr := true
	tests := []struct {
		name string
		ev   sched.LoadEvent
	}{
		{"add", sched.LoadEvent{Kind: sched.LoadAdd, RequestID: "chatcmpl-1", Worker: scoring.WorkerKey{WorkerID: 7, DPRank: 2},
			SeqHashes: []uint64{1, 2, 1 << 63}, ISL: 48, OverlapBlocks: 2, ExpectedOutputTokens: 100, AssumeKVReuse: true, TrackPrefillTokens: &tr}},
		{"add-empty", sched.LoadEvent{Kind: sched.LoadAdd, RequestID: "x", SeqHashes: []uint64{}}},
		{"prefill", sched.LoadEvent{Kind: sched.LoadPrefillDone, RequestID: "a", Worker: scoring.WorkerKey{WorkerID: 1}}},
		{"free", sched.LoadEvent{Kind: sched.LoadFree, RequestID: "b", Worker: scoring.WorkerKey{WorkerID: 3, DPRank: 1}}},
		{"bind", sched.LoadEvent{Kind: sched.LoadBind, RequestID: "session-7", Worker: scoring.WorkerKey{WorkerID: 3, DPRank: 1}}},
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
	f.Add(appendReplicaEvent(nil, "r", &sched.LoadEvent{Kind: sched.LoadAdd, RequestID: "q", SeqHashes: []uint64{5}}))
	f.Add(appendReplicaEvent(nil, "r", &sched.LoadEvent{Kind: sched.LoadFree, RequestID: "q"}))
	f.Add([]byte{1, 1, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		id, ev, err := decodeReplicaEvent(b)
		if err != nil {
			return
		}
		if again := appendReplicaEvent(nil, id, &ev); string(again) != string(b) && ev.Kind != sched.LoadAdd {
			t.Fatalf("re-encoding differs: %x vs %x", again, b)
		}
	})
}

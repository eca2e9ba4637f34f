package natsplane

import (
	"fmt"
	"reflect"
	"testing"
	"time"

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

// TestReplicaListRoundTrip: an active list decodes to what was encoded; one too large for a message is
// cut between workers into messages that each decode whole, and together hold every worker and request.
func TestReplicaListRoundTrip(t *testing.T) {
	small := sched.ActiveList{Workers: []scoring.WorkerKey{{WorkerID: 1}, {WorkerID: 2, DPRank: 3}},
		Requests: []sched.ActiveRequest{{ID: "a", Worker: scoring.WorkerKey{WorkerID: 2, DPRank: 3}}, {ID: "b", Worker: scoring.WorkerKey{WorkerID: 1}}}}
	msgs := appendReplicaLists("router-9", 10*time.Second, &small)
	if len(msgs) != 1 {
		t.Fatalf("%d messages, want 1", len(msgs))
	}
	id, every, got, err := decodeReplicaList(msgs[0])
	want := sched.ActiveList{Workers: small.Workers, Requests: []sched.ActiveRequest{small.Requests[1], small.Requests[0]}} // by worker
	if err != nil || id != "router-9" || every != 10*time.Second || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q %+v %v, want %+v", id, got, err, want)
	}
	if msgs := appendReplicaLists("r", time.Second, &sched.ActiveList{}); len(msgs) != 0 {
		t.Fatalf("a list of no workers: %d messages", len(msgs))
	}
	var big sched.ActiveList
	for w := range 64 {
		k := scoring.WorkerKey{WorkerID: uint64(w)}
		big.Workers = append(big.Workers, k)
		for r := range 200 {
			big.Requests = append(big.Requests, sched.ActiveRequest{ID: fmt.Sprintf("%0100d", w*1000+r), Worker: k})
		}
	}
	msgs = appendReplicaLists("r", time.Second, &big)
	if len(msgs) < 2 {
		t.Fatalf("%d messages for %d requests of 106 bytes", len(msgs), len(big.Requests))
	}
	var workers, reqs int
	seen := map[string]scoring.WorkerKey{}
	for _, b := range msgs {
		if len(b) > maxListMessage {
			t.Fatalf("a message of %d bytes", len(b))
		}
		_, _, l, err := decodeReplicaList(b)
		if err != nil {
			t.Fatal(err)
		}
		workers, reqs = workers+len(l.Workers), reqs+len(l.Requests)
		for _, r := range l.Requests {
			seen[r.ID] = r.Worker
		}
	}
	if workers != len(big.Workers) || reqs != len(big.Requests) || len(seen) != len(big.Requests) {
		t.Fatalf("%d workers and %d requests (%d distinct) across the messages, want %d and %d", workers, reqs, len(seen),
			len(big.Workers), len(big.Requests))
	}
	for _, r := range big.Requests {
		if seen[r.ID] != r.Worker {
			t.Fatalf("request %s on %+v, want %+v", r.ID, seen[r.ID], r.Worker)
		}
	}
	if _, _, _, err := decodeReplicaList(appendReplicaLists("a\x00b", time.Second, &small)[0]); err == nil {
		t.Fatal("a router id holding a NUL decoded")
	}
}

// FuzzReplicaDecode: no input panics, and what decodes re-encodes to the same bytes (an active list to
// the same list).
func FuzzReplicaDecode(f *testing.F) {
	f.Add(appendReplicaEvent(nil, "r", &sched.LoadEvent{Kind: sched.LoadAdd, RequestID: "q", SeqHashes: []uint64{5}}))
	f.Add(appendReplicaEvent(nil, "r", &sched.LoadEvent{Kind: sched.LoadFree, RequestID: "q"}))
	f.Add([]byte{1, 1, 0xff, 0xff})
	f.Add(appendReplicaLists("r", time.Second, &sched.ActiveList{Workers: []scoring.WorkerKey{{WorkerID: 4}}, Requests: []sched.ActiveRequest{{ID: "q", Worker: scoring.WorkerKey{WorkerID: 4}}}})[0])
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 1 && b[1] == replicaList {
			id, every, l, err := decodeReplicaList(b)
			if err != nil {
				return
			}
			again := appendReplicaLists(id, every, &l)
			var back []sched.ActiveRequest
			for _, m := range again {
				_, _, part, err := decodeReplicaList(m)
				if err != nil {
					t.Fatalf("re-encoded list does not decode: %v", err)
				}
				back = append(back, part.Requests...)
			}
			if len(l.Workers) > 0 && len(back) != len(l.Requests) {
				t.Fatalf("re-encoding holds %d requests, want %d", len(back), len(l.Requests))
			}
			return
		}
		id, ev, err := decodeReplicaEvent(b)
		if err != nil {
			return
		}
		if again := appendReplicaEvent(nil, id, &ev); string(again) != string(b) && ev.Kind != sched.LoadAdd {
			t.Fatalf("re-encoding differs: %x vs %x", again, b)
		}
	})
}

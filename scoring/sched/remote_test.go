package sched

import (
	"slices"
	"testing"
	"time"

	"github.com/kvroute/kvroute/scoring"
)

// TestReconcile: an active list from router a frees a's requests on the workers it covers that it does
// not list, and nothing else: a's listed request, a's request on a worker the list does not cover (its
// other core's), router b's request and this machine's own request stay; ActiveList lists only the
// machine's own requests.
func TestReconcile(t *testing.T) {
	m := sharedMachine(t, 0, 2)
	now := time.Unix(1, 0)
	w1, w2 := scoring.WorkerKey{WorkerID: 1}, scoring.WorkerKey{WorkerID: 2}
	add := func(router, id string, w scoring.WorkerKey) {
		t.Helper()
		if _, err := m.ApplyRemote(now, router, LoadEvent{Kind: LoadAdd, RequestID: id, Worker: w, ISL: 10, SeqHashes: []uint64{uint64(len(id))}}); err != nil {
			t.Fatal(err)
		}
	}
	add("a", "kept", w1)
	add("a", "lost-free", w1)
	add("a", "other-core", w2)
	add("b", "lost-free", w1)
	if _, _, err := m.Route(now, &Request{ID: "own", Local: []uint64{7, 8}, ISL: 2, Matched: true}); err != nil {
		t.Fatal(err)
	}
	own := m.ActiveList()
	if !slices.Equal(own.Workers, []scoring.WorkerKey{w1, w2}) || len(own.Requests) != 1 || own.Requests[0].ID != "own" {
		t.Fatalf("ActiveList %+v, want both workers and the own request only", own)
	}
	_, n := m.Reconcile(now, "a", ActiveList{Workers: []scoring.WorkerKey{w1}, Requests: []ActiveRequest{{ID: "kept", Worker: w1},
		{ID: "never-seen", Worker: w1}}})
	if n != 1 {
		t.Fatalf("freed %d, want 1 (a's lost-free)", n)
	}
	for _, id := range []string{RemoteID("a", "kept"), RemoteID("a", "other-core"), RemoteID("b", "lost-free"), "own"} {
		if m.active[id] == nil {
			t.Errorf("%q was freed", id)
		}
	}
	if m.active[RemoteID("a", "lost-free")] != nil || m.Active() != 4 {
		t.Fatalf("a's lost-free still charged (%d active)", m.Active())
	}
	// A router id that ends where another's begins does not share its namespace, and one that holds a NUL
	// (which ends a router id in RemoteID) is refused.
	if _, err := m.ApplyRemote(now, "a\x00x", LoadEvent{Kind: LoadAdd, RequestID: "y", Worker: w1}); err == nil {
		t.Fatal("a router id holding a NUL was accepted")
	}
	add("a/x", "y", w1)
	if _, n := m.Reconcile(now, "a", ActiveList{Workers: []scoring.WorkerKey{w1}, Requests: []ActiveRequest{{ID: "kept", Worker: w1}}}); n != 0 {
		t.Fatalf("router a's list freed %d requests of another router", n)
	}
	// A request that left another way (its worker removed) is pruned from the router's index, not freed.
	m.RemoveWorker(now, 2)
	if _, n := m.Reconcile(now, "a", ActiveList{Workers: []scoring.WorkerKey{w1}, Requests: []ActiveRequest{{ID: "kept", Worker: w1}}}); n != 0 {
		t.Fatalf("freed %d after worker 2's removal, want 0", n)
	}
	if _, ok := m.remote["a"][RemoteID("a", "other-core")]; ok {
		t.Fatal("the removed worker's request is still indexed for router a")
	}
	// A router gone silent: everything charged for it goes, on every worker.
	if _, n := m.Reconcile(now, "a", ActiveList{All: true}); n != 1 || m.remote["a"] != nil {
		t.Fatalf("router a gone: freed %d (want 1), index %v", n, m.remote["a"])
	}
}

package router

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/worker"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/sched"
	"github.com/kvroute/kvroute/workers/registry"
)

// TestReplicaObserveAndApply: local lifecycle calls reach the observer in order; a remote AddRequest
// charges the same worker under a namespaced id (no collision with a local id, no echo to the observer)
// and its Free releases it.
func TestReplicaObserveAndApply(t *testing.T) {
	var mu sync.Mutex
	var seen []LoadEvent
	cfg := DefaultConfig(16)
	cfg.TickInterval = -1
	cfg.OnLoad = func(ev LoadEvent) { mu.Lock(); seen = append(seen, ev); mu.Unlock() }
	r, err := New(actors.NewSystem(nil), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	for id := uint64(1); id <= 2; id++ {
		if err := r.AddWorker(registry.Spec{ID: id, URL: "http://127.0.0.1:1"}); err != nil {
			t.Fatal(err)
		}
	}
	toks := make([]uint32, 64)
	res, err := r.Route(context.Background(), &RouteRequest{ID: "a", Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.PrefillDone("a"); err != nil {
		t.Fatal(err)
	}
	if err := r.Free("a"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	kinds := []LoadEventKind{}
	for _, ev := range seen {
		kinds = append(kinds, ev.Kind)
	}
	mu.Unlock()
	if len(kinds) != 3 || kinds[0] != LoadAdd || kinds[1] != LoadPrefillDone || kinds[2] != LoadFree ||
		seen[0].Worker != res.Worker || len(seen[0].SeqHashes) != 4 || seen[0].ISL != 64 {
		t.Fatalf("observed %+v", seen)
	}

	w2 := scoring.WorkerKey{WorkerID: 2}
	add := LoadEvent{Kind: LoadAdd, RequestID: "a", Worker: w2, SeqHashes: []uint64{1, 2, 3, 4}, ISL: 64}
	if err := r.ApplyRemote("other", add); err != nil {
		t.Fatal(err)
	}
	if err := r.ApplyRemote("other", add); !errors.Is(err, ErrDuplicateRequest) {
		t.Fatalf("duplicate remote add: %v", err)
	}
	if _, err := r.Route(context.Background(), &RouteRequest{ID: "a", Tokens: toks}); err != nil {
		t.Fatalf("local id collides with a remote one: %v", err)
	}
	if n := r.ActiveRequests(); n != 2 {
		t.Fatalf("%d active, want local a + remote a", n)
	}
	if err := r.ApplyRemote("other", LoadEvent{Kind: LoadAdd, RequestID: "b", Worker: scoring.WorkerKey{WorkerID: 9}}); !errors.Is(err, worker.ErrUnknown) {
		t.Fatalf("unknown worker: %v", err)
	}
	if err := r.ApplyRemote("other", LoadEvent{Kind: LoadFree, RequestID: "a", Worker: w2}); err != nil {
		t.Fatal(err)
	}
	if err := r.ApplyRemote("other", LoadEvent{Kind: LoadFree, RequestID: "a", Worker: w2}); !errors.Is(err, ErrUnknownRequest) {
		t.Fatalf("second remote free: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 4 { // the three above plus the local Route of the second "a"; remote events never echo
		t.Fatalf("observer saw %d events, want 4", len(seen))
	}
}

// TestReplicaSharesSessionBindings: a session bound on one router reaches another through the replica
// events (LoadBind), and the other router pins the session's next request to the same worker even where
// its own cost would pick another.
func TestReplicaSharesSessionBindings(t *testing.T) {
	var mu sync.Mutex
	var seen []LoadEvent
	build := func(observe bool) *Router {
		cfg := DefaultConfig(4)
		cfg.TickInterval = -1
		cfg.Scoring.SessionAffinityTTL = time.Minute
		if observe {
			cfg.OnLoad = func(ev LoadEvent) { mu.Lock(); seen = append(seen, ev); mu.Unlock() }
		}
		system := actors.NewSystem(nil)
		r, err := New(system, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Stop(); system.Shutdown() })
		for id := uint64(1); id <= 2; id++ {
			if err := r.AddWorker(registry.Spec{ID: id, URL: "http://127.0.0.1:1"}); err != nil {
				t.Fatal(err)
			}
		}
		return r
	}
	a, b := build(true), build(false)
	pin := scoring.WorkerKey{WorkerID: 2}
	if _, err := a.Route(context.Background(), &RouteRequest{ID: "t1", Tokens: []uint32{1, 2, 3, 4}, Session: "s", Pin: &pin}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	events := append([]LoadEvent(nil), seen...)
	mu.Unlock()
	for _, ev := range events {
		if err := b.ApplyRemote("a", ev); err != nil {
			t.Fatalf("apply %+v: %v", ev, err)
		}
	}
	// On b, worker 2 carries a's request (replica load) and worker 1 is idle: only the binding sends the
	// session there.
	for i := range 4 {
		res, err := b.Route(context.Background(), &RouteRequest{ID: "t" + strconv.Itoa(2+i), Tokens: []uint32{9, 9, 9, 9}, Session: "s"})
		if err != nil || res.Worker.WorkerID != 2 {
			t.Fatalf("session request %d on the second router: worker %d, %v", i, res.Worker.WorkerID, err)
		}
	}
	// (Another prompt: predict-on-route would credit worker 2 with the session's.)
	res, err := b.Route(context.Background(), &RouteRequest{ID: "other", Tokens: []uint32{7, 7, 7, 7}})
	if err != nil || res.Worker.WorkerID != 1 {
		t.Fatalf("a request without the session went to %d (%v), want the idle worker 1", res.Worker.WorkerID, err)
	}
}

// TestActiveListsAndReconcileInParts: with more workers than one part holds, ActiveLists emits parts that
// together cover every worker once and list every local request once, and a peer's list, whole or
// marked All, frees exactly the peer's unlisted requests on the workers it covers.
func TestActiveListsAndReconcileInParts(t *testing.T) {
	cfg := DefaultConfig(16)
	cfg.TickInterval = -1
	r, err := New(actors.NewSystem(nil), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	const workers = 2*replicaPart + 7
	for id := uint64(1); id <= workers; id++ {
		if err := r.AddWorker(registry.Spec{ID: id, URL: "http://127.0.0.1:1"}); err != nil {
			t.Fatal(err)
		}
	}
	toks := make([]uint32, 32)
	for i := range 300 {
		if _, err := r.Route(context.Background(), &RouteRequest{ID: "own-" + strconv.Itoa(i), Tokens: toks}); err != nil {
			t.Fatal(err)
		}
	}
	var peer sched.ActiveList
	for id := uint64(1); id <= workers; id++ {
		w := scoring.WorkerKey{WorkerID: id}
		peer.Workers = append(peer.Workers, w)
		for k := range 2 {
			rid := strconv.FormatUint(id, 10) + "-" + strconv.Itoa(k)
			if err := r.ApplyRemote("peer", LoadEvent{Kind: LoadAdd, RequestID: rid, Worker: w, ISL: 8}); err != nil {
				t.Fatal(err)
			}
			if k == 0 || id > workers/2 { // the peer lost the Free of every other request on the first half
				peer.Requests = append(peer.Requests, sched.ActiveRequest{ID: rid, Worker: w})
			}
		}
	}
	parts, covered, listed := 0, map[scoring.WorkerKey]int{}, map[string]int{}
	r.ActiveLists(func(l sched.ActiveList) {
		parts++
		for _, w := range l.Workers {
			covered[w]++
		}
		for _, q := range l.Requests {
			listed[q.ID]++
		}
	})
	if parts != 3 || len(covered) != workers || len(listed) != 300 {
		t.Fatalf("%d parts covering %d workers and listing %d requests, want 3, %d and 300", parts, len(covered), len(listed), workers)
	}
	for w, n := range covered {
		if n != 1 {
			t.Fatalf("worker %v covered %d times", w, n)
		}
	}
	if n := r.ReconcileRemote("peer", peer); n != workers/2 {
		t.Fatalf("reconciliation freed %d, want %d", n, workers/2)
	}
	if n := r.ActiveRequests(); n != 300+len(peer.Requests) {
		t.Fatalf("%d active after the reconciliation, want %d", n, 300+len(peer.Requests))
	}
	if n := r.ReconcileRemote("peer", sched.ActiveList{All: true}); n != len(peer.Requests) {
		t.Fatalf("the peer gone: freed %d, want %d", n, len(peer.Requests))
	}
	if n := r.ActiveRequests(); n != 300 {
		t.Fatalf("%d active once the peer is gone, want the 300 local ones", n)
	}
}

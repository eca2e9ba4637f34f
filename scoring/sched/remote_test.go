package sched

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
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
	own := m.ActiveList(0, 8)
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
	// A request that left another way (its worker removed) is not freed again.
	m.RemoveWorker(now, 2)
	if _, n := m.Reconcile(now, "a", ActiveList{Workers: []scoring.WorkerKey{w1, w2}, Requests: []ActiveRequest{{ID: "kept", Worker: w1}}}); n != 0 {
		t.Fatalf("freed %d after worker 2's removal, want 0", n)
	}
	// A router gone silent: everything charged for it goes, on every worker.
	if _, n := m.Reconcile(now, "a", ActiveList{All: true}); n != 1 || m.active[RemoteID("a", "kept")] != nil {
		t.Fatalf("router a gone: freed %d (want 1)", n)
	}
}

// TestActiveListAndChargedAsTheActiveMapHolds: after routes, frees, remote adds and frees, a worker
// leaving and stale expiry, ActiveList lists exactly the machine's own active requests and Charged
// exactly a router's requests on the covered targets, as the active map holds them.
func TestActiveListAndChargedAsTheActiveMapHolds(t *testing.T) {
	m := sharedMachine(t, 0, 6)
	now := time.Unix(1, 0)
	rng := rand.New(rand.NewPCG(7, 7))
	var own, remote []string
	for step := range 3000 {
		switch k := rng.Uint64() % 10; {
		case k < 4:
			id := fmt.Sprintf("own-%d", step)
			if _, _, err := m.Route(now, &Request{ID: id, Local: []uint64{rng.Uint64() % 9}, ISL: 3, Matched: true}); err == nil {
				own = append(own, id)
			}
		case k < 7:
			router, id := fmt.Sprintf("r%d", rng.Uint64()%3), fmt.Sprintf("req-%d", step)
			w := scoring.WorkerKey{WorkerID: 1 + rng.Uint64()%6}
			if _, err := m.ApplyRemote(now, router, LoadEvent{Kind: LoadAdd, RequestID: id, Worker: w, ISL: 4}); err == nil {
				remote = append(remote, RemoteID(router, id))
			}
		case k < 8 && len(own) > 0:
			i := int(rng.Uint64() % uint64(len(own)))
			_, _ = m.Free(now, own[i])
			own = slices.Delete(own, i, i+1)
		case k < 9 && len(remote) > 0:
			i := int(rng.Uint64() % uint64(len(remote)))
			id := remote[i][len(remotePrefix):]
			router, req, _ := strings.Cut(id, "\x00")
			_, _ = m.ApplyRemote(now, router, LoadEvent{Kind: LoadFree, RequestID: req})
			remote = slices.Delete(remote, i, i+1)
		case step%997 == 0:
			m.RemoveWorker(now, 1+rng.Uint64()%6)
			m.AddWorker(now, Worker{ID: 1 + rng.Uint64()%6})
		}
	}
	var wantOwn []ActiveRequest
	wantCharged := map[string][]string{}
	for id, tg := range m.active {
		if !isRemoteID(id) {
			wantOwn = append(wantOwn, ActiveRequest{ID: id, Worker: tg.key})
		} else if tg.key.WorkerID%2 == 0 {
			router, _, _ := strings.Cut(id[len(remotePrefix):], "\x00")
			wantCharged[router] = append(wantCharged[router], id)
		}
	}
	byID := func(a, b ActiveRequest) int { return strings.Compare(a.ID, b.ID) }
	got := append(m.ActiveList(0, 3).Requests, m.ActiveList(3, 3).Requests...)
	slices.SortFunc(got, byID)
	slices.SortFunc(wantOwn, byID)
	if len(wantOwn) == 0 || !slices.Equal(got, wantOwn) {
		t.Fatalf("ActiveList: %d requests, the active map holds %d of the machine's own", len(got), len(wantOwn))
	}
	if l := m.ActiveList(6, 3); len(l.Workers) != 0 || len(l.Requests) != 0 {
		t.Fatalf("ActiveList past the last target: %+v", l)
	}
	even := []scoring.WorkerKey{{WorkerID: 2}, {WorkerID: 4}, {WorkerID: 6}, {WorkerID: 99}}
	for _, router := range []string{"r0", "r1", "r2"} {
		ids := m.Charged(router, even, nil)
		slices.Sort(ids)
		slices.Sort(wantCharged[router])
		if len(ids) == 0 || !slices.Equal(ids, wantCharged[router]) {
			t.Fatalf("Charged(%s) on the even workers: %d ids, want %d", router, len(ids), len(wantCharged[router]))
		}
	}
}

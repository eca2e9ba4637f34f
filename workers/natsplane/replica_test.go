package natsplane

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/internal/testutil"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/sched"
)

// burst routes n identical-prefix requests, the first 3/4 through router 0 and the rest through the
// others in turn (an uneven split, as a load balancer in front of frontends produces over short windows),
// then frees them all. With sync on it waits after each decision until every router has seen it. It
// returns the requests per worker at the peak.
func burst(t *testing.T, fs []*frontend, trial, n int, synced bool) map[uint64]int {
	t.Helper()
	p := newPrompts(uint64(7+trial), 1)
	per := map[uint64]int{}
	owner := map[string]*frontend{}
	settle := func(want int) {
		if !synced {
			return
		}
		testutil.Until(t, 5*time.Second, "replica sync", func() string {
			for j, g := range fs {
				if g.r.ActiveRequests() != want {
					return fmt.Sprintf("router %d sees %d active, want %d", j, g.r.ActiveRequests(), want)
				}
			}
			return ""
		})
	}
	for i := 0; i < n; i++ {
		f := fs[0]
		if i >= n*3/4 && len(fs) > 1 {
			f = fs[1+i%(len(fs)-1)]
		}
		id := fmt.Sprintf("t%d-req-%d", trial, i)
		res, err := f.r.Route(context.Background(), &router.RouteRequest{ID: id, Tokens: p.next()})
		if err != nil {
			t.Fatal(err)
		}
		owner[id] = f
		per[res.Worker.WorkerID]++
		settle(i + 1)
	}
	for id, f := range owner {
		if err := f.r.Free(id); err != nil {
			t.Fatal(err)
		}
	}
	settle(0)
	return per
}

// imbalance is the spread of requests per worker: max − min over all workers.
func imbalance(per map[uint64]int, workers int) int {
	lo, hi := int(^uint(0)>>1), 0
	for id := uint64(1); id <= uint64(workers); id++ {
		lo, hi = min(lo, per[id]), max(hi, per[id])
	}
	return hi - lo
}

// TestReplicaSyncSpreadsLikeOneRouter: two routers routing a burst of identical-prefix requests with
// replica sync spread load like one router; without sync each charges only its own decisions.
func TestReplicaSyncSpreadsLikeOneRouter(t *testing.T) {
	c := startTestCluster(t)
	ws := startSimWorkers(t, 4, 256)
	const n = 12
	start := func(routers int, sync bool) []*frontend {
		var fs []*frontend
		var syncs []*ReplicaSync
		for i := 0; i < routers; i++ {
			seed := uint64(42 + i)
			var rs *ReplicaSync
			if sync {
				rs = NewReplicaSync(connect(t, c.URL()), ReplicaConfig{RouterID: fmt.Sprintf("r%d", i), ListInterval: 20 * time.Millisecond})
				t.Cleanup(rs.Stop)
				syncs = append(syncs, rs)
			}
			f := startFrontend(t, c.URL(), ws, DefaultSourceConfig(), func(cfg *router.Config) {
				cfg.Seed = &seed
				// Load sharing alone: predict-on-route would gather the identical prefixes on one worker
				// per router, whatever the load says.
				cfg.Scoring.PredictedTTL = scoring.SomeDuration(0)
				if rs != nil {
					cfg.OnLoad = rs.Observe
				}
			})
			if rs != nil {
				if err := rs.Start(f.r); err != nil {
					t.Fatal(err)
				}
			}
			fs = append(fs, f)
		}
		heardEachOther(t, syncs)
		return fs
	}
	const trials = 6
	one, two, twoSync := start(1, false), start(2, false), start(2, true)
	var iOne, iSync, iNo int
	for tr := 0; tr < trials; tr++ {
		a, b, c := burst(t, one, tr, n, false), burst(t, twoSync, tr, n, true), burst(t, two, tr, n, false)
		iOne, iSync, iNo = iOne+imbalance(a, 4), iSync+imbalance(b, 4), iNo+imbalance(c, 4)
		t.Logf("trial %d requests per worker: one router %v, two synced %v, two unsynced %v", tr, a, b, c)
	}
	t.Logf("imbalance (max-min requests per worker, summed over %d trials of %d requests): one router %d, two synced %d, two unsynced %d",
		trials, n, iOne, iSync, iNo)
	if iSync > iOne {
		t.Fatalf("synced imbalance %d exceeds one router's %d", iSync, iOne)
	}
	if iNo <= iSync {
		t.Fatalf("unsynced imbalance %d not above synced %d: the test does not exercise sync", iNo, iSync)
	}
}

// heardEachOther waits until every replica has received another's active list: the routers' connections
// may land on different nodes of the cluster, and an event published before the subscription's interest
// reached the publisher's node is lost (as in production; the lists repair lost Frees, not lost Adds).
func heardEachOther(t *testing.T, syncs []*ReplicaSync) {
	t.Helper()
	if len(syncs) < 2 {
		return
	}
	testutil.Until(t, 10*time.Second, "replicas hearing each other", func() string {
		for i, rs := range syncs {
			if st := rs.Stats(); st.Reconciled == 0 {
				return fmt.Sprintf("replica %d: %+v", i, st)
			}
		}
		return ""
	})
}

// TestReplicaListsRepairLostFrees: a replica charging a request of another router whose Free it never
// received (here an Add applied by hand, as if the router's Free had been lost) frees it at that router's
// next active list, while a request the router still runs stays charged across its lists; once the
// router's lists stop, what it was charged is freed.
func TestReplicaListsRepairLostFrees(t *testing.T) {
	c := startTestCluster(t)
	ws := startSimWorkers(t, 2, 256)
	var fs []*frontend
	var syncs []*ReplicaSync
	for i := range 2 {
		rs := NewReplicaSync(connect(t, c.URL()), ReplicaConfig{RouterID: fmt.Sprintf("r%d", i), ListInterval: 20 * time.Millisecond})
		t.Cleanup(rs.Stop)
		f := startFrontend(t, c.URL(), ws, DefaultSourceConfig(), func(cfg *router.Config) { cfg.OnLoad = rs.Observe })
		if err := rs.Start(f.r); err != nil {
			t.Fatal(err)
		}
		fs, syncs = append(fs, f), append(syncs, rs)
	}
	heardEachOther(t, syncs)
	p := newPrompts(3, 1)
	if _, err := fs[0].r.Route(context.Background(), &router.RouteRequest{ID: "running", Tokens: p.next()}); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, 5*time.Second, "router 1 charges router 0's request", func() string {
		if n := fs[1].r.ActiveRequests(); n != 1 {
			return fmt.Sprintf("%d active", n)
		}
		return ""
	})
	w := scoring.WorkerKey{WorkerID: uint64(ws[0].ID())}
	if err := fs[1].r.ApplyRemote("r0", sched.LoadEvent{Kind: sched.LoadAdd, RequestID: "lost-free", Worker: w, ISL: 64,
		SeqHashes: []uint64{1, 2, 3, 4}}); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, 5*time.Second, "router 1 frees the request router 0's list lacks", func() string {
		if st := syncs[1].Stats(); st.RemoteFreed != 1 || fs[1].r.ActiveRequests() != 1 {
			return fmt.Sprintf("%d active, stats %+v", fs[1].r.ActiveRequests(), st)
		}
		return ""
	})
	lists := syncs[1].Stats().Reconciled
	testutil.Until(t, 5*time.Second, "more of router 0's lists", func() string {
		if syncs[1].Stats().Reconciled < lists+3 {
			return "waiting"
		}
		return ""
	})
	if n, st := fs[1].r.ActiveRequests(), syncs[1].Stats(); n != 1 || st.RemoteFreed != 1 {
		t.Fatalf("router 0's running request: router 1 has %d active, stats %+v", n, st)
	}
	if err := fs[0].r.Free("running"); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, 5*time.Second, "router 1 frees the request router 0 freed", func() string {
		if n := fs[1].r.ActiveRequests(); n != 0 {
			return fmt.Sprintf("%d active", n)
		}
		return ""
	})
	// Router 0 goes silent (its replica sync stops, as when its process dies) with a request running:
	// three of its intervals later router 1 frees it.
	if _, err := fs[0].r.Route(context.Background(), &router.RouteRequest{ID: "orphan", Tokens: p.next()}); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, 5*time.Second, "router 1 charges the orphan", func() string {
		if n := fs[1].r.ActiveRequests(); n != 1 {
			return fmt.Sprintf("%d active", n)
		}
		return ""
	})
	syncs[0].Stop()
	testutil.Until(t, 5*time.Second, "router 1 frees what it charged for silent router 0", func() string {
		if st := syncs[1].Stats(); st.Silent != 1 || fs[1].r.ActiveRequests() != 0 {
			return fmt.Sprintf("%d active, stats %+v", fs[1].r.ActiveRequests(), st)
		}
		return ""
	})
}

// TestReplicaSilentBeforeItsFirstList: a router that dies with a request running is freed by the others
// whether or not they have had a list from it. A router publishes a list at its start (its interval
// known at once: an hour here, so it is not judged silent within the test); a router the others heard
// only through its load events (its lists off here, as for a replica started after that first list) is
// presumed to publish at their interval, its events keeping it alive. Before, what a router that died
// before its first list (10 s into its life) charged stayed charged until the stale-request expiry.
func TestReplicaSilentBeforeItsFirstList(t *testing.T) {
	for _, tc := range []struct {
		name  string
		every time.Duration // the dying router's list interval; negative: no lists
	}{{"first list at start", time.Hour}, {"events only", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			c := startTestCluster(t)
			ws := startSimWorkers(t, 2, 256)
			start := func(id string, every time.Duration) (*frontend, *ReplicaSync) {
				rs := NewReplicaSync(connect(t, c.URL()), ReplicaConfig{RouterID: id, ListInterval: every})
				t.Cleanup(rs.Stop)
				f := startFrontend(t, c.URL(), ws, DefaultSourceConfig(), func(cfg *router.Config) { cfg.OnLoad = rs.Observe })
				if err := rs.Start(f.r); err != nil {
					t.Fatal(err)
				}
				return f, rs
			}
			peer, peerSync := start("peer", 20*time.Millisecond) // subscribed before the other starts
			dying, dyingSync := start("dying", tc.every)
			if tc.every > 0 {
				testutil.Until(t, 5*time.Second, "the first list, at the dying router's start", func() string {
					if peerSync.Stats().Reconciled == 0 {
						return "no list"
					}
					return ""
				})
			}
			if _, err := dying.r.Route(context.Background(), &router.RouteRequest{ID: "orphan", Tokens: newPrompts(5, 1).next()}); err != nil {
				t.Fatal(err)
			}
			testutil.Until(t, 5*time.Second, "the peer charges the request", func() string {
				if n := peer.r.ActiveRequests(); n != 1 {
					return fmt.Sprintf("%d active", n)
				}
				return ""
			})
			dyingSync.Stop()
			if tc.every > 0 {
				// Judged on the hour its first list announced: not silent after many of the peer's own.
				lists := peerSync.Stats()
				testutil.Until(t, 5*time.Second, "sweeps of the peer", func() string {
					if peerSync.Stats().Own < lists.Own+5 {
						return "waiting"
					}
					return ""
				})
				if st := peerSync.Stats(); st.Silent != 0 || peer.r.ActiveRequests() != 1 {
					t.Fatalf("a router an hour between its lists judged silent: %d active, %+v", peer.r.ActiveRequests(), st)
				}
				return
			}
			testutil.Until(t, 5*time.Second, "the peer frees what it charged for the dying router", func() string {
				if st := peerSync.Stats(); st.Silent != 1 || peer.r.ActiveRequests() != 0 {
					return fmt.Sprintf("%d active, stats %+v", peer.r.ActiveRequests(), st)
				}
				return ""
			})
		})
	}
}

package natsplane

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/internal/testutil"
	"github.com/kvroute/kvroute/scoring"
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
		for i := 0; i < routers; i++ {
			seed := uint64(42 + i)
			var rs *ReplicaSync
			if sync {
				rs = NewReplicaSync(connect(t, c.URL()), ReplicaConfig{RouterID: fmt.Sprintf("r%d", i)})
				t.Cleanup(rs.Stop)
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

package router

import (
	"context"
	"testing"

	"github.com/kvroute/kvroute/internal/testutil"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/workers/kvevents"
	"github.com/kvroute/kvroute/workers/registry"
)

// TestHostTierCreditedWithHostWeight: a worker's blocks stored with medium "CPU" (offloaded to host
// memory) are not device overlap; they are credited with --router-host-cache-hit-weight, so the worker
// holding the prompt on its host tier costs less than an idle one with nothing, and more than a worker
// holding it on the device.
func TestHostTierCreditedWithHostWeight(t *testing.T) {
	for _, preset := range []scoring.Preset{scoring.PresetDynamo, scoring.PresetKVRoute} {
		t.Run(string(preset), func(t *testing.T) { hostTierCredited(t, preset) })
	}
}

func hostTierCredited(t *testing.T, preset scoring.Preset) {
	r := newRouter(t, 4)
	cfg := r.Config()
	cfg.Preset = preset
	if err := r.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	prompt := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	host := startPublisher(t, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", kvevents.LayoutMap, nil)
	defer host.stop()
	if err := r.AddWorker(registry.Spec{ID: 1, Events: host.p.Addr(), Replay: host.p.ReplayAddr()}); err != nil {
		t.Fatal(err)
	}
	if err := r.AddWorker(registry.Spec{ID: 2}); err != nil {
		t.Fatal(err)
	}
	b := stored(0, false, []uint64{11, 12, 13, 14}, prompt)
	b.Events[0].Medium = "CPU"
	host.publish(t, b)
	testutil.Eventually(t, "host-tier blocks indexed", func() bool {
		for _, s := range r.Overlap(r.HashTokens(nil, prompt, ""), nil) {
			if s.Worker.WorkerID == 1 && s.Host == 4 {
				return true
			}
		}
		return false
	})
	if got := overlapOf(r, prompt, 1); got != 0 {
		t.Fatalf("host-tier blocks counted as %d device blocks", got)
	}
	res, err := r.Route(context.Background(), &RouteRequest{ID: "a", Tokens: prompt, ReturnCosts: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Worker.WorkerID != 1 || res.OverlapBlocks != 0 {
		t.Fatalf("routed to %d with device overlap %d, want worker 1 by its host tier", res.Worker.WorkerID, res.OverlapBlocks)
	}
	w := scoring.DefaultConfig().HostCacheHitWeight
	var c1, c2 float64
	for _, c := range res.Candidates {
		switch c.Worker.WorkerID {
		case 1:
			c1 = c.Cost
		case 2:
			c2 = c.Cost
		}
	}
	if preset == scoring.PresetKVRoute {
		// In prompt tokens: worker 1 recomputes a quarter of the 16 tokens (its TTFT on an idle fleet, where
		// fresh work costs nobody else a wait), worker 2 all of them, three quarters a dead copy of worker 1's
		// host tier (WorkWeight each).
		u := (1 - w) * 16
		if c1 >= c2 || c1 < u || c1 > u*1.01 || c2 < 16+scoring.WorkWeight*w*16 || c2 > (16+scoring.WorkWeight*w*16)*1.01 {
			t.Fatalf("kvroute costs: worker 1 %v, worker 2 %v", c1, c2)
		}
		return
	}
	// Dynamo's cost: ISL 16 tokens = 4 blocks of prefill, less 0.75 × 4 host blocks, plus 4 decode blocks.
	if want := (4 - w*4) + 4; c1 != want || c2 != 8 {
		t.Fatalf("costs: worker 1 %v (want %v), worker 2 %v (want 8)", c1, want, c2)
	}
}

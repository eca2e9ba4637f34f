package router

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/testutil"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/workers/kvevents"
	"github.com/kvroute/kvroute/workers/registry"
)

// TestEvictionAgeFromEvents: under the kvroute preset the router learns how old what an engine evicts
// is from the engine's own events. A request routed to worker 1 ends; its engine stores its four blocks,
// then evicts the last one (a Removed event over ZMQ): from the next decision at least sched.EvictedEvery
// later, Loads reports that worker 1 evicts blocks freed when that request ended.
func TestEvictionAgeFromEvents(t *testing.T) {
	r := newRouter(t, 4)
	if cfg := r.Config(); cfg.Preset != scoring.PresetKVRoute || !cfg.UseKVEvents {
		t.Fatalf("default preset %q, events %v: want kvroute with events", cfg.Preset, cfg.UseKVEvents)
	}
	p := startPublisher(t, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", kvevents.LayoutMap, nil)
	defer p.stop()
	if err := r.AddWorker(registry.Spec{ID: 1, Events: p.p.Addr(), Replay: p.p.ReplayAddr()}); err != nil {
		t.Fatal(err)
	}
	prompt := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	if _, err := r.Route(context.Background(), &RouteRequest{ID: "a", Tokens: prompt}); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if err := r.Free("a"); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	p.publish(t, stored(0, false, []uint64{11, 12, 13, 14}, prompt))
	testutil.Eventually(t, "blocks indexed", func() bool { return overlapOf(r, prompt, 1) == 4 })
	p.publish(t, &kvevents.Batch{Events: []kvevents.Event{{Kind: kvevents.Removed, BlockHashes: []uint64{14}, Medium: "GPU"}}})
	testutil.Eventually(t, "last block evicted", func() bool { return overlapOf(r, prompt, 1) == 3 })
	probe := 0
	testutil.Eventually(t, "eviction age learned", func() bool {
		probe++
		id := fmt.Sprint("probe", probe)
		if _, err := r.Route(context.Background(), &RouteRequest{ID: id, Tokens: []uint32{99, 98, 97, 96}}); err != nil {
			t.Fatal(err)
		}
		if err := r.Free(id); err != nil {
			t.Fatal(err)
		}
		for _, l := range r.Loads() {
			if l.Worker.WorkerID == 1 && !l.EvictingFreedAt.IsZero() {
				if at := l.EvictingFreedAt; at.Before(before) || at.After(after) {
					t.Fatalf("worker 1 evicts blocks freed at %v, want the end of request a (%v – %v)", at, before, after)
				}
				return true
			}
		}
		return false
	})
}

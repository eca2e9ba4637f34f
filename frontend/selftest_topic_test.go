package frontend

import (
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/internal/testutil"
	"github.com/kvroute/kvroute/workers/client"
	"github.com/kvroute/kvroute/workers/mocker"
	"github.com/kvroute/kvroute/workers/registry"
)

// The registration self-test runs for workers whose publishers connect to the router's bind socket
// (registered by topic) as it does for directly subscribed ones: a worker that publishes under another
// topic than its registration names is caught by the canary at startup.
func TestSelfTestRunsForTopicWorkers(t *testing.T) {
	system := actors.NewSystem(nil)
	rcfg := router.DefaultConfig(16)
	rcfg.Worker.BindEndpoints = []string{"tcp://127.0.0.1:*"}
	rcfg.Worker.Grace = time.Hour // only the self-test may mark the worker
	r, err := router.New(system, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop(); system.Shutdown() })

	_, wm := fixtureModels(t, "m")
	start := func(id int, topic string) *mocker.Worker {
		wc := mocker.WorkerConfig{ID: id, Engine: mocker.DefaultEngineConfig(), Model: wm, KVEvents: mocker.DefaultKVEventsConfig(), HTTPAddr: "127.0.0.1:0"}
		wc.Engine.BlockSize, wc.Engine.SpeedupRatio = 16, 100
		wc.KVEvents.Endpoint, wc.KVEvents.ReplayEndpoint, wc.KVEvents.Topic = r.Fleet.BindAddr(), "tcp://127.0.0.1:*", topic
		w, err := mocker.StartWorker(wc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Close() })
		return w
	}
	good, typo := start(1, "kv@good"), start(2, "kv@typo")
	for i, w := range []*mocker.Worker{good, typo} {
		spec := registry.Spec{ID: uint64(i + 1), URL: w.URL(), Topic: "kv@good", BlockSize: 16}
		if i == 1 {
			spec.Topic = "kv@registered"
		}
		if err := r.AddWorker(spec); err != nil {
			t.Fatal(err)
		}
	}
	pool := NewWorkerPool(client.DefaultConfig())
	t.Cleanup(pool.Close)
	cfg := DefaultHealthConfig()
	// The canary's window is also how long the good worker's publisher has to finish joining the bind
	// socket (a PUB drops what it sends before the subscription reaches it): 2 s was not always enough on
	// a loaded 2-core machine. The test waits for the typo worker's whole window, so it stays short.
	cfg.Interval, cfg.ModelName, cfg.SelfTestTimeout = 20*time.Millisecond, "m", 6*time.Second
	mon := NewMonitor(r, pool, cfg, nil)
	mon.Start()
	t.Cleanup(mon.Stop)
	testutil.Within(t, 15*time.Second, "the mistopiced worker degraded by the canary", func() bool {
		st, _ := r.Fleet.StatusOf(2)
		return strings.Contains(st.Degraded, "canary")
	})
	if st, _ := r.Fleet.StatusOf(1); st.Degraded != "" || st.IndexedBlocks == 0 {
		t.Fatalf("the well-configured topic worker: %+v", st)
	}
}

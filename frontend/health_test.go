package frontend

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/internal/testutil"
	"github.com/kvroute/kvroute/workers/client"
	"github.com/kvroute/kvroute/workers/mocker"
	"github.com/kvroute/kvroute/workers/registry"
)

// flakyProxy fronts a worker's HTTP API and can make its /health fail.
type flakyProxy struct {
	down atomic.Bool
	url  string
}

func startFlakyProxy(t *testing.T, target string) *flakyProxy {
	t.Helper()
	u, _ := url.Parse(target)
	rp := httputil.NewSingleHostReverseProxy(u)
	p := &flakyProxy{}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.down.Load() {
			http.Error(w, "engine dead", http.StatusServiceUnavailable)
			return
		}
		rp.ServeHTTP(w, r)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	p.url = "http://" + ln.Addr().String()
	return p
}

// startHealthRig starts n simulated workers with the given block size, a router (block size 16) with
// them registered (edit may change each spec first) and a health monitor checking every 20 ms.
func startHealthRig(t *testing.T, n, workerBlockSize int, edit func(i int, sp *registry.Spec)) *router.Router {
	t.Helper()
	wm, err := mocker.LoadModel(fixtureModel, "m")
	if err != nil {
		t.Fatal(err)
	}
	tmpl := mocker.WorkerConfig{Engine: mocker.DefaultEngineConfig(), Model: wm, KVEvents: mocker.DefaultKVEventsConfig()}
	tmpl.Engine.BlockSize, tmpl.Engine.SpeedupRatio = workerBlockSize, 100
	fleet, err := mocker.StartFleet(mocker.FleetConfig{NumWorkers: n, Template: tmpl, FirstID: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fleet.Close() })
	system := actors.NewSystem(nil)
	r, err := router.New(system, router.DefaultConfig(16))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop(); system.Shutdown() })
	for i, s := range fleet.Specs() {
		sp, _ := registry.Parse(s)
		if edit != nil {
			edit(i, &sp)
		}
		if err := r.AddWorker(sp); err != nil {
			t.Fatal(err)
		}
	}
	pool := NewWorkerPool(client.DefaultConfig())
	t.Cleanup(pool.Close)
	cfg := DefaultHealthConfig()
	cfg.Interval, cfg.ModelName = 20*time.Millisecond, "m"
	mon := NewMonitor(r, pool, cfg, nil)
	mon.Start()
	t.Cleanup(mon.Stop)
	return r
}

func TestHealthChecksTakeWorkerOutAndResyncIt(t *testing.T) {
	var proxy *flakyProxy
	r := startHealthRig(t, 2, 16, func(i int, sp *registry.Spec) {
		if i == 0 {
			proxy = startFlakyProxy(t, sp.URL)
			sp.URL = proxy.url
		}
	})

	// Both workers pass the compatibility self-test: the canary's blocks come back under our hashes.
	testutil.Within(t, 15*time.Second, "self-tests", func() bool {
		for _, st := range r.Workers() {
			if st.IndexedBlocks < 2 || st.Degraded != "" {
				return false
			}
		}
		return true
	})
	// The scrape hands the scheduler each worker's cached blocks (the index's count): its free KV room.
	testutil.Within(t, 15*time.Second, "free KV blocks known", func() bool {
		for _, l := range r.Loads() {
			st, _ := r.Fleet.StatusOf(l.Worker.WorkerID)
			if l.FreeKVBlocks < 0 || st.IndexedBlocks == 0 {
				return false
			}
		}
		return true
	})
	proxy.down.Store(true)
	testutil.Within(t, 15*time.Second, "worker 1 unhealthy", func() bool {
		st, _ := r.Fleet.StatusOf(1)
		return !st.Healthy && st.IndexedBlocks == 0
	})
	for i := 0; i < 6; i++ {
		res, err := r.Route(context.Background(), &router.RouteRequest{ID: "q" + string(rune('a'+i)), Tokens: make([]uint32, 64)})
		if err != nil || res.Worker.WorkerID != 2 {
			t.Fatalf("routed to %v (%v) while worker 1 is unhealthy", res.Worker, err)
		}
		_ = r.Free("q" + string(rune('a'+i)))
	}
	proxy.down.Store(false)
	// Back: resynced from its replay buffer (the canary blocks return) and routable again.
	testutil.Within(t, 15*time.Second, "worker 1 healthy and resynced", func() bool {
		st, _ := r.Fleet.StatusOf(1)
		return st.Healthy && st.IndexedBlocks >= 2
	})
	if st, _ := r.Fleet.StatusOf(1); st.Unhealthy != "" || st.Restarts == 0 {
		t.Fatalf("status after return: %+v", st)
	}
}

func TestSelfTestFlagsBlockSizeMismatch(t *testing.T) {
	r := startHealthRig(t, 1, 32, nil) // the router hashes blocks of 16
	testutil.Within(t, 15*time.Second, "degraded", func() bool {
		st, _ := r.Fleet.StatusOf(1)
		return strings.Contains(st.Degraded, "block size 32")
	})
}

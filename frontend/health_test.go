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

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestHealthChecksTakeWorkerOutAndResyncIt(t *testing.T) {
	wm, err := mocker.LoadModel(fixtureModel, "m")
	if err != nil {
		t.Fatal(err)
	}
	tmpl := mocker.WorkerConfig{Engine: mocker.DefaultEngineConfig(), Model: wm, KVEvents: mocker.DefaultKVEventsConfig()}
	tmpl.Engine.BlockSize, tmpl.Engine.SpeedupRatio = 16, 100
	fleet, err := mocker.StartFleet(mocker.FleetConfig{NumWorkers: 2, Template: tmpl, FirstID: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	system := actors.NewSystem(nil)
	r, err := router.New(system, router.DefaultConfig(16))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { r.Stop(); system.Shutdown() }()
	proxy := startFlakyProxy(t, fleet.Workers[0].URL())
	for i, s := range fleet.Specs() {
		sp, _ := registry.Parse(s)
		if i == 0 {
			sp.URL = proxy.url
		}
		if err := r.AddWorker(sp); err != nil {
			t.Fatal(err)
		}
	}
	pool := NewWorkerPool(client.DefaultConfig())
	defer pool.Close()
	cfg := DefaultHealthConfig()
	cfg.Interval, cfg.ModelName = 20*time.Millisecond, "m"
	mon := NewMonitor(r, pool, cfg, nil)
	mon.Start()
	defer mon.Stop()

	// Both workers pass the compatibility self-test: the canary's blocks come back under our hashes.
	eventually(t, "self-tests", func() bool {
		for _, st := range r.Workers() {
			if st.IndexedBlocks < 2 || st.Degraded != "" {
				return false
			}
		}
		return true
	})
	proxy.down.Store(true)
	eventually(t, "worker 1 unhealthy", func() bool {
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
	eventually(t, "worker 1 healthy and resynced", func() bool {
		st, _ := r.Fleet.StatusOf(1)
		return st.Healthy && st.IndexedBlocks >= 2
	})
	if st, _ := r.Fleet.StatusOf(1); st.Unhealthy != "" || st.Restarts == 0 {
		t.Fatalf("status after return: %+v", st)
	}
}

func TestSelfTestFlagsBlockSizeMismatch(t *testing.T) {
	wm, err := mocker.LoadModel(fixtureModel, "m")
	if err != nil {
		t.Fatal(err)
	}
	tmpl := mocker.WorkerConfig{Engine: mocker.DefaultEngineConfig(), Model: wm, KVEvents: mocker.DefaultKVEventsConfig()}
	tmpl.Engine.BlockSize, tmpl.Engine.SpeedupRatio = 32, 100 // the router hashes blocks of 16
	fleet, err := mocker.StartFleet(mocker.FleetConfig{NumWorkers: 1, Template: tmpl, FirstID: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	system := actors.NewSystem(nil)
	r, err := router.New(system, router.DefaultConfig(16))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { r.Stop(); system.Shutdown() }()
	sp, _ := registry.Parse(fleet.Specs()[0])
	if err := r.AddWorker(sp); err != nil {
		t.Fatal(err)
	}
	pool := NewWorkerPool(client.DefaultConfig())
	defer pool.Close()
	cfg := DefaultHealthConfig()
	cfg.Interval, cfg.ModelName = 20*time.Millisecond, "m"
	mon := NewMonitor(r, pool, cfg, nil)
	mon.Start()
	defer mon.Stop()
	eventually(t, "degraded", func() bool {
		st, _ := r.Fleet.StatusOf(1)
		return strings.Contains(st.Degraded, "block size 32")
	})
}

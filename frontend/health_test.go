package frontend

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
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

// defaultRouter is a router with the default configuration (16-token blocks), stopped when tb ends.
func defaultRouter(tb testing.TB) *router.Router {
	tb.Helper()
	system := actors.NewSystem(nil)
	r, err := router.New(system, router.DefaultConfig(16))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.Stop(); system.Shutdown() })
	return r
}

// startHealthRig starts n simulated workers with the given block size, a router (block size 16) with
// them registered (edit may change each spec first) and a health monitor checking every 20 ms.
func startHealthRig(t *testing.T, n, workerBlockSize int, edit func(i int, sp *registry.Spec)) *router.Router {
	t.Helper()
	_, wm := fixtureModels(t, "m")
	tmpl := mocker.WorkerConfig{Engine: mocker.DefaultEngineConfig(), Model: wm, KVEvents: mocker.DefaultKVEventsConfig()}
	tmpl.Engine.BlockSize, tmpl.Engine.SpeedupRatio = workerBlockSize, 100
	fleet, err := mocker.StartFleet(mocker.FleetConfig{NumWorkers: n, Template: tmpl, FirstID: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fleet.Close() })
	r := defaultRouter(t)
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

// TestSelfTestFlagsBlockSizeMismatch: a worker registered without a block size (a --worker line or a
// record that leaves it out) whose engine reports another block size than the router's is degraded by
// its first health check. (A registration that states another block size is refused outright.)
func TestSelfTestFlagsBlockSizeMismatch(t *testing.T) {
	r := startHealthRig(t, 1, 32, func(_ int, sp *registry.Spec) { sp.BlockSize = 0 }) // the router hashes blocks of 16
	testutil.Within(t, 15*time.Second, "degraded", func() bool {
		st, _ := r.Fleet.StatusOf(1)
		return strings.Contains(st.Degraded, "block size 32")
	})
}

// TestHealthRoundSpreads: a round spread over a window starts its last worker's check no earlier than
// its slot (the window × 39/40 for the 40th of 40 workers) and still checks every worker once; a round
// with no window (CheckAll) checks them all too.
func TestHealthRoundSpreads(t *testing.T) {
	var mu sync.Mutex
	var arrivals []time.Time
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			mu.Lock()
			arrivals = append(arrivals, time.Now())
			mu.Unlock()
		}
		w.WriteHeader(http.StatusOK)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	r := defaultRouter(t)
	const n = 40
	for id := range uint64(n) {
		if err := r.AddWorker(registry.Spec{ID: id + 1, URL: "http://" + ln.Addr().String()}); err != nil {
			t.Fatal(err)
		}
	}
	pool := NewWorkerPool(client.DefaultConfig())
	t.Cleanup(pool.Close)
	cfg := DefaultHealthConfig()
	cfg.SelfTest = false
	mon := NewMonitor(r, pool, cfg, nil)
	const spread = 400 * time.Millisecond
	start := time.Now()
	mon.round(context.Background(), spread)
	mu.Lock()
	got := slices.Clone(arrivals)
	arrivals = nil
	mu.Unlock()
	if len(got) != n {
		t.Fatalf("%d checks in a round of %d workers", len(got), n)
	}
	if last := slices.MaxFunc(got, time.Time.Compare); last.Sub(start) < spread*(n-1)/n {
		t.Fatalf("the last check %v after the round began, its slot at %v", last.Sub(start), spread*(n-1)/n)
	}
	mon.CheckAll(context.Background())
	mu.Lock()
	defer mu.Unlock()
	if len(arrivals) != n {
		t.Fatalf("%d checks in CheckAll of %d workers", len(arrivals), n)
	}
}

// BenchmarkHealthRound: one round of health checks over W workers, each its own local HTTP server
// answering /health and a 64 KiB /metrics (about a vLLM exposition's size), all at once (spread 0) and
// spread over a second (Start's, at the default 2 s interval): the most requests in flight at once
// over the servers, and the checks that failed (the one-second timeout) per round.
func BenchmarkHealthRound(b *testing.B) {
	var inFlight, most atomic.Int64
	body := []byte(strings.Repeat("# HELP some_other_metric a series the router skips\n", 1300))
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := inFlight.Add(1); n > most.Load() {
			most.Store(n)
		}
		defer inFlight.Add(-1)
		if r.URL.Path == "/metrics" {
			_, _ = w.Write(body)
		}
	})
	const w = 2000
	urls := make([]string, w)
	for i := range urls {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := &http.Server{Handler: handler}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		urls[i] = "http://" + ln.Addr().String()
	}
	for _, spread := range []time.Duration{0, time.Second} {
		b.Run(fmt.Sprintf("W=%d/spread=%v", w, spread), func(b *testing.B) {
			r := defaultRouter(b)
			for i, u := range urls {
				if err := r.AddWorker(registry.Spec{ID: uint64(i + 1), URL: u}); err != nil {
					b.Fatal(err)
				}
			}
			pool := NewWorkerPool(client.DefaultConfig())
			defer pool.Close()
			cfg := DefaultHealthConfig()
			cfg.SelfTest = false
			mon := NewMonitor(r, pool, cfg, nil)
			most.Store(0)
			b.ResetTimer()
			for range b.N {
				mon.round(context.Background(), spread)
			}
			b.StopTimer()
			failed := 0
			mon.mu.Lock()
			for _, f := range mon.fails {
				failed += f
			}
			mon.mu.Unlock()
			b.ReportMetric(float64(most.Load()), "max-in-flight")
			b.ReportMetric(float64(failed)/float64(b.N), "failed/round")
		})
	}
}

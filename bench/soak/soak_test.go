//go:build soak

package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/frontend"
	"github.com/kvroute/kvroute/model"
	"github.com/kvroute/kvroute/workers/client"
	"github.com/kvroute/kvroute/workers/mocker"
	"github.com/kvroute/kvroute/workers/registry"
)

const fixtureModel = "../../testdata/models/Qwen3-VL-2B-Instruct"

func envDuration(t *testing.T, key string, def time.Duration) time.Duration {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", key, v, err)
	}
	return d
}

func envFloat(t *testing.T, key string, def float64) float64 {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", key, v, err)
	}
	return f
}

// startServe starts what `kvroute serve` runs, in this process, and returns the frontend's base address.
func startServe(t *testing.T, workers int, speedup float64) (addr, modelName string) {
	const name = "Qwen3-VL-2B-Instruct"
	m, err := model.Load(fixtureModel)
	if err != nil {
		t.Fatal(err)
	}
	wm, err := mocker.LoadModel(fixtureModel, name)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := mocker.WorkerConfig{Engine: mocker.DefaultEngineConfig(), Model: wm, KVEvents: mocker.DefaultKVEventsConfig()}
	tmpl.Engine.BlockSize = 16
	tmpl.Engine.NumGPUBlocks = 4096
	tmpl.Engine.SpeedupRatio = speedup
	fleet, err := mocker.StartFleet(mocker.FleetConfig{NumWorkers: workers, Template: tmpl, FirstID: 1})
	if err != nil {
		t.Fatal(err)
	}
	system := actors.NewSystem(nil)
	r, err := router.New(system, router.DefaultConfig(16))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range fleet.Specs() {
		sp, err := registry.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.AddWorker(sp); err != nil {
			t.Fatal(err)
		}
	}
	pool := frontend.NewWorkerPool(client.DefaultConfig())
	api := frontend.NewOpenAIAPI(r, m, name, system, pool, frontend.OpenAIConfig{RequestTimeout: 30 * time.Second},
		frontend.NewFrontendMetrics(nil))
	srv := frontend.NewServer(frontend.ServerConfig{}, api, &frontend.RouterAPI{R: r})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Shutdown()
		pool.Close()
		r.Stop()
		system.Shutdown()
		_ = fleet.Close()
	})
	return ln.Addr().String(), name
}

// sample is one reading of the process.
type sample struct {
	at         time.Duration
	rss        int64 // bytes
	goroutines int
}

func rss(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// TestSoak runs the load; see doc.go for the knobs (SOAK_* environment variables).
func TestSoak(t *testing.T) {
	duration := envDuration(t, "SOAK_DURATION", 60*time.Second)
	workers := int(envFloat(t, "SOAK_WORKERS", 4))
	speedup := envFloat(t, "SOAK_SPEEDUP", 100)
	conc := int(envFloat(t, "SOAK_CONCURRENCY", 64))
	minRPS := envFloat(t, "SOAK_MIN_RPS", 5000)
	window := min(10*time.Second, duration/3)

	addr, name := startServe(t, workers, speedup)
	rng := rand.New(rand.NewPCG(1, 2))
	bodies := make([][]byte, 1024)
	for i := range bodies {
		var p strings.Builder
		for range 4 + rng.IntN(16) {
			fmt.Fprintf(&p, "w%d ", rng.IntN(2000))
		}
		bodies[i] = fmt.Appendf(nil, `{"model":%q,"prompt":%q,"max_tokens":%d}`, name, p.String(), 1+rng.IntN(4))
	}
	hc := &fasthttp.HostClient{Addr: addr, MaxConns: conc, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	url := "http://" + addr + "/v1/completions"

	type worker struct {
		lat  []time.Duration
		errs map[string]int
	}
	run := func(ctx context.Context, seed uint64, record bool, w *worker, done *atomic.Int64) {
		rng := rand.New(rand.NewPCG(seed, 9))
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		for ctx.Err() == nil {
			req.Reset()
			req.SetRequestURI(url)
			req.Header.SetMethod(fasthttp.MethodPost)
			req.Header.SetContentType("application/json")
			req.SetBody(bodies[rng.IntN(len(bodies))])
			t0 := time.Now()
			err := hc.DoTimeout(req, resp, 10*time.Second)
			d := time.Since(t0)
			if !record {
				continue
			}
			switch {
			case err != nil:
				w.errs[err.Error()]++
			case resp.StatusCode() != fasthttp.StatusOK:
				w.errs[fmt.Sprintf("status %d: %.200s", resp.StatusCode(), resp.Body())]++
			default:
				w.lat = append(w.lat, d)
			}
			done.Add(1)
		}
	}

	// Warm-up: connections, pools (fasthttp's worker pools settle after their 10 s idle period), caches.
	{
		ctx, cancel := context.WithTimeout(context.Background(), envDuration(t, "SOAK_WARMUP", 10*time.Second))
		var wg sync.WaitGroup
		var n atomic.Int64
		for i := range conc {
			wg.Add(1)
			go func() { defer wg.Done(); run(ctx, uint64(1000+i), false, nil, &n) }()
		}
		wg.Wait()
		cancel()
	}

	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	start := time.Now()
	var samples []sample
	var smu sync.Mutex
	takeSample := func() {
		runtime.GC() // RSS after a collection: what is live, not what the GC has not reached yet
		s := sample{at: time.Since(start), rss: rss(t), goroutines: runtime.NumGoroutine()}
		smu.Lock()
		samples = append(samples, s)
		smu.Unlock()
	}
	var done atomic.Int64
	ws := make([]*worker, conc)
	var wg sync.WaitGroup
	for i := range conc {
		ws[i] = &worker{errs: map[string]int{}}
		wg.Add(1)
		go func() { defer wg.Done(); run(ctx, uint64(i), true, ws[i], &done) }()
	}
	takeSample()
	tick := time.NewTicker(500 * time.Millisecond)
	var last int64
	for loop := true; loop; {
		select {
		case <-ctx.Done():
			loop = false
		case <-tick.C:
			takeSample()
			if n := done.Load(); len(samples)%2 == 1 {
				smu.Lock()
				cur := samples[len(samples)-1]
				smu.Unlock()
				t.Logf("t=%3.0fs %6d req/s  %4d goroutines  %6.1f MiB", time.Since(start).Seconds(), n-last, cur.goroutines, float64(cur.rss)/(1<<20))
				last = n
			}
		}
	}
	tick.Stop()
	wg.Wait()
	elapsed := time.Since(start)
	takeSample()

	var lat []time.Duration
	errs := map[string]int{}
	for _, w := range ws {
		lat = append(lat, w.lat...)
		for k, v := range w.errs {
			errs[k] += v
		}
	}
	slices.Sort(lat)
	nerr := 0
	for _, v := range errs {
		nerr += v
	}
	total := len(lat) + nerr
	rps := float64(total) / elapsed.Seconds()
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	// level is the median of the samples in [from, to]: the flatness check compares levels, and a median
	// ignores the instantaneous spikes of fasthttp's worker pools (a goroutine per busy connection).
	level := func(from, to time.Duration) (rssMiB float64, gor float64) {
		var r, g []float64
		for _, s := range samples {
			if s.at >= from && s.at <= to {
				r = append(r, float64(s.rss)/(1<<20))
				g = append(g, float64(s.goroutines))
			}
		}
		if len(r) == 0 {
			return 0, 0
		}
		slices.Sort(r)
		slices.Sort(g)
		return r[len(r)/2], g[len(g)/2]
	}
	firstRSS, firstG := level(0, window)
	lastRSS, lastG := level(elapsed-window, elapsed+time.Second)
	s0, s1 := samples[0], samples[len(samples)-1]
	report := fmt.Sprintf(`soak: %v, %d workers at %gx, %d connections
  requests   %d (%d errors), %.0f req/s
  latency    p50 %v  p90 %v  p99 %v  p99.9 %v  max %v
  RSS        start %.1f MiB  end %.1f MiB  first %v median %.1f MiB  last %v median %.1f MiB (%+.1f%%)
  goroutines start %d  end %d  first %v median %.0f  last %v median %.0f (%+.1f%%)`,
		elapsed.Round(time.Millisecond), workers, speedup, conc,
		total, nerr, rps,
		pct(0.5), pct(0.9), pct(0.99), pct(0.999), pct(1),
		float64(s0.rss)/(1<<20), float64(s1.rss)/(1<<20), window, firstRSS, window, lastRSS, 100*(lastRSS/firstRSS-1),
		s0.goroutines, s1.goroutines, window, firstG, window, lastG, 100*(lastG/firstG-1))
	t.Log(report)
	fmt.Println(report)
	for k, v := range errs {
		t.Errorf("%d× %s", v, k)
	}
	if rps < minRPS {
		t.Errorf("%.0f req/s, want at least %.0f (SOAK_MIN_RPS)", rps, minRPS)
	}
	if d := lastRSS/firstRSS - 1; d > 0.10 || d < -0.10 {
		t.Errorf("RSS moved %+.1f%% between the first and last %v (limit ±10%%)", 100*d, window)
	}
	if d := lastG/firstG - 1; d > 0.10 || d < -0.10 {
		t.Errorf("goroutines moved %+.1f%% between the first and last %v (limit ±10%%)", 100*d, window)
	}
}

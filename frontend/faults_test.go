package frontend

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/internal/testutil"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/workers/client"
	"github.com/kvroute/kvroute/workers/mocker"
	"github.com/kvroute/kvroute/workers/registry"
)

// badWorker is an OpenAI-compatible worker that fails in one way, on every request.
type badWorker struct {
	mode string // "refuse" (connection closed before any byte), "500", "hang" (never answers), "midstream"
	ln   net.Listener
	hits sync.WaitGroup
	mu   sync.Mutex
	n    int
}

func startBadWorker(t *testing.T, mode string) *badWorker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &badWorker{mode: mode, ln: ln}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop); ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go b.serve(c, stop)
		}
	}()
	return b
}

func (b *badWorker) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}

func (b *badWorker) serve(c net.Conn, stop chan struct{}) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(r)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		if req.URL.Path == "/health" || req.URL.Path == "/metrics" {
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
			continue
		}
		b.mu.Lock()
		b.n++
		b.mu.Unlock()
		switch b.mode {
		case "refuse":
			return
		case "500":
			body := `{"error":{"message":"engine dead","type":"internal_error","code":500}}`
			fmt.Fprintf(c, "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		case "hang":
			<-stop
			return
		case "midstream":
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
			chunk := `data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}` + "\n\n"
			fmt.Fprintf(c, "%x\r\n%s\r\n", len(chunk), chunk)
			return // dies after the first chunk reached the client
		}
	}
}

// faultStack is one healthy simulated worker (id 1) and one bad worker (id 2) behind the frontend.
func faultStack(t *testing.T, mode string, migration int, timeout time.Duration) (base string, bad *badWorker) {
	t.Helper()
	const name = "Qwen3-VL-2B-Instruct"
	m, wm := fixtureModels(t, name)
	tmpl := mocker.WorkerConfig{Engine: mocker.DefaultEngineConfig(), Model: wm, KVEvents: mocker.DefaultKVEventsConfig()}
	tmpl.Engine.BlockSize = 16
	tmpl.Engine.NumGPUBlocks = 1024
	tmpl.Engine.SpeedupRatio = 100
	fleet, err := mocker.StartFleet(mocker.FleetConfig{NumWorkers: 1, Template: tmpl, FirstID: 1})
	if err != nil {
		t.Fatal(err)
	}
	system := actors.NewSystem(nil)
	rcfg := router.DefaultConfig(16)
	rcfg.Scoring.MigrationLimit = migration
	seed := uint64(3)
	rcfg.Seed = &seed
	r, err := router.New(system, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	good, err := registry.Parse(fleet.Specs()[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := r.AddWorker(good); err != nil {
		t.Fatal(err)
	}
	bad = startBadWorker(t, mode)
	if err := r.AddWorker(registry.Spec{ID: 2, URL: "http://" + bad.ln.Addr().String(), BlockSize: 16, TotalKVBlocks: 1024}); err != nil {
		t.Fatal(err)
	}
	ccfg := client.DefaultConfig()
	ccfg.ResponseTimeout = timeout // a worker that never answers is given up on (before any byte: migrated)
	pool := NewWorkerPool(ccfg)
	api := NewOpenAIAPI(r, m, name, system, pool, OpenAIConfig{MigrationLimit: migration, RequestTimeout: 30 * time.Second}, NewFrontendMetrics(nil))
	return serveMonitored(t, api, nil, func() { _ = fleet.Close() }), bad
}

// fire sends n distinct requests concurrently, each bounded by a client deadline, and returns their
// statuses, bodies and serving workers. A request that exceeds the deadline fails the test: none may hang.
func fire(t *testing.T, base string, n int, stream bool) (status []int, body []string, worker []string) {
	t.Helper()
	status, body, worker = make([]int, n), make([]string, n), make([]string, n)
	hc := &http.Client{Timeout: 20 * time.Second}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			b := fmt.Sprintf(`{"model":"Qwen3-VL-2B-Instruct","messages":[{"role":"user","content":"fault %d %s"}],"max_tokens":4,"stream":%v}`,
				i, strings.Repeat("x ", 40+i), stream)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(b))
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Errorf("request %d body: %v", i, err)
			}
			status[i], body[i], worker[i] = resp.StatusCode, string(raw), resp.Header.Get("x-kvroute-worker-id")
		}()
	}
	wg.Wait()
	return status, body, worker
}

// A worker that fails before any byte reached the client: every request routed to it is migrated to the
// healthy worker and succeeds; none hangs.
func TestFaultsBeforeFirstByteMigrate(t *testing.T) {
	tests := []struct {
		name, mode string
		stream     bool
	}{
		{"connection closed, unary", "refuse", false},
		{"connection closed, streaming", "refuse", true},
		{"500, unary", "500", false},
		{"500, streaming", "500", true},
		{"no answer, unary", "hang", false},
		{"no answer, streaming", "hang", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base, bad := faultStack(t, tc.mode, 1, time.Second)
			status, body, worker := fire(t, base, 12, tc.stream)
			if bad.count() == 0 {
				t.Fatalf("no request was routed to the failing worker")
			}
			for i := range status {
				if status[i] != 200 || worker[i] != "1" {
					t.Errorf("request %d: status %d on worker %q: %.200s", i, status[i], worker[i], body[i])
				}
				if tc.stream && !strings.Contains(body[i], "[DONE]") {
					t.Errorf("request %d: stream did not end: %.200s", i, body[i])
				}
			}
			t.Logf("%d requests hit the failing worker, all migrated", bad.count())
		})
	}
}

// Without migration the same failures are answered with an error at once, never a hang.
func TestFaultsWithoutMigrationFailFast(t *testing.T) {
	base, bad := faultStack(t, "refuse", 0, time.Second)
	status, body, _ := fire(t, base, 12, false)
	failed := 0
	for i := range status {
		switch {
		case status[i] == 200:
		case status[i] >= 500 && strings.Contains(body[i], `"error"`):
			failed++
		default:
			t.Errorf("request %d: status %d: %.200s", i, status[i], body[i])
		}
	}
	if failed == 0 || failed != bad.count() {
		t.Fatalf("%d requests failed, %d reached the failing worker", failed, bad.count())
	}
}

// A worker that dies after the first streamed chunk reached the client: the request cannot move, and its
// stream ends with an error event and [DONE] instead of hanging.
func TestFaultsDuringStreamEndWithError(t *testing.T) {
	base, bad := faultStack(t, "midstream", 1, time.Second)
	status, body, worker := fire(t, base, 12, true)
	if bad.count() == 0 {
		t.Fatalf("no request was routed to the failing worker")
	}
	broken := 0
	for i := range status {
		if status[i] != 200 || !strings.Contains(body[i], "[DONE]") {
			t.Errorf("request %d: status %d, stream not terminated: %.300s", i, status[i], body[i])
			continue
		}
		if worker[i] == "2" {
			broken++
			if !strings.Contains(body[i], `"error"`) || !strings.Contains(body[i], `"hi"`) {
				t.Errorf("request %d: want the first chunk then an error event: %.300s", i, body[i])
			}
		}
	}
	if broken != bad.count() {
		t.Fatalf("%d broken streams, %d requests reached the failing worker", broken, bad.count())
	}
}

// killableProxy stands in front of a worker's HTTP port; kill makes the worker look SIGKILLed (new
// connections refused, open ones cut), restore brings it back on the same address.
type killableProxy struct {
	addr, target string
	mu           sync.Mutex
	ln           net.Listener
	conns        map[net.Conn]struct{}
}

func startKillableProxy(t *testing.T, target string) *killableProxy {
	t.Helper()
	p := &killableProxy{target: target, conns: map[net.Conn]struct{}{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.kill)
	return p
}

func (p *killableProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[up] = struct{}{}, struct{}{}
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
}

func (p *killableProxy) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // reset, as the kernel does for a killed process's sockets
		}
		c.Close()
	}
	clear(p.conns)
}

func (p *killableProxy) restore(t *testing.T) {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatalf("re-listen on %s: %v", p.addr, err)
	}
	p.serve(ln)
}

// One of four workers dies (its port refuses, its connections are reset) under 150 requests/s with the
// default flags: no client sees an error. Its requests that fail before any byte are retried elsewhere
// (--migration-limit, default 3), and the first refused connection takes it out of the candidates
// (passive health) instead of letting it draw traffic until the health checks notice. When it answers
// again, the health check puts it back.
func TestKillOneOfFourUnderLoad(t *testing.T) {
	const name = "Qwen3-VL-2B-Instruct"
	m, wm := fixtureModels(t, name)
	tmpl := mocker.WorkerConfig{Engine: mocker.DefaultEngineConfig(), Model: wm, KVEvents: mocker.DefaultKVEventsConfig()}
	tmpl.Engine.BlockSize = 16
	tmpl.Engine.NumGPUBlocks = 1024
	tmpl.Engine.SpeedupRatio = 20
	fleet, err := mocker.StartFleet(mocker.FleetConfig{NumWorkers: 4, Template: tmpl, FirstID: 1})
	if err != nil {
		t.Fatal(err)
	}
	defaults := scoring.DefaultConfig()
	system := actors.NewSystem(nil)
	r, err := router.New(system, router.DefaultConfig(16))
	if err != nil {
		t.Fatal(err)
	}
	proxies := make([]*killableProxy, 4)
	for i, s := range fleet.Specs() {
		sp, err := registry.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		proxies[i] = startKillableProxy(t, strings.TrimPrefix(sp.URL, "http://"))
		sp.URL = "http://" + proxies[i].addr
		if err := r.AddWorker(sp); err != nil {
			t.Fatal(err)
		}
	}
	pool := NewWorkerPool(client.DefaultConfig())
	hc := DefaultHealthConfig()
	hc.Interval, hc.SelfTest = 200*time.Millisecond, false
	mon := NewMonitor(r, pool, hc, slog.New(slog.NewTextHandler(io.Discard, nil)))
	mon.Start()
	api := NewOpenAIAPI(r, m, name, system, pool, OpenAIConfig{MigrationLimit: defaults.MigrationLimit, PassiveHealth: true, RequestTimeout: 30 * time.Second}, NewFrontendMetrics(nil))
	base := serveMonitored(t, api, mon, func() { _ = fleet.Close() })

	const (
		rate     = 150
		duration = 3 * time.Second
		killAt   = time.Second
	)
	hcl := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var (
		wg               sync.WaitGroup
		mu               sync.Mutex
		errs             []string
		ok, afterKillOn4 int
	)
	killed := make(chan struct{})
	var killedAt time.Time
	tick := time.NewTicker(time.Second / rate) // the load's pace, not a wait for a condition
	defer tick.Stop()
	start := time.Now()
	for i := 0; time.Since(start) < duration; i++ {
		<-tick.C
		if i == int(killAt.Seconds()*rate) {
			proxies[3].kill()
			killedAt = time.Now()
			close(killed)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"kill %d %s"}],"max_tokens":2}`, name, i, strings.Repeat("y ", 20+i%50))
			resp, err := hcl.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(b))
			if err != nil {
				mu.Lock()
				errs = append(errs, err.Error())
				mu.Unlock()
				return
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			if resp.StatusCode != 200 {
				errs = append(errs, fmt.Sprintf("request %d: %d %.200s", i, resp.StatusCode, raw))
				return
			}
			ok++
			select {
			case <-killed:
				if resp.Header.Get("x-kvroute-worker-id") == "4" && time.Since(killedAt) > 100*time.Millisecond {
					afterKillOn4++
				}
			default:
			}
		}()
	}
	wg.Wait()
	for _, e := range errs[:min(len(errs), 10)] {
		t.Error(e)
	}
	st, _ := r.Fleet.StatusOf(4)
	t.Logf("%d requests at %d/s, %d ok, %d client-visible errors; worker 4 healthy=%v (%s); answered by worker 4 after the kill: %d",
		ok+len(errs), rate, ok, len(errs), st.Healthy, st.Unhealthy, afterKillOn4)
	if len(errs) > 0 {
		t.Fatalf("%d client-visible errors", len(errs))
	}
	if st.Healthy || !strings.HasPrefix(st.Unhealthy, "passive") {
		t.Fatalf("the killed worker is still a candidate: healthy=%v %q", st.Healthy, st.Unhealthy)
	}
	if afterKillOn4 > 0 {
		t.Fatalf("%d requests answered by the killed worker", afterKillOn4)
	}
	proxies[3].restore(t)
	if !testutil.Poll(10*time.Second, func() bool {
		st, _ := r.Fleet.StatusOf(4)
		return st.Healthy
	}) {
		t.Fatal("the health check did not put the worker back")
	}
}

// A worker that stops answering (a frozen process, or one cut off the network) keeps its connections
// open: a non-streamed request sent to it gets no byte back. Once its health checks fail, the requests it
// holds without having answered move to another worker; before, each waited for the worker client's
// response timeout (10 min by default), past its own --request-timeout.
func TestFrozenWorkerRequestsMove(t *testing.T) {
	const name = "Qwen3-VL-2B-Instruct"
	m, wm := fixtureModels(t, name)
	tmpl := mocker.WorkerConfig{Engine: mocker.DefaultEngineConfig(), Model: wm, KVEvents: mocker.DefaultKVEventsConfig()}
	tmpl.Engine.BlockSize, tmpl.Engine.SpeedupRatio = 16, 50
	fleet, err := mocker.StartFleet(mocker.FleetConfig{NumWorkers: 1, Template: tmpl, FirstID: 2})
	if err != nil {
		t.Fatal(err)
	}
	// The frozen worker: connections are accepted (the kernel does that for a stopped process) and
	// read, never answered.
	frozen, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := frozen.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	system := actors.NewSystem(nil)
	r, err := router.New(system, router.DefaultConfig(16))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.AddWorker(registry.Spec{ID: 1, URL: "http://" + frozen.Addr().String(), BlockSize: 16}); err != nil {
		t.Fatal(err)
	}
	pool := NewWorkerPool(client.DefaultConfig())
	hc := DefaultHealthConfig()
	hc.Interval, hc.Timeout, hc.SelfTest = 50*time.Millisecond, 200*time.Millisecond, false
	mon := NewMonitor(r, pool, hc, slog.New(slog.NewTextHandler(io.Discard, nil)))
	api := NewOpenAIAPI(r, m, name, system, pool, OpenAIConfig{MigrationLimit: 3, RequestTimeout: time.Minute}, NewFrontendMetrics(nil))
	base := serveMonitored(t, api, mon, func() { _ = fleet.Close(); _ = frozen.Close() })

	// The request goes to the frozen worker, the only one; then a live worker joins and the health
	// checks start.
	type answer struct {
		status int
		worker string
		err    error
	}
	got := make(chan answer, 1)
	go func() {
		b := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"frozen"}],"max_tokens":2}`, name)
		resp, err := (&http.Client{Timeout: 20 * time.Second}).Post(base+"/v1/chat/completions", "application/json", strings.NewReader(b))
		if err != nil {
			got <- answer{err: err}
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		got <- answer{status: resp.StatusCode, worker: resp.Header.Get("x-kvroute-worker-id")}
	}()
	testutil.Eventually(t, "the request held by the frozen worker", func() bool { return r.ActiveRequests() == 1 })
	sp, err := registry.Parse(fleet.Specs()[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := r.AddWorker(sp); err != nil {
		t.Fatal(err)
	}
	mon.Start()
	a := <-got
	if a.err != nil || a.status != 200 || a.worker != "2" {
		t.Fatalf("the request held by the frozen worker: %+v, want 200 from worker 2", a)
	}
	if st, _ := r.Fleet.StatusOf(1); st.Healthy {
		t.Fatal("the frozen worker is still healthy")
	}
}

// serveMonitored serves api (and the router API of its router) on loopback, with mon (nil: none) its
// router's health monitor, and at the test's end stops the server, mon, the pool, the router, its actor
// system and then closers; it returns the base URL.
func serveMonitored(t *testing.T, api *OpenAIAPI, mon *Monitor, closers ...func()) string {
	t.Helper()
	srv := NewServer(ServerConfig{}, api, &RouterAPI{R: api.R})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Shutdown()
		if mon != nil {
			mon.Stop()
		}
		api.Pool.Close()
		api.R.Stop()
		api.System.Shutdown()
		for _, c := range closers {
			c()
		}
	})
	return "http://" + ln.Addr().String()
}

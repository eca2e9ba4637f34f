package mocker

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/goccy/go-json"
	"github.com/valyala/fasthttp"
)

// benchPrompt builds request i's prompt: a 512-token prefix shared by its group of 8 plus a unique tail.
func benchPrompt(i, promptLen int) []uint32 {
	p := make([]uint32, promptLen)
	group := i % 8
	for j := range p {
		if j < promptLen/2 {
			p[j] = uint32(group*100_000 + j)
		} else {
			p[j] = uint32(1_000_000 + i*promptLen + j)
		}
	}
	return p
}

// BenchmarkFleetRequests: one op is one simulated request (1024-token prompt, half shared within groups,
// 32 output tokens) completed by a fleet of W in-process workers at speedup S with C requests in flight per
// worker, submitted through Worker.Submit (no HTTP). sim-req/s is the fleet's completed requests per wall
// second; virtual-x is simulated engine-busy time over wall time summed over workers (how much simulated
// time the process sustains).
func BenchmarkFleetRequests(b *testing.B) {
	for _, tc := range []struct{ workers, conc int }{{64, 8}, {64, 32}} {
		b.Run(fmt.Sprintf("W=%d/C=%d/S=100", tc.workers, tc.conc), func(b *testing.B) {
			benchFleet(b, tc.workers, tc.conc, 100)
		})
	}
}

func benchFleet(b *testing.B, workers, conc int, speedup float64) {
	eng := DefaultEngineConfig()
	eng.SpeedupRatio = speedup
	eng.NumGPUBlocks = 2048
	f, err := StartFleet(FleetConfig{NumWorkers: workers, Template: WorkerConfig{Engine: eng}})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	prompts := make([][]uint32, 256)
	for i := range prompts {
		prompts[i] = benchPrompt(i, 1024)
	}
	var next atomic.Int64
	var failed atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	start := time.Now()
	var wg sync.WaitGroup
	for slot := range workers * conc {
		w := f.Workers[slot%workers]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				s, err := w.Submit(0, Request{Prompt: prompts[i%int64(len(prompts))], MaxTokens: 32})
				if err != nil {
					failed.Add(1)
					return
				}
				<-s.Finished()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := processCPU() - cpu0
	b.StopTimer()
	if failed.Load() > 0 {
		b.Fatalf("%d submissions failed", failed.Load())
	}
	var busy time.Duration
	var steps uint64
	for _, w := range f.Workers {
		st := w.Stats(0)
		busy += st.BusyTime
		steps += st.Steps
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "sim-req/s")
	b.ReportMetric(float64(steps)/elapsed.Seconds(), "steps/s")
	b.ReportMetric(busy.Seconds()*speedup/elapsed.Seconds()/float64(workers), "virtual-x/worker")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/req")
}

// processCPU is the process's user+system CPU time: on a shared machine, CPU per simulated request is a
// steadier figure than wall-clock throughput.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEventsPublished: one op is one request (256-token prompt of which 128 are shared by a group of
// 16, 8 output tokens, block size 16) on one worker whose 64-block cache forces an eviction for nearly every
// store; events go through the real kvevents ZMQ publisher (map layout, bound on loopback, no subscriber).
// events/s and batches/s are what the publisher was handed per wall second; timing is sped up 1e6× so the
// engine, conversion and encoding are the bottleneck.
func BenchmarkEventsPublished(b *testing.B) {
	kv := DefaultKVEventsConfig()
	kv.Endpoint, kv.ReplayEndpoint = "tcp://127.0.0.1:*", "tcp://127.0.0.1:*"
	cfg := WorkerConfig{Engine: DefaultEngineConfig(), KVEvents: kv}
	cfg.Engine.BlockSize, cfg.Engine.NumGPUBlocks, cfg.Engine.SpeedupRatio = 16, 64, 1e6
	w, err := StartWorker(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	prompts := make([][]uint32, 512)
	for i := range prompts {
		p := make([]uint32, 256)
		for j := range p {
			if j < 128 {
				p[j] = uint32((i%16)*1000 + j)
			} else {
				p[j] = uint32(100_000 + i*256 + j)
			}
		}
		prompts[i] = p
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				s, err := w.Submit(0, Request{Prompt: prompts[i%int64(len(prompts))], MaxTokens: 8})
				if err != nil {
					b.Error(err)
					return
				}
				<-s.Finished()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(w.PublishedEvents(0))/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(w.PublishedBatches(0))/elapsed.Seconds(), "batches/s")
	b.ReportMetric(float64(processCPU()-cpu0)/float64(w.PublishedEvents(0)), "cpu-ns/event")
}

// BenchmarkEngineStep: one op is one engine step of a saturated engine (pure, no runtime): 64 requests in
// flight, 1024-token prompts half shared, 32 output tokens, block size 64, 2048 blocks.
func BenchmarkEngineStep(b *testing.B) {
	cfg := DefaultEngineConfig()
	cfg.NumGPUBlocks = 2048
	e, err := NewEngine(cfg)
	if err != nil {
		b.Fatal(err)
	}
	prompts := make([][]uint32, 256)
	for i := range prompts {
		prompts[i] = benchPrompt(i, 1024)
	}
	id := 0
	inflight := 0
	events := 0
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for inflight < 64 {
			if err := e.Add(Request{ID: fmt.Sprint(id), Prompt: prompts[id%len(prompts)], MaxTokens: 32}); err != nil {
				b.Fatal(err)
			}
			id++
			inflight++
		}
		res := e.Step()
		events += len(res.Events)
		for _, p := range res.Progress {
			if p.Done {
				inflight--
			}
		}
	}
	b.ReportMetric(float64(id-inflight)/b.Elapsed().Seconds(), "req/s")
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkFleetHTTP: as BenchmarkFleetRequests (W=64, C=8, S=100) but every request is a non-streaming
// POST /v1/completions with a token-id prompt over loopback HTTP (fasthttp client), so one op includes
// the JSON and HTTP costs a router's dispatch pays.
func BenchmarkFleetHTTP(b *testing.B) {
	const workers, conc = 64, 8
	eng := DefaultEngineConfig()
	eng.SpeedupRatio = 100
	eng.NumGPUBlocks = 2048
	f, err := StartFleet(FleetConfig{NumWorkers: workers, Template: WorkerConfig{Engine: eng}})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	bodies := make([][]byte, 256)
	for i := range bodies {
		bodies[i], _ = json.Marshal(map[string]any{"model": "m", "prompt": benchPrompt(i, 1024), "max_tokens": 32})
	}
	client := &fasthttp.Client{MaxConnsPerHost: conc * 2}
	var next, failed atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	start := time.Now()
	var wg sync.WaitGroup
	for slot := range workers * conc {
		url := f.Workers[slot%workers].URL() + "/v1/completions"
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				req.Reset()
				req.SetRequestURI(url)
				req.Header.SetMethod("POST")
				req.Header.SetContentType("application/json")
				req.SetBody(bodies[i%int64(len(bodies))])
				if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
					failed.Add(1)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := processCPU() - cpu0
	b.StopTimer()
	if failed.Load() > 0 {
		b.Fatalf("%d requests failed", failed.Load())
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "sim-req/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/req")
}

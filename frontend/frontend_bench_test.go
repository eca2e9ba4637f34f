package frontend

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// processCPU is the process's user+system CPU time. Load generator, frontend and simulated workers
// share the process, so CPU per request counts all three, and not the time spent waiting for a core,
// which on a shared 2-core machine swings req/s by 2x between runs.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func pct(lat []time.Duration, p float64) float64 {
	slices.Sort(lat)
	return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) / 1e3
}

// BenchmarkFrontendOverhead measures what the frontend adds to a request: the same short completion
// (a 16-token token-id prompt, 1 output token) sent to a simulated worker directly and through the
// frontend, one at a time. One op is one request on each path. Reported: p50/p99 of both paths, the
// added latency (frontend − direct) at p50 and p99, and the process CPU per op (both requests).
func BenchmarkFrontendOverhead(b *testing.B) {
	st := startBenchStack(b, 1)
	body := []byte(fmt.Sprintf(`{"model":%q,"prompt":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16],"max_tokens":1}`, st.name))
	c := &fasthttp.Client{MaxConnsPerHost: 16}
	do := func(url string) time.Duration {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI(url)
		req.Header.SetMethod("POST")
		req.Header.SetContentType("application/json")
		req.SetBody(body)
		t0 := time.Now()
		if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
			b.Fatalf("%s: %v %d %s", url, err, resp.StatusCode(), resp.Body())
		}
		return time.Since(t0)
	}
	direct := st.fleet.Workers[0].URL() + "/v1/completions"
	front := st.base + "/v1/completions"
	for i := 0; i < 200; i++ { // warm both paths (connections, caches)
		do(direct)
		do(front)
	}
	dl, fl := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for i := 0; i < b.N; i++ {
		dl = append(dl, do(direct))
		fl = append(fl, do(front))
	}
	cpu = processCPU() - cpu
	b.StopTimer()
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/op")
	d50, d99, f50, f99 := pct(dl, 0.5), pct(dl, 0.99), pct(fl, 0.5), pct(fl, 0.99)
	b.ReportMetric(d50, "direct-p50-us")
	b.ReportMetric(f50, "frontend-p50-us")
	b.ReportMetric(f50-d50, "added-p50-us")
	b.ReportMetric(f99-d99, "added-p99-us")
}

// BenchmarkRoutedThroughput drives the frontend with 64 concurrent clients sending short token-id
// completions (16 tokens, 1 output token) to 4 simulated workers in the same process; reported:
// routed requests per second after a warm-up of 4,000 requests, and the process CPU per request (load
// generator, frontend and workers together). The workers share the two cores, so this bounds the
// frontend from below. Each client is one keep-alive connection (loadConn) sending a request and
// reading its answer in turn.
func BenchmarkRoutedThroughput(b *testing.B) {
	st := startBenchStack(b, 4)
	addr := strings.TrimPrefix(st.base, "http://")
	prefix := []byte(fmt.Sprintf(`{"model":%q,"prompt":[`, st.name))
	const clients = 64
	var failed atomic.Int64
	// Warm up (connections, pooled goroutines, caches) with the same load, then measure b.N requests.
	run := func(n int64) time.Duration {
		var next atomic.Int64
		t0 := time.Now()
		var wg sync.WaitGroup
		for w := 0; w < clients; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := newLoadConn(addr)
				defer c.close()
				var body []byte
				for {
					i := next.Add(1)
					if i > n {
						return
					}
					body = append(body[:0], prefix...)
					body = strconv.AppendInt(body, i%1000+100, 10)
					body = append(body, `,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16],"max_tokens":1}`...)
					status, resp, err := c.post("/v1/completions", body)
					if err != nil || status != 200 || len(resp) == 0 || resp[0] != '{' {
						failed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		return time.Since(t0)
	}
	run(4000)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	el := run(int64(b.N))
	cpu = processCPU() - cpu
	b.StopTimer()
	if failed.Load() > 0 {
		b.Fatalf("%d of %d requests failed", failed.Load(), b.N)
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "req/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/req")
}

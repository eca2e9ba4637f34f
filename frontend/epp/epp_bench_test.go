package epp

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/workers/registry"
)

// BenchmarkPickerExchange measures what the picker adds to a request, end to end over real gRPC on
// loopback: one op is one ext_proc stream as Envoy drives it in FULL_DUPLEX_STREAMED mode — request
// headers, the body in two chunks, the decision (template + tokenize + hash + route, the body sent
// back), response headers, one response chunk (prefill done) and the end of stream (free). The worker
// is not called: what is timed is the picker's part. W=4 workers; the prompt is ~1k tokens, a fresh one
// per op (no cache hits to shorten anything).
func BenchmarkPickerExchange(b *testing.B) {
	r := startRig(b, 4, DefaultConfig())
	const path = "/v1/chat/completions"
	prompts := make([][]byte, b.N)
	for i := range prompts {
		prompts[i] = chat(longText(fmt.Sprintf("bench%d", i), 300), true)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		g := r.open(b, true)
		d := g.request(path, prompts[i], 2, nil)
		if d.header == "" {
			b.Fatalf("no destination: %+v", d)
		}
		g.responseHeaders(200)
		g.responseChunk([]byte("data: {}\n\n"), false)
		g.responseChunk(nil, true)
		_ = g.stream.CloseSend()
		g.cancel()
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "exchange-p50-us")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "exchange-p99-us")
}

// BenchmarkSubset: a gateway's endpoint subset of S addresses mapped to the workers a decision may use,
// for a router of W workers (real router, workers registered without KV events), the fleet unchanged
// since the first.
func BenchmarkSubset(b *testing.B) {
	for _, w := range []int{1024, 8192} {
		b.Run(fmt.Sprintf("W=%d/S=4", w), func(b *testing.B) {
			rcfg := router.DefaultConfig(16)
			rcfg.Registerer = prometheus.NewRegistry()
			r, err := router.New(actors.NewSystem(nil), rcfg)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Stop()
			for id := range w {
				url := fmt.Sprintf("http://10.%d.%d.%d:8000", id>>16, (id>>8)&255, id&255)
				if err := r.AddWorker(registry.Spec{ID: uint64(id + 1), URL: url}); err != nil {
					b.Fatal(err)
				}
			}
			s, err := NewServer(DefaultConfig(), nil, RouterWorkers{R: r})
			if err != nil {
				b.Fatal(err)
			}
			subset := []string{"10.0.0.7:8000", "10.0.1.9:8000", "10.0.2.3:8000", "10.0.3.1:8000"}
			s.allowed(subset) // whatever the server builds once per fleet version
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if ok, _ := s.allowed(subset); !ok {
					b.Fatal("no worker in the subset")
				}
			}
		})
	}
}

package client

import (
	"bufio"
	"context"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// benchResponse is a short non-streaming chat completion, as a worker returns it.
var benchResponse = []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there, how can I help?"},"finish_reason":"length"}],"usage":{"prompt_tokens":42,"total_tokens":50,"completion_tokens":8,"prompt_tokens_details":{"cached_tokens":32}}}`)

var benchBody = []byte(`{"model":"m","messages":[{"role":"user","content":"Say hello in five words."}],"max_tokens":8}`)

// startBenchServer serves benchResponse for any POST and an 8-token SSE stream for /stream, on
// 127.0.0.1, and returns its base URL.
func startBenchServer(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var stream []byte
	for i := range 8 {
		stream = append(stream, `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok`...)
		stream = append(stream, byte('0'+i))
		stream = append(stream, `"},"finish_reason":null}]}`+"\n\n"...)
	}
	stream = append(stream, `data: {"id":"c","choices":[],"usage":{"prompt_tokens":42,"completion_tokens":8,"total_tokens":50}}`+"\n\ndata: [DONE]\n\n"...)
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/stream" {
			ctx.SetContentType("text/event-stream")
			ctx.SetBodyStreamWriter(func(w *bufio.Writer) { w.Write(stream); w.Flush() })
			return
		}
		ctx.SetContentType("application/json")
		ctx.SetBody(benchResponse)
	}}
	go srv.Serve(ln)
	tb.Cleanup(func() { srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

// processCPU is the process's user+system CPU time. The loopback server runs in this process, so
// cpu-ns/op counts client and server work and not the time spent waiting for a core, which on the shared
// 2-core machine swings wall-clock ns/op by 2x between runs.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, start time.Duration) {
	if b.N > 0 {
		b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkDispatch: one op is one short non-streaming request and its whole response over a pooled
// loopback connection, server time included; the difference between client=endpoint and
// client=hostclient is the dispatch overhead of Endpoint (cancellation hook, usage parse, body copy).
func BenchmarkDispatch(b *testing.B) {
	url := startBenchServer(b)
	b.Run("client=endpoint", func(b *testing.B) {
		e, err := NewEndpoint(url, Config{})
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		req := &Request{Path: "/v1/chat/completions", Body: benchBody}
		var resp Response
		ctx := context.Background()
		b.ReportAllocs()
		cpu := processCPU()
		defer func() { reportCPU(b, cpu) }()
		for b.Loop() {
			if err := e.Do(ctx, req, &resp); err != nil || resp.Usage.CachedTokens() != 32 {
				b.Fatal(err, resp.Usage)
			}
		}
	})
	b.Run("client=hostclient", func(b *testing.B) {
		hc := &fasthttp.HostClient{Addr: strings.TrimPrefix(url, "http://"), MaxConns: 1024}
		b.ReportAllocs()
		cpu := processCPU()
		defer func() { reportCPU(b, cpu) }()
		for b.Loop() {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			req.Header.SetMethod(fasthttp.MethodPost)
			req.SetRequestURI(url + "/v1/chat/completions")
			req.Header.SetContentTypeBytes(contentTypeJSON)
			req.SetBodyRaw(benchBody)
			if err := hc.Do(req, resp); err != nil || resp.StatusCode() != 200 {
				b.Fatal(err)
			}
			fasthttp.ReleaseRequest(req)
			fasthttp.ReleaseResponse(resp)
		}
	})
}

// BenchmarkStream: one op is one streamed response of 8 token events + usage + [DONE], each event
// inspected (first token, usage) as the request path does.
func BenchmarkStream(b *testing.B) {
	url := startBenchServer(b)
	e, err := NewEndpoint(url, Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	req := &Request{Path: "/stream", Body: benchBody}
	ctx := context.Background()
	b.ReportAllocs()
	cpu := processCPU()
	defer func() { reportCPU(b, cpu) }()
	events := 0
	for b.Loop() {
		s, err := e.Stream(ctx, req, nil)
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := s.Next(); err != nil {
				break
			}
			events++
		}
		if u, ok := s.Usage(); !ok || u.CompletionTokens != 8 || !s.SawFirstToken() {
			b.Fatal("stream not inspected")
		}
		s.Close()
	}
	b.ReportMetric(float64(events)/float64(b.N), "events/op")
}

// BenchmarkDispatchParallel: one op is one short non-streaming request, issued from GOMAXPROCS*4
// goroutines over one Endpoint (the pool grows to that many connections); req/s is the loopback
// throughput with the server sharing the same cores.
func BenchmarkDispatchParallel(b *testing.B) {
	url := startBenchServer(b)
	e, err := NewEndpoint(url, Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	b.ReportAllocs()
	b.SetParallelism(4)
	cpu := processCPU()
	b.RunParallel(func(pb *testing.PB) {
		req := &Request{Path: "/v1/chat/completions", Body: benchBody}
		var resp Response
		for pb.Next() {
			if err := e.Do(context.Background(), req, &resp); err != nil {
				b.Error(err)
				return
			}
		}
	})
	reportCPU(b, cpu)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

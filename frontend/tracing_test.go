package frontend

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/kvroute/kvroute/workers/registry"
)

// TestTracingFollowsTheRequest: a client's traceparent is the parent of the request span, the stages are
// its children, and the worker receives a traceparent in the same trace whose parent is the dispatch
// stage. The worker is the simulated one behind a recording reverse proxy.
func TestTracingFollowsTheRequest(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	s := startStack(t, stackOpts{workers: 1, speedup: 100, tracer: tp.Tracer("test")})

	var mu sync.Mutex
	var seen []string
	spec, err := registry.Parse(s.fleet.Specs()[0])
	if err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(spec.URL)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			mu.Lock()
			seen = append(seen, r.Header.Get("traceparent"))
			mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	if err := s.router.RemoveWorker(spec.ID); err != nil {
		t.Fatal(err)
	}
	spec.URL = proxy.URL
	if err := s.router.AddWorker(spec); err != nil {
		t.Fatal(err)
	}

	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	r := s.post(t, "/v1/chat/completions", chatBody(s.name, "trace me", ""), "traceparent", "00-"+traceID+"-"+parentID+"-01")
	if r.status != 200 {
		t.Fatalf("chat: %d %s", r.status, r.raw)
	}
	deadline := time.Now().Add(5 * time.Second)
	var spans []sdktrace.ReadOnlySpan
	for len(spans) < 4 && time.Now().Before(deadline) {
		spans = rec.Ended()
		time.Sleep(5 * time.Millisecond)
	}
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, sp := range spans {
		byName[sp.Name()] = sp
	}
	req, ok := byName["POST /v1/chat/completions"]
	if !ok {
		t.Fatalf("no request span among %d spans", len(spans))
	}
	if req.SpanContext().TraceID().String() != traceID || req.Parent().SpanID().String() != parentID {
		t.Fatalf("request span trace %s parent %s, want the client's %s / %s", req.SpanContext().TraceID(), req.Parent().SpanID(), traceID, parentID)
	}
	for _, stage := range []string{"parse", "route", "dispatch"} {
		sp, ok := byName[stage]
		if !ok || sp.Parent().SpanID() != req.SpanContext().SpanID() {
			t.Errorf("stage %s missing or not a child of the request span", stage)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 {
		t.Fatalf("worker saw %d requests, want 1", len(seen))
	}
	want := "00-" + traceID + "-" + byName["dispatch"].SpanContext().SpanID().String() + "-01"
	if seen[0] != want {
		t.Fatalf("worker traceparent %q, want %q", seen[0], want)
	}
	if !strings.Contains(r.raw, "choices") {
		t.Fatalf("answer: %s", r.raw)
	}
}

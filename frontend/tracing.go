package frontend

import (
	"context"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// OpenTelemetry tracing of the request path, off unless OpenAIAPI.Tracer is set (cmd/ sets it with
// --otlp-traces-endpoint). A client's W3C traceparent is the parent of the request's span; the span's own
// traceparent goes to the worker, so vLLM's spans join the trace. Stages are child spans: parse, route
// (template, tokenize, hash, route), dispatch (the worker call and the stream, to the last byte).

// w3c is the W3C trace-context propagator (traceparent, tracestate).
var w3c propagation.TraceContext

// headerCarrier adapts fasthttp's request headers to the propagator.
type headerCarrier struct{ h *fasthttp.RequestHeader }

func (c headerCarrier) Get(key string) string { return string(c.h.Peek(key)) }
func (c headerCarrier) Set(key, value string) { c.h.Set(key, value) }
func (c headerCarrier) Keys() []string        { return []string{"traceparent", "tracestate"} }

// mapCarrier collects what the propagator injects for the worker request.
type mapCarrier map[string]string

func (c mapCarrier) Get(key string) string { return c[key] }
func (c mapCarrier) Set(key, value string) { c[key] = value }
func (c mapCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// requestTrace is one request's spans; the zero value (tracing off) does nothing.
type requestTrace struct {
	ctx   context.Context // carries the request span
	span  trace.Span
	stage trace.Span
}

// startTrace opens the request span (child of the client's traceparent, if any) and its first stage.
func (a *OpenAIAPI) startTrace(ctx *fasthttp.RequestCtx, ep endpoint) requestTrace {
	if a.Tracer == nil {
		return requestTrace{}
	}
	parent := w3c.Extract(context.Background(), headerCarrier{&ctx.Request.Header})
	c, span := a.Tracer.Start(parent, "POST "+ep.path(), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", "POST"), attribute.String("url.path", ep.path()),
			attribute.String("gen_ai.request.model", a.ModelName)))
	t := requestTrace{ctx: c, span: span}
	t.nextStage(a, "parse")
	return t
}

// nextStage ends the current stage span and starts the next one.
func (t *requestTrace) nextStage(a *OpenAIAPI, name string) {
	if t.span == nil {
		return
	}
	if t.stage != nil {
		t.stage.End()
	}
	_, t.stage = a.Tracer.Start(t.ctx, name)
}

// workerHeaders returns the traceparent (and tracestate) for the worker request, under the dispatch stage.
func (t *requestTrace) workerHeaders() mapCarrier {
	if t.stage == nil {
		return nil
	}
	m := mapCarrier{}
	w3c.Inject(trace.ContextWithSpan(t.ctx, t.stage), m)
	return m
}

// end closes the spans with the request's outcome.
func (t *requestTrace) end(j *job, status int, d time.Duration) {
	if t.span == nil {
		return
	}
	if t.stage != nil {
		t.stage.End()
	}
	t.span.SetAttributes(attribute.Int("http.response.status_code", status), attribute.String("kvroute.request_id", j.reqID),
		attribute.Bool("kvroute.stream", j.stream), attribute.Float64("kvroute.ttft_ms", float64(j.firstAt.Microseconds())/1000),
		attribute.Float64("kvroute.duration_ms", float64(d.Microseconds())/1000))
	if j.routed {
		t.span.SetAttributes(attribute.Int64("kvroute.worker_id", int64(j.route.Worker.WorkerID)),
			attribute.Int("kvroute.dp_rank", int(j.route.Worker.DPRank)), attribute.Int("kvroute.overlap_blocks", int(j.route.OverlapBlocks)))
	}
	if status >= 500 {
		t.span.SetStatus(codes.Error, "")
	}
	t.span.End()
}

package frontend

import (
	"bufio"
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/frontend/openai"
	"github.com/kvroute/kvroute/workers/client"
	"github.com/kvroute/kvroute/workers/registry"
)

// WorkerPool holds one pooled HTTP endpoint per worker URL, each carrying its worker's API key.
type WorkerPool struct {
	cfg client.Config
	mu  sync.Mutex
	eps map[string]*client.Endpoint
}

// NewWorkerPool returns an empty pool whose endpoints use cfg.
func NewWorkerPool(cfg client.Config) *WorkerPool {
	return &WorkerPool{cfg: cfg, eps: map[string]*client.Endpoint{}}
}

// Get returns the endpoint of a worker, creating it on first use.
func (p *WorkerPool) Get(spec registry.Spec) (*client.Endpoint, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	key := spec.Key()
	if ep, ok := p.eps[spec.URL]; ok {
		if ep.APIKey() == key {
			return ep, nil
		}
		// The worker came back with another key (re-registered): new connections carry the new one.
		_ = ep.Close()
	}
	cfg := p.cfg
	cfg.APIKey = key
	ep, err := client.NewEndpoint(spec.URL, cfg)
	if err != nil {
		return nil, err
	}
	p.eps[spec.URL] = ep
	return ep, nil
}

// AbortPending ends the requests to the worker at url that have had no response byte yet
// (client.Endpoint.AbortPending): they move to another worker. It returns how many.
func (p *WorkerPool) AbortPending(url string) int {
	p.mu.Lock()
	ep := p.eps[url]
	p.mu.Unlock()
	if ep == nil {
		return 0
	}
	return ep.AbortPending()
}

// Drop closes and forgets a worker's endpoint (the worker was removed).
func (p *WorkerPool) Drop(url string) {
	p.mu.Lock()
	ep := p.eps[url]
	delete(p.eps, url)
	p.mu.Unlock()
	if ep != nil {
		_ = ep.Close()
	}
}

// Close closes every endpoint.
func (p *WorkerPool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for u, ep := range p.eps {
		_ = ep.Close()
		delete(p.eps, u)
	}
}

// dispatch sends the request to the chosen worker, streams or returns its answer, and runs the lifecycle:
// the first token marks prefill completed, the end (or an error or a client that went away) frees the
// request. A failure before any byte reached the client is migrated to another worker up to
// MigrationLimit times.
func (a *OpenAIAPI) dispatch(ctx *fasthttp.RequestCtx, j *job, p prepared) {
	if p.prefill != nil {
		a.dispatchPD(ctx, j, p) // the prefill hop first; it comes back here for the decode hop
		return
	}
	var excluded []uint64
	for attempt := 0; ; attempt++ {
		route := p.route
		ep, err := a.Pool.Get(route.Spec)
		if err != nil {
			a.finish(j)
			a.fail(ctx, j, errorf(ErrUnavailable, "worker %d has no usable URL: %v", route.Worker.WorkerID, err))
			return
		}
		j.route = route
		j.headers[0] = client.Header{Key: "X-Request-Id", Value: j.reqID}
		n := 1
		if route.Spec.DPRanks() > 1 {
			j.headers[n] = client.Header{Key: "X-data-parallel-rank", Value: strconv.FormatUint(uint64(route.Worker.DPRank), 10)}
			n++
		}
		for k, v := range j.trace.workerHeaders() {
			if n < len(j.headers) {
				j.headers[n] = client.Header{Key: k, Value: v}
				n++
			}
		}
		req := &client.Request{Path: j.ep.path(), Body: j.body, Headers: j.headers[:n]}
		var done bool
		if j.stream {
			err, done = a.dispatchStream(ctx, j, route, ep, req)
		} else {
			err, done = a.dispatchUnary(ctx, j, route, ep, req)
		}
		if done {
			return
		}
		// The worker failed before any byte reached the client.
		a.finish(j)
		if a.Cfg.PassiveHealth && errors.Is(err, client.ErrConnect) {
			// Refused: the process is gone. Out of routing now; the health monitor brings it back.
			_ = a.R.SetHealthy(route.Worker.WorkerID, false, "passive: "+err.Error())
		}
		if errors.Is(j.ctx.Err(), context.DeadlineExceeded) {
			a.fail(ctx, j, errorf(ErrTimeout, "%s", a.timedOut()))
			return
		}
		if errors.Is(err, client.ErrLocal) {
			a.fail(ctx, j, errorf(ErrUnavailable, "the router could not open a connection to worker %d: %v; retry", route.Worker.WorkerID, err))
			return
		}
		if !client.Retryable(err) || attempt >= a.Cfg.MigrationLimit {
			a.fail(ctx, j, errorf(ErrUnavailable, "worker %d failed: %v", route.Worker.WorkerID, err))
			return
		}
		if a.Metrics != nil {
			a.Metrics.migr.Inc()
		}
		excluded = append(excluded, route.Worker.WorkerID)
		again := *p.req // the first decision's request, whole: namespace, priority, tier, pin, OSL, session
		again.Exclude = excluded
		res, rerr := a.R.Route(j.ctx, &again)
		if rerr != nil {
			a.fail(ctx, j, mapRouteErr(rerr))
			return
		}
		p.route = res
	}
}

// finish frees a routed request (idempotent: an already freed id is not an error here). A stream's
// chunks count its generated tokens (one per chunk, as for --router-track-output-blocks); the router
// learns the decode from them. A non-streamed response's first token is its end: nothing to learn.
func (a *OpenAIAPI) finish(j *job) {
	tokens := 0
	if j.stream && j.firstAt != 0 {
		tokens = j.chunks
	}
	_ = a.R.FreeOutput(j.id, tokens)
}

// routingHeaders sets the routing explanation headers every response carries (and, for a frontend with
// prefill workers, the prefill worker's).
func routingHeaders(ctx *fasthttp.RequestCtx, j *job, route router.RouteResult) {
	prefillHeaders(ctx, j)
	ctx.Response.Header.Set("x-kvroute-worker-id", strconv.FormatUint(route.Worker.WorkerID, 10))
	ctx.Response.Header.Set("x-kvroute-overlap-blocks", strconv.FormatUint(uint64(route.OverlapBlocks), 10))
	if route.Spec.DPRanks() > 1 {
		ctx.Response.Header.Set("x-kvroute-dp-rank", strconv.FormatUint(uint64(route.Worker.DPRank), 10))
	}
}

func nvextOf(j *job, route router.RouteResult) *openai.NVExtResponse {
	r := routingOf(route)
	if j.serving == servingDisaggregated {
		r.Prefill = routingOf(j.prefill)
	}
	return &openai.NVExtResponse{Routing: r}
}

func routingOf(route router.RouteResult) *openai.Routing {
	r := &openai.Routing{WorkerID: route.Worker.WorkerID, DPRank: route.Worker.DPRank, OverlapBlocks: route.OverlapBlocks}
	for _, c := range route.Candidates {
		r.Candidates = append(r.Candidates, openai.RoutingCandidate{WorkerID: c.Worker.WorkerID, DPRank: c.Worker.DPRank, OverlapBlocks: c.Overlap, Cost: c.Cost})
	}
	return r
}

// dispatchUnary handles a non-streaming request. done is false only for a failure before any byte,
// which the caller may migrate.
func (a *OpenAIAPI) dispatchUnary(ctx *fasthttp.RequestCtx, j *job, route router.RouteResult, ep *client.Endpoint, req *client.Request) (error, bool) {
	resp := responsePool.Get().(*client.Response)
	if err := ep.Do(j.ctx, req, resp); err != nil {
		return err, false // not pooled: a 5xx error's Body aliases resp.Body
	}
	defer responsePool.Put(resp) // ctx.SetBody copies the body; nothing else keeps resp's buffers
	a.firstToken(j)
	_ = a.R.PrefillDone(j.id)
	a.finish(j)
	body := resp.Body
	if resp.HasUsage {
		a.observeUsage(route, resp.Usage)
		j.promptTokens = resp.Usage.PromptTokens
	}
	if j.returnRoute && resp.Status < 300 {
		if b, err := openai.AddNVExt(body, nvextOf(j, route)); err == nil {
			body = b
		}
	}
	routingHeaders(ctx, j, route)
	ctx.SetStatusCode(resp.Status)
	ctx.Response.Header.SetContentTypeBytes(resp.ContentType)
	ctx.SetBody(body)
	a.end(j, resp.Status)
	return nil, true
}

// responsePool recycles the worker responses of unary requests with their body buffers.
var responsePool = sync.Pool{New: func() any { return new(client.Response) }}

// timedOut is the message of a request that did not complete within --request-timeout.
func (a *OpenAIAPI) timedOut() string {
	return "the request did not complete within its timeout (--request-timeout " + a.Cfg.RequestTimeout.String() + ")"
}

// observeUsage compares the worker's cached tokens with the router's prediction.
func (a *OpenAIAPI) observeUsage(route router.RouteResult, u openai.Usage) {
	if a.Metrics == nil {
		return
	}
	a.Metrics.isl.Observe(float64(u.PromptTokens))
	a.Metrics.osl.Observe(float64(u.CompletionTokens))
	a.Metrics.rISL.Observe(float64(u.PromptTokens))
	a.Metrics.rOSL.Observe(float64(u.CompletionTokens))
	a.Metrics.prediction(route.Worker.WorkerID, route.CachedTokens, u.CachedTokens(), a.R.BlockSize())
}

// dispatchStream handles a streaming request: the upstream call is opened here (so a failure before the
// worker's headers can still be migrated), then fasthttp's body stream writer pumps events as they come.
func (a *OpenAIAPI) dispatchStream(ctx *fasthttp.RequestCtx, j *job, route router.RouteResult, ep *client.Endpoint, req *client.Request) (error, bool) {
	onFirst := func() {
		_ = a.R.PrefillDone(j.id)
		a.firstToken(j)
	}
	s, err := ep.Stream(j.ctx, req, onFirst)
	if err != nil {
		var ce *client.Error
		if errors.As(err, &ce) && ce.Status >= 400 && ce.Status < 500 {
			// The worker refused the request itself: forward its answer.
			a.finish(j)
			routingHeaders(ctx, j, route)
			ctx.SetStatusCode(ce.Status)
			ctx.Response.Header.SetContentType("application/json")
			ctx.SetBody(ce.Body)
			a.end(j, ce.Status)
			return nil, true
		}
		return err, false
	}
	routingHeaders(ctx, j, route)
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.Response.Header.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) { a.relayStream(w, j, route, s) })
	return nil, true
}

// relayStream copies the worker's SSE events to the client as they come, each flushed: the route goes
// into the first chunk's nvext when asked for, usage is observed, output tokens are counted and the
// inter-token latency timed. A worker that fails mid-stream gets an SSE error event (bytes already reached
// the client, so the request cannot move, as vLLM does); a client that leaves closes the worker's stream.
func (a *OpenAIAPI) relayStream(w *bufio.Writer, j *job, route router.RouteResult, s *client.Stream) {
	status := fasthttp.StatusOK // what the access log and metrics say the client got
	defer func() {
		_ = s.Close()
		a.finish(j)
		a.end(j, status)
	}()
	last := time.Now()
	routed := false
	for {
		ev, err := s.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				status = fasthttp.StatusBadGateway
				msg, typ := "worker stream failed: "+err.Error(), "server_error"
				if errors.Is(j.ctx.Err(), context.DeadlineExceeded) {
					status, typ = fasthttp.StatusGatewayTimeout, "timeout_error"
					msg = a.timedOut()
				}
				_, _ = w.Write(openai.AppendSSEError(nil, status, typ, msg))
				_, _ = w.Write(openai.SSEDone)
				_ = w.Flush()
			}
			return
		}
		raw := ev.Raw
		if j.returnRoute && !routed && !ev.Done && len(ev.Data) > 0 && ev.Data[0] == '{' {
			if b, err := openai.AddNVExt(ev.Data, nvextOf(j, route)); err == nil {
				raw = openai.AppendSSE(nil, b)
				routed = true
			}
		}
		if ev.HasUsage {
			if u, ok := s.Usage(); ok {
				a.observeUsage(route, u)
				j.promptTokens = u.PromptTokens
			}
		}
		j.chunks++
		if !ev.Done {
			// --router-track-output-blocks: the worker streams one token per chunk (vLLM, SGLang and the
			// mocker do without speculative decoding), so the chunks so far count the generated tokens.
			// A no-op when the flag is off.
			a.R.RecordOutput(j.id, j.chunks)
		}
		if _, err := w.Write(raw); err != nil {
			return // client gone: the deferred Close aborts the worker's request
		}
		if err := w.Flush(); err != nil {
			return
		}
		if a.Metrics != nil {
			now := time.Now()
			a.Metrics.itl.Observe(now.Sub(last).Seconds())
			a.Metrics.rITL.Observe(now.Sub(last).Seconds())
			last = now
		}
		if ev.Done {
			return
		}
	}
}

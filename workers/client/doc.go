// Package client dispatches requests to workers' OpenAI endpoints (vLLM or the kvroute mocker): the
// request path's dispatch and response stages (docs/architecture.md), plus the health and metrics probes the worker
// supervisor runs.
//
// # Overview
//
//  1. Endpoint (endpoint.go) is the connection pool of one worker: up to Config.MaxConns requests in
//     flight, each on its own HTTP/1.1 keep-alive connection, idle connections reused most-recent-first
//     and dropped after IdleConnTimeout (before vLLM's uvicorn would close them). Requests are written
//     and responses parsed with fasthttp's codec (zero-allocation, chunked streaming); the connections
//     are the package's own so that a context can close them (fasthttp.HostClient has no context
//     support, only deadlines, and a client disconnect must reach the worker at once: vLLM aborts a
//     request, and frees its KV blocks, when its connection closes).
//  2. Do (do.go) sends the client's original body unchanged and reads the whole answer into a reusable
//     Response, with usage (prompt_tokens, completion_tokens, prompt_tokens_details.cached_tokens) read
//     from the body without decoding the rest.
//  3. Stream (stream.go) returns once the worker's headers arrive; Next yields each SSE event as
//     received (Raw, for pass-through) with its meaning: the first event carrying output (content,
//     text, reasoning, tool calls, token ids, a finish reason, or a usage with completion tokens)
//     fires the onFirstToken callback once (the router's MarkPrefillCompleted); a usage event is kept
//     for Usage() (one with a negative count is ignored); [DONE] and mid-stream error events are
//     marked. An event past MaxEventBytes (8 MiB, a line never ended included) breaks the stream.
//  4. Probes (probe.go): Health (GET /health) and ScrapeMetrics (GET /metrics: block size and KV
//     capacity from vllm:cache_config_info, running / waiting requests and KV usage per engine).
//     ParseMetrics is pure and fuzzed.
//  5. Errors (errors.go) are classified for the migration decision: ErrConnect, ErrNoResponse (the
//     connection died after the request was sent, before any response byte), ErrStatus for 5xx, and
//     ErrTimeout before any byte are Retryable on another worker; ErrBroken (failure after events were
//     delivered), ErrCanceled and 4xx are not; neither is ErrLocal, a dial that failed because this host
//     is out of descriptors or ports, which says nothing about the worker. A pooled connection that turns out closed before any
//     response byte is retried once on a fresh connection inside the call (Stats.Retries), as net/http
//     does: the worker closed it while idle. (If the worker instead died holding the request, the
//     fresh dial fails with ErrConnect and the caller migrates.)
//
// # Concurrency model
//
// An Endpoint is safe for concurrent use: a semaphore channel bounds requests in flight, a mutex guards
// the idle list, counters are atomics. A connection belongs to one call from acquire to release; only
// the context.AfterFunc hook touches it from another goroutine, and all it does is Close, which
// unblocks the owner's read or write. A Stream is used by one goroutine (the request's): Next, then
// Close; the callback runs on that goroutine, inside Next. No goroutine is started by this package.
//
// # Ownership
//
//   - Endpoint: created by whoever registers the worker (the worker supervisor), closed when the worker
//     is removed; requests in flight finish on their connections, which are then closed.
//   - Request.Body: borrowed for the call (sent as is, never modified or kept).
//   - Response: the caller's, reused across calls; Body and ContentType are overwritten by the next Do.
//   - Event.Raw and Event.Data: valid until the next Next; copy to keep.
//   - Stream: the caller's until Close, which must be called on every path. Close returns the
//     connection to the pool when the body was read to its end (or ends within 20 ms of [DONE]);
//     otherwise it closes it, which aborts the worker's request.
//   - Error.Body of a Do 5xx aliases Response.Body.
//
// # Data flow
//
//	frontend (original body) ─Do/Stream─▶ Endpoint: acquire conn ─write─▶ worker
//	worker ─headers─▶ status: 5xx → retryable ErrStatus │ 2xx → Response / Stream
//	Stream.Next ─▶ SSE event (Raw, pass-through) ─▶ first output → onFirstToken (MarkPrefillCompleted)
//	                                             └▶ usage event → Usage() (cached_tokens vs predicted overlap)
//	end ([DONE], EOF) → Close → conn back to pool │ ctx canceled → conn closed → worker aborts
//
// Benchmarks (client_bench_test.go) compare Do with a direct fasthttp.HostClient call on loopback.
package client

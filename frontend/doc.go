// Package frontend is kvroute's HTTP edge (fasthttp + go-json): the standalone router API today, the
// OpenAI-compatible endpoints with the embedded router as they land.
//
// # Overview
//
// Server answers /health, /live, /ready (Probes, probes.go: Dynamo's JSON shapes; /ready is 503 until
// enough workers of every model are checked and once the drain starts), /metrics and /debug/goroutines (the
// tracked goroutines by kind, internal/routine; admin plane) itself, then offers each request to
// its mounted Handlers in order (Models, RouterAPI: /v1/workers, /v1/workers/{id},
// /v1/overlap_scores, PprofHandler: /debug/pprof/ behind the admin token).
//
// Models (models.go) serves several models behind one endpoint: one OpenAIAPI per model, each with its
// own tokenizer, router core (block size, index, scheduler) and workers; a request goes to the API of
// the model its body names (an unknown one is a 404), and /v1/models, /v1/models/{id} list them all.
// Workers behind an API key get it from the WorkerPool's endpoint (workers/client), never from a log or
// a status answer.
//
// Disaggregated prefill/decode (disagg.go): workers registered with role=prefill join a second router
// core, Disagg.Prefill (no active-block tracking), beside the model's own (the decode core). Once one is
// registered, a request the conditional-prefill policy does not serve aggregated takes two hops: the
// prefill core's KV-aware decision and a prefill request with vLLM's kv_transfer_params
// (do_remote_decode, max_tokens 1, not streamed), then a load-only decode decision (credit 0, no prefill
// charge) and the client's request plus the prefill answer's kv_transfer_params, streamed by the
// ordinary dispatch. Each model has its own prefill core; a model with no prefill worker registered is
// served aggregated.
//
// An OpenAI request's lifecycle has three calls (lifecycle.go): begin, firstToken, end. They keep the
// in-flight count the drain waits on, the dynamo_frontend_* / dynamo_component_router_* metrics
// (metrics.go) and the access-log line. Drain (drain.go) is the capped graceful shutdown: readiness
// off, a grace period, the listener closed with a bounded wait, then every request still running is
// cancelled through the context all requests derive from. Every error leaves as an
// OpenAI-style body {"error":{"message","type","param","code"}} with the status its class maps to
// (errors.go): handlers return class-wrapped errors, and only this package turns them into statuses.
//
// Pick (pick.go) runs the same request path up to the routing decision for a caller that forwards the
// request itself — the endpoint picker of frontend/epp — and hands it the lifecycle (FirstToken, End) as a
// Picked; headers come through a small HeaderSource interface, so parse serves both.
//
// Before any handler runs, Server admits the request by plane (admin: fleet changes, busy thresholds,
// debug; router API: /v1/route*, /v1/overlap_scores): the plane's bearer token when one is configured,
// else loopback clients only. It then reads the body itself (body.go): fasthttp streams it, and the
// buffer grows with the bytes that arrived, charged to one process-wide budget, under deadlines counted
// from the first header byte and from the end of the headers. After a burst of connections ends, the
// memory is handed back to the OS (reclaim.go). The listener (listener.go) bounds the client connections
// open at once (MaxConns, the edge's share of the process's descriptors, making room by closing the one
// idle longest), bounds each write to a client (WriteTimeout) and retries a failed accept, so neither a
// flood of connections, a client that stops reading nor a full descriptor table stops the server. Every
// media URL of a chat request passes the SSRF guard (mm.Guard.CheckURL) before it is routed or forwarded.
//
// # Concurrency model
//
// fasthttp runs each request on a worker goroutine and recycles its RequestCtx afterwards: handlers copy
// what they keep (decoded bodies are copies) before returning; a stream's body writer runs after the
// handler returns, so a request ends (lifecycle end) in the writer. Handlers call the router core
// directly. State kept here is atomic: the in-flight count, the draining flag, the body budget, metric
// children resolved once at construction; and the reclaimer's connection count under its mutex
// (fasthttp's ConnState hook, any goroutine).
//
// An OpenAI request is prepared by a request actor (request.go, messages in messages.go), reused from an
// idle list and running on pooled goroutines (actors.ReuseDispatcher): it owns the request's preparation
// state while its concurrent stages (the image stage, one transfer per image) report back as messages,
// and it ends the preparation when the request's context ends (clientGone, deadlineExpired). fasthttp
// reads nothing while a handler runs, so a watch on the client's connection (clientgone.go: MSG_PEEK in
// the netpoller, armed once a request has run 2 ms) cancels that context when the client hangs up; the image fetch, the transfer and the
// worker call all run under it. Its cost against inline work with a recover is BenchmarkRequestActor
// (docs/benchmarks.md, "Frontend").
//
// # Ownership
//
// cmd/ builds the Server and owns its listener; each model's router cores (decode and prefill)
// are owned by actors/router; cmd/ stops the prefill cores with the others.
// Models is built once before serving and only read afterwards. Image bytes downloaded with
// --frontend-decoding belong to the image stage's goroutine until it reports, then to the request actor
// (read concurrently by the transfers until each reports); the actor inlines them into the
// worker-bound body (forwardImages), within MMConfig.Inline (shared by every model; the job gives its
// bytes back at its end, job.release), and then drops them.
//
// # Data flow
//
// bytes → fasthttp → Handler (parse, validate, admit) → router core → JSON response.
package frontend

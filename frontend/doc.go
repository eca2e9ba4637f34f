// Package frontend is kvroute's HTTP edge (fasthttp + go-json): the standalone router API today, the
// OpenAI-compatible endpoints with the embedded router as they land.
//
// # Overview
//
// Server answers /health, /live, /ready (Probes, probes.go: Dynamo's JSON shapes; /ready is 503 until
// enough workers are checked and once the drain starts) and /metrics itself, then offers each request to
// its mounted Handlers in order (OpenAIAPI, RouterAPI: /v1/workers, /v1/workers/{id},
// /v1/overlap_scores, PprofHandler: /debug/pprof/ behind the admin token).
//
// An OpenAI request's lifecycle has three calls (lifecycle.go): begin, firstToken, end. They keep the
// in-flight count the drain waits on, the dynamo_frontend_* / dynamo_component_router_* metrics
// (metrics.go) and the access-log line. Drain (drain.go) is the capped graceful shutdown: readiness
// off, a grace period, the listener closed with a bounded wait, then every request still running is
// cancelled through the context all requests derive from. Every error leaves as an
// OpenAI-style body {"error":{"message","type","param","code"}} with the status its class maps to
// (errors.go): handlers return class-wrapped errors, and only this package turns them into statuses.
//
// # Concurrency model
//
// fasthttp runs each request on a worker goroutine and recycles its RequestCtx afterwards: handlers copy
// what they keep (decoded bodies are copies) before returning; a stream's body writer runs after the
// handler returns, so a request ends (lifecycle end) in the writer. Handlers call the router core
// directly. State kept here is atomic: the in-flight count, the draining flag, metric children resolved
// once at construction.
//
// # Ownership
//
// cmd/ builds the Server and owns its listener; the router core is owned by actors/router.
//
// # Data flow
//
// bytes → fasthttp → Handler (parse, validate, admit) → router core → JSON response.
package frontend

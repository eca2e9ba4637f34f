// Package frontend is kvroute's HTTP edge (fasthttp + go-json): the standalone router API today, the
// OpenAI-compatible endpoints with the embedded router as they land.
//
// # Overview
//
// Server answers /health, /live and /metrics itself, then offers each request to its mounted Handlers in
// order (RouterAPI: /v1/workers, /v1/workers/{id}, /v1/overlap_scores). Every error leaves as an
// OpenAI-style body {"error":{"message","type","param","code"}} with the status its class maps to
// (errors.go): handlers return class-wrapped errors, and only this package turns them into statuses.
//
// # Concurrency model
//
// fasthttp runs each request on a worker goroutine and recycles its RequestCtx afterwards: handlers copy
// what they keep (decoded bodies are copies) before returning. Handlers call the router core directly;
// nothing here holds state of its own.
//
// # Ownership
//
// cmd/ builds the Server and owns its listener; the router core is owned by actors/router.
//
// # Data flow
//
// bytes → fasthttp → Handler (parse, validate, admit) → router core → JSON response.
package frontend

// Package soak is the soak test: `make soak` runs load against a `kvroute serve`-like stack
// in this process (simulated vLLM workers publishing real ZMQ KV events, the router core, the OpenAI
// frontend on loopback) for a set time and reports errors, latency percentiles, RSS and goroutine counts.
// The test lives behind the build tag soak (soak_test.go); this package has no code of its own.
//
// # What one run does
//
//  1. Start the stack: SOAK_WORKERS (default 4) simulated workers at SOAK_SPEEDUP (default 100) times
//     real time, the router, the frontend on 127.0.0.1:0.
//  2. Warm up for SOAK_WARMUP (default 10 s: connections, caches, and fasthttp's worker pools, which
//     shed idle workers after 10 s), then sample RSS (/proc/self/statm, after a GC) and goroutines
//     every 500 ms while SOAK_CONCURRENCY (default 64) fasthttp client goroutines post short completions
//     (8–40 prompt tokens from a pool of 1 024 prompts, max_tokens 1–4) back to back for SOAK_DURATION
//     (default 60s). Every request is bounded by a 10 s client timeout.
//  3. Report: requests, errors by kind, req/s, latency p50/p90/p99/p99.9/max, RSS and goroutines at start
//     and end and the medians of the first and last 10 s.
//  4. Assert: 0 errors, at least SOAK_MIN_RPS (default 5000) req/s, and RSS and goroutines of the last
//     10 s within 10 % of the first 10 s.
//
// # Concurrency model
//
// The load goroutines share nothing but atomics and their own latency slices, merged at the end; the
// sampler is one goroutine. The stack's own goroutines are those of the packages it runs.
package soak

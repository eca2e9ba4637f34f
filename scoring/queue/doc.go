// Package queue orders requests that wait for prefill capacity (spec/router.md §9).
//
// # Overview
//
// A request waits when a queue threshold is set and every eligible worker has active prefill tokens
// above threshold × max_num_batched_tokens (scoring.ShouldQueue). Waiting requests are ordered by
// (strict priority tier, policy score), higher first: a higher strict tier always wins; within a tier
// fcfs (default, tail TTFT), wspt (Smith's rule, mean TTFT) or lcfs (experiments) decide, with
// priority_jump in seconds. Equal keys pop in insertion order. The queue never rejects.
//
// # Concurrency model
//
// A Queue is not safe for concurrent use. Push, Pop and Rekey are O(log n) / O(n) and do not block.
//
// # Ownership
//
// The router's scheduler actor owns the queue: it pushes when ShouldQueue says so, and drains (Pop while
// ShouldQueue is false) whenever capacity frees: a prefill completes or a request is freed. Requests
// that waited longer than the overlap refresh interval get their overlap re-queried at dequeue.
//
// # Data flow
//
//	route → ShouldQueue? → Push(Key{strict, jump, arrival, isl, best cached}) … capacity frees → Pop → Select
package queue

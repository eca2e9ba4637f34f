// Package queue orders requests that wait for prefill capacity.
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
// The scheduler machine (scoring/sched) owns one Queue per policy class: it pushes a request its class
// must hold, and pops class heads by deficit round robin whenever capacity frees (a prefill completes or
// a request is freed). Limits and rejection are the machine's; a Queue itself never rejects.
//
// # Data flow
//
//	route → ShouldQueue? → Push(Key{strict, jump, arrival, isl, best cached}) … capacity frees → Pop → Select
package queue

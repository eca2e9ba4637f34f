// Package scenario runs golden routing scenarios: small scripts under scoring/testdata/scenarios/*.txt
// that drive the pure routing parts together (prefix index, per-worker load trackers, queue,
// approximate-mode bookkeeping, scoring.Select) and produce a transcript compared with a .golden file.
// `go test ./scoring/scenario -rewrite` regenerates the goldens; review them in the diff.
//
// # Overview
//
// Commands, one per line (# starts a comment, copied to the transcript):
//
//	config KEY=VALUE…          reset everything; keys are router flag names (scoring.Flags, e.g.
//	                           router-mode=kv, no-router-kv-events), DYN_* variables, seed=N, and
//	                           policy=FILE: a router policy document (scoring/policy) beside the
//	                           scripts, whose root profile's classes the queue uses (transcripts then
//	                           name each queued request's class). Defaults: kv mode, block size 4, seed 1.
//	add-worker id=N [dp=R] [device=cpu] [total-kv-blocks=N] [kv-used=N] [max-batched=N]
//	set-worker id=N [dp=R] [kv-used=N] …       update what a worker reports
//	remove-worker id=N
//	kv-event worker=N [dp=R] store|remove tokens=SPEC [from=B] | clear
//	                           store/remove the blocks of tokens from block B on (store: parent = block
//	                           B−1); the engine hash is the router sequence hash XOR a salt, and the
//	                           runner re-keys blocks with scoring.LocalBlockHashes, as the worker actor does
//	route id=ID tokens=SPEC [n=K] [pin=N [pin-rank=R]] [priority=S] [strict=T] [osl=N] [session=S]
//	      [class=C] [credit=X] [scale=X] [temperature=X] [weight=X] [reuse=B] [track-prefill=B]
//	                           class= is x-dynamo-meta-policy-class
//	sample n=K tokens=SPEC …   K dry Selects (no AddRequest); prints wins per worker
//	prefill-done id=ID | free id=ID | output id=ID tokens=N
//	tick DURATION              advance the fake clock; approximate expiry and stale requests
//	load                       print every worker's load snapshot
//	queues                     print every policy class's queue: requests, raw ISL, cached tokens, deficit
//	expect worker=N [dp=R] | error=all-busy|no-workers|pinned-busy|pinned-not-found|no-target|queue-rejected
//	       | queued | pending=N | overlap tokens=SPEC worker=N blocks=B
//	       | load worker=N [prefill=N] [decode=X] [requests=N]
//
// Token SPEC: comma-separated values and ranges, "1..16,100..103".
//
// # Concurrency model
//
// None: a Runner is single-threaded, with a fake clock and a seeded RNG, so transcripts are exact.
//
// # Ownership
//
// The Runner plays every actor: it owns the index, the trackers, the queue and the clock.
//
// # Data flow
//
// route: hashes → Index.FindMatches → per-worker Tracker.Load (snapshot + projection) → ShouldQueue →
// Select → Tracker.AddRequest (→ Approx.Record → Index.Store/Remove in approximate mode).
package scenario

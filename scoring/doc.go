// Package scoring holds kvroute's pure routing logic: no goroutines, no I/O, no clocks.
//
// # Overview
//
// scoring is the decision half of the router: given a request and its
// candidate workers, it says where the request goes, and the caller carries that out.
//
//   - config.go: Config, every router parameter with Dynamo's default, Validate, Resolved (the deprecated
//     overlap_score_weight migration and the --load-aware preset), per-request Override.
//   - flags.go: Flags, the flag/env table as data, and RegisterFlags for cmd/.
//   - cost.go: Dynamo's linear worker logit, term by term, and the lmetric policy.
//   - calibrated.go: the kvroute preset's cost in prefill-token units (ExpectedTTFT, CalibratedCost,
//     SharedCost: a copy of a prefix in use on its holder is a replica, one cached idle a dead copy) and
//     the Calibrator that learns its slowdown per active block.
//   - select.go: Select: pin and busy filters, then the mode's pick; argmin with a uniform tie-break or a
//     softmax over min-max normalized costs; error classes; ShouldQueue and BestCachedTokens for the queue.
//   - modes.go: round-robin, random, power-of-two, least-loaded, device-aware-weighted, direct.
//   - approx.go: approximate-mode TTL and capacity bookkeeping.
//
// Block hashing (hash.go) reproduces NVIDIA Dynamo bit for bit: a local block hash is
// XXH3-64 over the block's tokens as u32le (plus the sorted legacy mm_hash suffix) with seed 1337 or the
// LoRA/salt-derived seed; sequence hashes chain local hashes with seed 1337; pad values stand in for image
// positions in routing tokens. Sub-packages hold the prefix index (scoring/prefix), active-sequence load
// tracking (scoring/load) and queue policies (scoring/queue).
//
// # Concurrency model
//
// Nothing here is safe for concurrent mutation; every value has one owner, and functions are pure where
// they can be. Select is a pure function of its arguments: randomness comes through the RNG argument,
// round-robin position through Request.RoundRobin, time through arguments (Approx). It reads candidates
// and never retains them. A Config is immutable once Resolved and validated.
//
// # Ownership
//
// Request hashing and event re-keying both go through LocalBlockHashes / BlockHash, so router and engine
// views can never drift apart. The scheduler machine (scoring/sched) owns everything stateful a decision
// reads or writes: the per-worker load trackers (scoring/load), the queue (scoring/queue heaps, policy
// classes), the approximate and predicted Approx bookkeeping, session bindings, the round-robin counter and
// the RNG. Its owner in production is actors/router, which serializes its steps under one mutex. The
// prefix index (scoring/prefix) is owned by the indexer shard actors (actors/indexer); worker mirror actors
// (actors/worker) own a worker's event stream and feed the index, not load.
//
// # Data flow
//
//	tokens → PromptHashes → local hashes + prefix chain
//	local → prefix FindMatches (Overlap) ─┐
//	chain → load Projection (Additional)  ┴→ sched.Machine: queue? → Argmin / Select → Decision
//	Decision → tracker AddRequest; approximate mode: Approx.Record → index Store/Remove
package scoring

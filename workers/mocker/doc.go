// Package mocker is a simulated vLLM worker: the OpenAI API, a paged prefix cache with vLLM's semantics,
// a continuous-batching scheduler timed by Dynamo's mocker polynomials, and vLLM's KV event stream on
// real ZMQ sockets. Tests, the one-command demo (kvroute serve) and the benchmarks run fleets of these
// instead of GPUs.
//
// # Overview
//
//  1. Engine (engine.go, blockpool.go, hashing.go, timing.go) is pure: no goroutines, no clock, no I/O.
//     Add queues a Request (token ids, max tokens, image placements); Step schedules one engine step as
//     vLLM's V1 scheduler does and returns a *StepResult: the simulated duration, the step's KV events
//     (one vLLM batch) and per-request progress (one token per request that caught up, first token, done,
//     cached tokens). Tests drive it on a virtual clock by summing durations.
//  2. Block pool: NumGPUBlocks physical blocks; full blocks are cached under a hash chained over
//     (parent, tokens, extra keys); freed blocks stay cached in a free queue (last block of a request
//     first, so shared prefixes survive longest) and are evicted lazily when a new block is needed, each
//     eviction emitting BlockRemoved before the store that reuses the block. Only new stores emit
//     BlockStored (one event per request and step, covering its consecutive new blocks, decode-filled
//     blocks included); prefix hits emit nothing. ResetPrefixCache emits AllBlocksCleared and fails while
//     blocks are in use. Image blocks carry extra keys (identity, offset relative to the block start).
//  3. Scheduler: running requests first (decodes and prefill chunks), preempting the newest running
//     request when blocks run out (it restarts from its cached prefix), then waiting requests while the
//     token budget (max_num_batched_tokens) and max_num_seqs allow; prefills are chunked to the budget.
//     A prefix hit covers full blocks only and leaves at least one prompt token to compute.
//  4. Timing: a step costs PrefillMillis(prefill tokens computed) when it prefills plus
//     DecodeMillis(used blocks / all blocks) when it decodes, each divided by its speedup ratio.
//     EngineConfig.Timing replaces the polynomial with a fitted model (timing.go: Timing) that also
//     charges attention over the cached context of each prefill chunk and the KV each decode reads.
//  5. Runtime (rank.go, stream.go): one goroutine per dp rank steps its engine and sleeps until the
//     step's simulated end on one reusable timer (not when the end is nearer than
//     wallMinSleep, 1 µs, on the wall clock); step k+1 starts at the end of step k, so a late wake-up
//     is absorbed by later steps rather than stretching simulated time (unless the loop falls more than
//     maxLag behind, e.g. when the CPU cannot keep up). At the step's end it publishes the batch and
//     hands tokens to the requests' Streams.
//  6. Worker (worker.go, openai.go, metrics.go): one fasthttp server per simulated vLLM server, in front
//     of DPSize ranks; Fleet (fleet.go) starts many in one process. Request bodies are decoded with
//     exact member names, as vLLM's pydantic models read them. Image URLs are fetched (image.go) through
//     the frontend's SSRF guard (mm.Guard): internal destinations are refused unless MediaAllowHosts
//     names them.
//  7. Disaggregated prefill/decode (disagg.go): a request's kv_transfer_params make it a prefill
//     (Request.RemoteDecode: the response names the prompt's blocks for the decode side) or a decode
//     (Request.RemoteBlocks: the handler waits the KVTransferConfig transfer time on the worker's clock,
//     then the engine admits the pulled blocks as computed and stores them with BlockStored).
//
// # Concurrency model
//
//   - rank.mu guards the engine and the rank's stream map. The rank goroutine holds it to step and to copy
//     the step's output; HTTP handlers hold it briefly to submit, abort, reset and read ground truth or
//     stats. Nothing blocks while holding it.
//   - A Stream is written only by its rank goroutine (under Stream.mu) and read by one handler. The rank
//     goroutine never blocks on a stream: it appends and pokes a 1-slot notify channel.
//   - ZMQ sockets belong to workers/kvevents' Publisher goroutine (one per rank); the rank goroutine
//     encodes the batch and queues it (Publish blocks while the bounded queue is full, as vLLM's scheduler
//     does).
//   - Worker.goRun starts and tracks every goroutine of a worker; Close stops the rank loops (in-flight
//     streams end with ErrAborted), the HTTP server and the publishers.
//
// # Ownership
//
//   - Engine, blockPool, reqState: the owning rank (under rank.mu).
//   - Prompt token slices passed to Submit: owned by the engine afterwards (cached blocks and events
//     alias them; they are never modified).
//   - StepResult: valid until the next Step. KVEvent slices stay valid afterwards.
//
// # Data flow
//
//	HTTP body ─parse─▶ prompt ids (+ image runs) ─Submit─▶ rank: Engine.Add
//	rank loop: Step ─▶ sleep until simulated end ─▶ Publisher.Publish(batch) ─▶ ZMQ PUB (+ replay ring)
//	                                           └──▶ Stream.deliver ─▶ handler ─▶ SSE / JSON response
package mocker

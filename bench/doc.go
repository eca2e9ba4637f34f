// Package bench is kvroute's in-process benchmark suite: trace replay, the indexer, routing
// decision and tokenizer benchmarks behind `kvroute bench`, the oracles and peer-style baselines the
// side-by-side routing report compares against, and the report writer.
//
// # Overview
//
//   - trace.go: Mooncake JSONL, first-N-minutes filtering, the arrival schedule
//     (trace time divided by --arrival-speedup, optional seeded jitter).
//   - replay.go: Replay fires arrivals on schedule through an injected Sleeper (wall clock or a test fake).
//   - simroute.go: cache-and-backlog routing simulation over per-worker LRUs (round-robin … cost).
//   - arms.go: goodput under a TTFT SLO, load imbalance, load-over-time and hit-rate plots for the e2e report.
//   - tokens.go: Blocks turns hash ids into deterministic token blocks (same id → same tokens, the last
//     block cut to input_length) and into engine-size chunks.
//   - oracle.go, lru.go: the unbounded oracle (every block seen before is a hit) and the pooled oracle (one
//     LRU with the whole fleet's capacity), in tokens, the unit of vLLM's cached_tokens.
//   - peers.go: llm-d-style (2:1:1 prefix/queue/KV scorers, max score) and SGLang-style (cache-aware with
//     load-imbalance thresholds) selectors behind scoring.Selector.
//   - e2e.go, e2e_report.go: the end-to-end bench — per arm a fresh mocker fleet, router and frontend on
//     loopback, the trace replayed as streamed token-id completions; samples → SummarizeArm → goodput and
//     the acceptance checks.
//   - indexer.go: Dynamo's mooncake_bench method (§9.3) on actors/indexer; memlat.go and stalls.go say
//     what the machine that ran it costs (a dependent load) and how often its host stops a thread.
//   - route.go: the whole routing decision over a workers × prompt × index-size matrix.
//   - tokenizer.go: Encode tokens/s, cold and warm, per fixture tokenizer.
//   - stats.go, report.go, svg.go, progress.go: nearest-rank percentiles, report.json/report.md,
//     hand-written SVG plots, a stderr progress bar.
//   - The deterministic fleet lab (the same arms on a virtual clock, no HTTP) is the sub-package
//     bench/lab; it reuses Blocks, the oracles, the peer selectors, SummarizeArm and the report.
//
// What one op is, per bench:
//
//   - indexer: one overlap query, the sharded indexer's Match as the router reads it (timed on the replaying goroutine) or one Stored/Removed event sent
//     as an indexer.Apply. Blocks/s = (query blocks + stored blocks)/s, Dynamo's block throughput.
//   - route: one routing decision, hash → FindMatches → candidates → Select → AddRequest.
//   - tokenizer: one Encode of the whole text.
//
// # Concurrency model
//
// The indexer bench runs Replayers goroutines, each replaying the timelines of the workers dealt to it
// (worker k goes to replayer k mod R) in trace time order, sleeping until each entry's scaled time; the
// shard actors apply the events. Everything else runs on the calling goroutine. The progress bar has its
// own drawing goroutine, stopped by Done.
//
// # Ownership
//
// An IndexerWorkload is immutable once prepared and shared read-only by the replayers (the indexer's
// shard actors read the Op slices too); each replayer owns its latency slice until the run joins them.
// A run owns its actor system and indexer and stops both.
//
// # Data flow
//
//	trace.jsonl → LoadTrace → FirstMinutes → Arrivals(seed, speedup) → Blocks.AppendPrompt → tokens
//	trace → PrepareIndexer (hash, partition, per-worker LRU → Stored/Removed) → RunIndexer → IndexerRun
//	results → Fill*Report → Report.Write(out) → report.json, report.md, *.svg
//
// The end-to-end bench (frontend + simulated workers, every routing arm on one trace)
// is built on these pieces: prompts from Blocks, arrivals from Arrivals through Replay, the oracle rates
// for its report, the peer selectors as arms. Its request goroutines (one per arrival) each own their
// sample slot; the load sampler goroutine owns LoadT/Load; RunArm reads both only after joining them.
//
//	trace → Arrivals → RunArm (stack per arm: fleet + router + frontend) → ArmRun samples →
//	SummarizeArm → E2EResult.Finish (goodput, checks) → FillE2EReport
package bench

// Package lab is kvroute's deterministic fleet lab: a discrete-event simulation of a fleet of simulated
// vLLM engines on a virtual clock, with the production prefix index and pluggable schedulers, so routing
// policies are compared on the same arrivals without wall-clock noise (`kvroute bench lab`).
//
// # Overview
//
//   - sim.go: one run — N workers/mocker engines (the mocker's own Engine: its scheduler, block pool,
//     events and step-time model, called, not copied), the arrivals of a bench.Trace at an arrival
//     speedup, the engines' KV events re-keyed with kvevents.Rekey, or RekeyImages for workloads with
//     images (as actors/worker's converter does)
//     and applied to a scoring/prefix.Index EventDelay after their step ends, and the arm's Scheduler
//     called at each arrival (Route), first token (PrefillDone) and end (Free). The engines' KV usage is
//     scraped every MetricsInterval (the frontend health check's poll); Config.SpeedChanges change every
//     engine's speed mid-run (mocker Engine.SetSpeed). A run yields a bench.ArmRun,
//     summarized by bench.SummarizeArm exactly as the wall-clock e2e bench's runs are.
//   - sched.go: the Scheduler interface, the Fleet view a scheduler may read (shape, index, scraped KV
//     usage) and Request (prompt, local block hashes, prefix chain).
//   - arms.go, machine.go, sglang.go: the built-in arms, every one the production scheduler
//     (scoring/sched's Machine, as actors/router drives it: workers registered with their capacity,
//     scraped KV usage through SetKVUsage and, for the arms that read KV events, the index's count of
//     each worker's cached blocks through SetCachedBlocks, Tick on the scrape period) with another configuration,
//     selector or index: kv (the router's defaults: the kvroute preset's learned cost), kv-dynamo
//     (--router-preset dynamo: Dynamo's cost), kv-approx (no events: the machine's approximate
//     index), kv-scale8, kv-nopredict (the kvroute preset without predict-on-route), kv-decode (the preset
//     with the decode a request adds: --router-decode-weight 1), round-robin, random,
//     least-loaded, llmd (bench.LLMDSelector) and sglang (bench.SGLangSelector over its own approximate
//     tree of routed prompts, since SGLang's router never reads KV events).
//   - profile.go: engine profiles (below).
//   - workload.go: generated workloads as Mooncake lines (agentic, fanout, tenants, herding,
//     prefix-tree, bursts, and with images catalog and docqa), seeded.
//   - images.go: images in workloads (Config.Images: the hash id an image starts at → its identity
//     and size). The engine's prompt holds the image's placeholder run (Qwen2.5-VL's processor,
//     mm.Spec) and the request its vLLM uuid and span, so they enter the engine's block hashes and
//     events; the router hashes the frontend's routing view (mm.Expand: pad values of the mm_hash);
//     events are re-keyed with kvevents.RekeyImages, as the worker actor does with an image token id.
//   - run.go: Config, Run (every arm × every arrival speedup, runs in parallel, each single-threaded),
//     goodput per SLO over the sweep (bench.Goodput) and the goodput knee by bisection over the arrival
//     speedup; report.go: tables and plots through bench.Report. Each point also has its placed oracle
//     (bench.Oracle.PlacedHitRate): ideal LRU caches of the engines' capacity on the arm's own
//     placement, so the gap to the pooled oracle splits into what the placement cost (pooled − placed)
//     and what the engines' timing cost (placed − engines: blocks held by running requests, recency at
//     release rather than arrival; under load the engines can beat it).
//   - seeds.go: RunSeeds, the same lab under several seeds (`--seeds`): the seed moves a long-context
//     fleet's hit rate by several points in every arm (tie-breaks, token values, a generated workload's
//     draws), so a single seed's cell can be won or lost by luck. Each (arm, speedup) cell is summarized
//     over the seeds (mean, standard deviation, range of % of pooled and TTFT p90, seeds at ≥ 95 % of
//     pooled) and held, seed by seed, against the best of the peer arms of that seed's run (llmd and
//     sglang by default, `--peers`): seeds won on hit rate and on TTFT p90, and the margins; and, on hit
//     rate, against the best peer that met the serving bound (the knee SLO, else the largest goodput
//     SLO) in that run, since a peer past its own knee can hit everything by serving nobody in time.
//     A seed counts as both when the arm is at or above the best peer's hit rate and at or under its
//     TTFT p90 in the same run.
//   - suite.go: RunSuite, a list of cases (a workload on a profile and a fleet, swept over arrival
//     speedups) run as seed studies with the same seeds and peers (`--suite standing`: StandingCases,
//     the trace and every generated workload on the three profiles at 8 and 32 workers), every cell in
//     one table and a tally of the cells and (cell, seed) pairs that meet each line of the standing.
//   - timeline.go: each swept run over model time — per Window of arrivals the engines' hit rate and
//     TTFT p90, and for the arms whose cost is learned (Calibrated: the kvroute preset's machine) the
//     fit Machine.Calibration reports (α, β, γ, observations) every CalibrationEvery — as tables and
//     SVG plots, so a mid-run speed change reads off as convergence and recovery.
//   - explain.go: the learning arms route with ReturnCosts (the machine's per-candidate costs, as
//     nvext return_routing gets them) and read Machine.Loads before each decision; decisions whose
//     worker is not the best-cached are counted, classed (queued prefill, slowdown, tie, busy), summed
//     as the cached tokens they forwent (against the prompt tokens routed: the part of the gap to the
//     pooled oracle the policy chose) and sampled whole (q, u, K and cost of the chosen and the
//     best-cached worker).
//
// # Engine profiles
//
// A profile sets the engine's capacity and its step-time model (workers/mocker.Timing; the mocker's
// polynomial when nil). Figures are model time at speedup ratio 1, block size 64. Other profiles come in
// through Config.ExtraProfiles (`--profile-file`, JSON read by ReadProfile).
//
//   - mocker: Dynamo's polynomial, unchanged (prefill_ms = 4.21e-7·T² + 0.01518·T + 16.5; decode_ms =
//     −25.74·p² + 54.01·p + 5.74 at KV occupancy p), 16,384 blocks, max_num_seqs 256, 8,192 batched
//     tokens. Its prefill is ~66k tokens/s at large batches and it charges no attention over cached
//     context.
//   - llama8b-h100 (Llama-3.1-8B, BF16, one H100 SXM 80 GB):
//     prefill 0.032 ms/token (31k tokens/s): 2 × 8.0 G parameters = 16 GFLOP per token at 989 TFLOP/s
//     dense BF16 and ~50 % MFU, about half the mocker's rate; attention 1.3 ms per 10⁶ (query, key) pairs: 4 × 32 layers × 4,096 = 0.52 MFLOP
//     per pair at ~400 TFLOP/s for FlashAttention; base 5 ms (one pass over 16 GB of weights at
//     3.35 TB/s). Decode base 6.5 ms: vLLM's published nightly latency test (llama-3.1 8B, TP1, batch
//     8, 32 input and 128 output tokens) runs 128 steps in 833 ms on an H200, 6.5 ms per step; per
//     sequence 0.05 ms; KV reads 0.039 ms per 1,000 context tokens (131 kB of BF16 KV per token — 32
//     layers × 8 KV heads × 128 × 2 × 2 bytes — at 3.35 TB/s). KV capacity 6,400 blocks of 64 tokens:
//     0.9 × 80 GB − 16 GB weights − ~2 GB activations = 54 GB / 131 kB = 410k tokens.
//   - llama70b-fp8-h200 (Llama-3.1-70B, FP8 weights, BF16 KV, one H200 141 GB):
//     prefill 0.157 ms/token (6.4k tokens/s): 140 GFLOP per token at 1,979 TFLOP/s dense FP8 and ~45 %
//     MFU; attention 6.6 ms per 10⁶ pairs (4 × 80 layers × 8,192 = 2.6 MFLOP per pair at ~400 TFLOP/s);
//     base 15 ms (70 GB of weights at 4.8 TB/s). Decode base 16.2 ms: vLLM's published nightly latency
//     test for llama-3 70B (TP4, H200, batch 8, 32/128 tokens) is 2,078 ms for 128 steps, 16.2 ms per
//     step, which one H200 reading 70 GB of FP8 weights at 4.8 TB/s (14.6 ms) also lands on; NVIDIA's
//     published NIM table for Llama-3.3-70B FP8 on two H100 (5,000 input / 500 output tokens) gives an
//     ITL of 18.6 ms at concurrency 1 and 59.7 ms at 50; with 0.1 ms per sequence and 0.068 ms per 1,000
//     context tokens (328 kB of BF16 KV per token — 80 layers × 8 × 128 × 2 × 2 bytes — at 4.8 TB/s) the
//     model gives 16.7 ms and 39 ms there: the measured ITL also carries the chunked prefills mixed into
//     those steps, which the model charges as prefill, and two GPUs' all-reduces. KV capacity 2,560 blocks:
//     0.9 × 141 GB − 70 GB − ~3 GB = 54 GB / 328 kB = 165k tokens.
//
// The compute- and bandwidth-derived terms (attention per pair, KV read per token) are the roofline at
// the stated efficiency: no published vLLM figure isolates them; they set how a cached context changes a
// step, which is what a cache-aware policy must weigh.
//
// # Concurrency model
//
// A run is single-threaded: one goroutine owns its engines, index, scheduler and event heap, and time
// advances only through the heap (ordered by time, then by scheduling order), so a run is a pure
// function of its configuration and workload. Run executes independent runs in up to Parallel
// goroutines; results are collected by position, so the report does not depend on the interleaving.
// The workload (bench.Trace) is shared read-only; prompts are built per run.
//
// # Ownership
//
// The run owns the engines, the prefix index, the Fleet view and the scheduler it built; a scheduler
// reads the Fleet only during its own calls, and writes the index only through the production
// scheduler's approximate mode (as the router writes the indexer). A Request's slices are shared by the scheduler and the
// engine and never modified.
//
// # Data flow
//
//	trace or GenerateImages → Arrivals(speedup) → evArrive → buildPrompt (Blocks.AppendPrompt, images:
//	  placeholder runs + mm.Expand routing view) → PromptHashes → Scheduler.Route
//	  → Engine.Add → Step … step end: events → kvevents.Rekey (RekeyImages) → (EventDelay) → prefix.Index.Store/Remove
//	                               progress → first token: PrefillDone; done: Free (→ released requests)
//	Route (learning arms): Machine.Loads, Route with ReturnCosts → explainer → Timeline.Decisions
//	evCal (every CalibrationEvery): Calibrated.Calibration → Timeline.Calibration
//	samples → bench.SummarizeArm → Result (goodput per SLO, bisected knee) → Tables → bench.Report
//	samples → windows (Window) → Timeline → timeline tables and plots
package lab

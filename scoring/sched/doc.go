// Package sched is the scheduler as one pure state machine: every routable (worker, dp rank) with its
// load tracker, the waiting queue, the minimum-workers gate, the approximate-mode bookkeeping, the
// predict-on-route side index and session bindings. The router (actors/router), the golden scenarios
// (scoring/scenario) and the fleet lab (bench/lab) all drive this one machine, so what the tests see is
// what production runs.
//
// # Overview
//
// A Machine is built from a scoring.Config and an Index (the primary KV index, read for overlap and,
// in approximate mode, written with the machine's predictions). Its calls are steps:
//
//	Route(now, req)            → a charged Decision, or queued (the request is parked)
//	PrefillDone / Free(now, id) → the requests that freed capacity released, each already charged
//	AddWorker / RemoveWorker / SetHealthy / SetConfig / Tick(now) → likewise
//	Cancel(id)                 → withdraws a parked request
//	EventHealth(now, ...)      → the workers whose KV events stopped (or resumed)
//
// A decision is: the overlap scores (from the caller, or the Index) merged with the side index of
// recent decisions (predict-on-route, per-worker max) → the session binding or pin → queue check →
// select (the one-pass scoring.Argmin over dense load rows in the common case, else candidates +
// scoring.Select or the configured Selector) → commit (AddRequest on the target's tracker, approximate
// and predicted blocks, the pending-events mark, the session binding, the replica-sync observer).
// The kvroute preset's select is its own loop (calibrated.go); with nothing filtered and no lower tiers
// it runs as AVX-512 kernels eight candidates a step (calcost_amd64.s: the scalar loop's operations in
// its order, bit for bit, TestCostKernel), select about halved from 256 workers up (docs/benchmarks.md,
// "Whole routing decision"); the scalar loop stays for the rest, other CPUs and GOAMD64=v3 up. Its
// inputs beyond the load rows: the holder's started prefill left out (drain.go) and, while some worker's
// cache is more than half empty, what a request would evict elsewhere (room.go, from the index's count of
// each worker's cached blocks, SetCachedBlocks), and once every cache is full, how recently freed the
// blocks each engine evicts are (age.go, from the requests' ends and the index's log of evictions,
// Evicted), and the decode the request adds where it goes (decode.go, from the decode the fleet's
// requests reported at their ends: RecordOutput before Free), added to the kernel's costs in Go.
// Dynamo's linear cost (and every other preset's kv mode) has a kernel of its own (calLinearAVX512,
// linearArgmin: TestLinearKernel) with the same transposed reads, filtered targets at +Inf and the
// vector argmin. Busy thresholds are kept as marks by target position where a target's load, KV usage or
// capacity change (busy.go: TestBusyMarksAsThePass), so neither cost asks each target at a decision.
//
// Overlap in groups (groups.go): the router's indexer answers a query as groups of worker slots with
// equal overlap (prefix.Matches: some tens a query at 1,000 workers, where Scores are one per worker
// holding the first block). The machine keeps, per keys table of the index (one a shard; a table is
// replaced only when a removed worker's slot is reused), a map from slot to target position, built on
// first sight and dropped when positions change; a decision scatters the groups through it into the
// per-target overlaps, and merges the predictions there. No Score is written or read and no worker key
// is looked up. Lower tiers are per worker: those expand the groups into Scores (Matches.AppendScores).
// With a queue, the queue's check reads the groups too (the best cached prefix among eligible workers,
// through the same slot maps), and a request that waits keeps a copy of its groups (Matches.Clone:
// some tens of Groups at 1,000 workers, where Scores were 32 bytes a worker); a refresh or a release
// from the gate queries in groups again. Either way a decision is the same (TestGroupedOverlaps*):
// the holder among equal overlaps is the first in target order, which does not depend on the order an
// index lists workers in.
//
// The queue follows Dynamo's. It has one heap per policy class (scoring/policy: the classes of
// --router-policy-config, or one synthetic class from --router-queue-threshold and
// --router-queue-policy). A request is classified (its x-dynamo-meta-policy-class, its uncached ISL),
// then waits while its class's pool is busy by the class's rule, or while others of its class already
// wait (no bypass of a backlog); a class at one of its queue limits rejects it (ErrQueueRejected).
// Whenever capacity frees, the classes take turns by deficit round robin charged in uncached tokens; a
// class's head is released if its eligible workers are not busy by its class's rule, charged, and only
// then is the next head checked, so one freed slot releases one request, in class and policy order
// (fcfs, wspt, strict tiers first). A head that waited longer than OverlapRefreshAfter
// (DYN_ROUTER_OVERLAP_REFRESH_AFTER_SECS, 10 s) has its overlap queried again; otherwise it is routed
// with the overlap seen at arrival.
//
// # Concurrency model
//
// None inside: a Machine is not safe for concurrent use, never reads a clock (time is the now
// argument), never blocks and starts no goroutine. Its owner serializes the calls; actors/router holds
// one mutex around each step and does the expensive, parallel parts of a request (hashing, the index
// query) outside it. Measured in docs/benchmarks.md: the step is the selection plus the charge,
// ~2 µs at 256 workers, so the lock is held for a small part of a request's CPU time.
//
// # Ownership
//
// The machine owns its targets, trackers, queue, side indexes and bindings; the policy Profile is shared
// and read-only (the caller parsed it and must not change it); the Index is the caller's
// (the machine only reads it and writes predicted blocks). Requests' slices are read during Route and
// copied when the request is parked. Worker.Tag is the caller's value, returned untouched with decisions.
//
// # Data flow
//
//	Request (local hashes, chain, scores) → Route → [gate | queue] → decide → commit → Decision
//	PrefillDone / Free → tracker → drain (head by head) → []Released
//	Tick → approximate / predicted / session expiry, stale requests, gate patience → []Released
package sched

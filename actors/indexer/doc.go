// Package indexer is kvroute's sharded KV index: a root actor supervising N shard actors
// (--router-event-threads, default 4), each owning one scoring/prefix.Index.
//
// # Overview
//
// A worker is pinned to the shard with the fewest workers the first time any message names it (Dynamo's
// KvIndexerSharded rule); all its events go to that shard, in order. An overlap query reads every shard
// and concatenates the per-(worker, dp rank) scores — workers are disjoint across shards, so the merge is
// a concatenation.
//
// # Concurrency model
//
// Writes are applied by the shard actor under the shard's write lock. Every message for a shard (Apply,
// ClearWorker, RemoveWorker, Barrier) joins the shard's pending list in the order it is sent; the mailbox
// only carries a drainPending when the list turns non-empty, and the actor then handles the whole list in
// order, applying each run of consecutive event batches under one write lock (up to drainBudget blocks).
// Under load that is many batches per lock: with one lock per batch, and a batch per routed request, the
// overlap queries queued behind writers on every shard (readers block while a writer waits, and on 2
// cores a woken reader then waits for a run-queue turn: 8,000 convoys and 4.7 s of waiting per 44 k
// requests of the frontend throughput benchmark). Reads (FindMatches, Blocks, Stats) run on the caller's
// goroutine under the shard's read lock and never touch a mailbox. Pending lists are bounded
// (Config.MailboxSize): a flood of events blocks the subscribers that send them (back-pressure) rather
// than growing memory.
//
// Why read locks and not reply channels: measured with BenchmarkFindMatches (512-block query, 256
// workers, 1 M indexed (block, worker) entries, 4 shards, 2 cores shared with other work):
//
//	path=rlock  p50 1.2 µs  p99 1.5 µs  0 allocs
//	path=chan   p50 13.2 µs p99 851 µs  36 allocs   (send to each shard, wait on reply channels)
//
// and with every shard applying a steady store/remove stream (BenchmarkFindMatchesUnderWrites) the
// read-lock path stays at p50 1.4 µs, p99 9 µs. protoactor's RequestFuture (5–6 µs a call) is slower
// still, so it is not used at all. The Query message exists only so the benchmark can measure the
// mailbox path.
//
// # Ownership
//
// Each shard's prefix.Index and per-worker counters are written only by its shard actor. The
// worker→shard assignment is control-plane state under Indexer.mu. The shard structs outlive actor
// restarts: a shard restarted by its supervisor keeps its index.
//
// # Data flow
//
// worker mirror (actors/worker) → Apply → shard mailbox → prefix.Index.Store/Remove/ClearRank (device
// tier only: ops of another Op.Medium are counted in WorkerStats.OtherTierOps and skipped); engine
// restart of a rank → ClearRank; resync → ClearWorker;
// request path → FindMatches → every shard under RLock → scores.
package indexer

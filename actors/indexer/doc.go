// Package indexer is kvroute's sharded KV index: a root actor supervising N shard actors
// (--router-event-threads, default 4 but at most GOMAXPROCS), each owning one scoring/prefix.Index.
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
// Reads never wait for writes. Each shard keeps two views of its tree (left-right): the index's own
// (prefix.Index embeds its prefix.View) and a copy (prefix.Index.NewView). Readers (Match, FindMatches)
// run on the caller's goroutine, never touch a mailbox or a lock: they count themselves into the view that
// the shard's gate names (gate.live), re-check live (retrying only if the writer published in between),
// read, and count themselves out; a query enters every shard's view before it reads any and leaves each
// after its walk. The gates (live, both views' reader counts and the views, a cache line a shard) are one
// array, and a query loads every gate's live before its first count: the count's atomic add waits for the
// loads before it, so with each shard's counters in its own struct a cold query queued two misses per
// shard, one after another. Phases of the 20 s bench's queries timed apart (a one-off build): entering four
// shards, p99 2.1 → 0.9 µs, and in the slowest 1 % of queries p50 1.45 → 0.37–0.57 µs.
// BenchmarkFindMatchesUnderWrites (-benchtime 20000x, three pairs): p50 0.45–0.49 → 0.41–0.46 µs, p99
// 0.90–0.93 → 0.92–1.02 µs, p999 2.7–15.0 → 1.4–4.2 µs.
// The shard actor is the only writer; per write it
//
//  1. waits until no reader is left in the index's view (readers have been on the copy since the last
//     write; those still in the index's view entered before that publication, a query ago),
//  2. applies the batch to the index and seals it (prefix.Index.Seal: the chunk sums of the runs it
//     wrote), under shard.mu,
//  3. publishes the index's view (live = 0),
//  4. waits for the copy's last readers, and syncs the copy (prefix.Index.Sync: the nodes written, only
//     the changed tail of each run),
//  5. publishes the copy again (live = 1).
//
// A reader therefore sees every write once step 3 has happened, and never a write in progress. The writer
// may wait for a reader (steps 1 and 4), never the reverse. shard.mu serializes the writer with the
// control-plane reads of the index (Blocks, Size, Stats, Dump), which are not on the request path.
//
// Every message for a shard (Apply, ClearWorker, ClearRank, RemoveWorker, Barrier) joins the shard's
// pending list in the order it is sent; the mailbox only carries a drainPending when the list turns
// non-empty, and the actor then handles the whole list in order, publishing each run of consecutive event
// batches in one write (up to drainBudget blocks). Pending lists are bounded (Config.MailboxSize): a flood
// of events blocks the subscribers that send them (back-pressure) rather than growing memory.
//
// Why not read locks: with a sync.RWMutex per shard (the design before this one, writes applied under the
// write lock in runs of 32 blocks, but a Stored event of a long prompt applied whole), a reader that
// arrived while a writer held or waited for the lock parked, and on 2 shared cores it then also waited
// for a run-queue turn. The conversation trace at 1,000 workers (kvroute bench indexer --trace ...
// --workers 1000 --block-size 16 --capacity 1000000, the hour compressed into 20 s and 4 s), old and new
// binaries run alternately, three runs each, load average 18–22 from other work on the 2 cores:
//
//	                                 read lock                          two views (this)
//	20 s (434 k stored blocks/s)     p99 3.8–13 ms, p999 45–86 ms       p99 44–62 µs, p999 2.1–7.0 ms
//	4 s (2.17 M stored blocks/s)     p99 30–38 ms, p999 83–112 ms       p99 24–31 µs, p999 0.3–3.2 ms
//	10,000 workers, 4 s              p99 11.6 ms                        p99 61 µs
//
// The remaining tail is the machine: the same queries replayed from one goroutine with nothing writing
// ("quiescent") had p99 22–280 µs in the same runs. More precisely it is the caches a reader finds
// after the writers ran on its core: the trace's queries replayed with 4 MB of other memory read before
// each have p99 22–72 µs with nothing writing, against 9.5 µs back to back (scoring/prefix's doc). The writer pays a sync of the nodes it wrote (the
// changed tails of runs, child-map changes replayed from a log) and may wait for a reader that entered the
// view it is about to change. Unpaced, the trace ran at 3.1–5.7 M blocks/s (query plus stored) against
// 3.1–3.8 M before; at 4 s pacing the writes fell behind in two of three runs (6.1 and 7.9 s against
// 4.9–5.5 s before). At load average 4–6 they kept up (4.2–4.3 s), p99 was 39–154 µs at 20 s and 33–112
// µs at 4 s (1.7–12.9 ms before), and unpaced 8.6–9.0 M blocks/s (6.9–9.3 M before). The cost is memory, the copy's runs and node headers: about 7 B per (block,
// worker) at 4 shards; with the index's later layout (12-byte handle slots, no engine hash per position,
// runs sized for their store: scoring/prefix's doc) the whole sharded index, views included, is 46.7–46.9
// B per (block, worker) at 1,000 workers and 47.3–47.6 B at 10,000, where it was 67.5 and 67.6–67.9 B
// (docs/benchmarks.md, "Reads while the writes run").
//
// Why not reply channels: measured with BenchmarkFindMatches (512-block query, 256 workers, 1 M indexed
// (block, worker) entries, 4 shards, 2 cores shared with other work):
//
//	path=direct p50 1.2 µs  p99 1.5 µs  0 allocs    (read lock then; the views now)
//	path=chan   p50 13.2 µs p99 851 µs  36 allocs   (send to each shard, wait on reply channels)
//
// protoactor's RequestFuture (5–6 µs a call) is slower still, so it is not used at all. The Query message
// exists only so the benchmark can measure the mailbox path.
//
// # How many shards
//
// A shard is a tree with its own writer. Shards past the CPUs add no write throughput (the writers only
// take turns), and cost twice: a prefix held by workers of several shards is stored once a shard (the
// conversation trace's system prompt is on almost every worker), and a query walks every shard's tree.
// So the default is Dynamo's 4 capped at GOMAXPROCS (scoring.DefaultIndexShards); a set
// --router-event-threads is taken as it is. The conversation trace at 1,000 workers on the 2-vCPU
// guest (kvroute bench indexer --trace … --workers 1000 --block-size 16 --capacity 1000000 --shards N):
//
//	                                       4 shards          2 shards          1 shard
//	bytes per (block, worker), unpaced     47.2              45.4              42.0
//	  the same at 10,000 workers           48.0              46.7              —
//	unpaced event blocks/s                 15.4 M            15.8 M            9.2 M
//	query p50 under writes, 20 s / 4 s     2.2 / 1.4–1.5 µs  1.7–1.9 / 1.1–1.3  —
//	quiet floor p50 (back to back)         2.0 µs            1.8 µs            1.7 µs
//
// One shard loses half the write rate (one writer on two CPUs). The tails (p99, p999) were the host's in
// those runs, alike for 2 and 4 shards (docs/benchmarks.md, "Shards past the CPUs").
//
// # Ownership
//
// Each shard's prefix.Index, its view copy and per-worker counters are written only by its shard actor. The
// worker→shard assignment is control-plane state under Indexer.mu. The shard structs outlive actor
// restarts: a shard restarted by its supervisor keeps its index.
//
// # Data flow
//
// worker mirror (actors/worker) → Apply → shard pending list → prefix.Index.StoreTier/RemoveTier (the
// op's Medium: device, host, or disk for disk and external; unknown media counted in
// WorkerStats.OtherTierOps and skipped) or ClearRank → publication of the shard's views; engine restart
// of a rank → ClearRank; resync → ClearWorker;
// request path → Match (FindMatches for callers that want a Score per worker) → one prefix.Query (the
// request's chunk sums, computed as the first shard's walk needs them and reused by the others) → every
// shard's live view, entered together, their paths walked ahead in turn (prefix.Ahead) → each view's
// walk → groups of worker slots with equal overlap and each view's keys table (prefix.Matches), or Scores
// (device overlap in Blocks, its continuation on host and disk in Host and Disk) from a view where some
// worker holds lower-tier blocks.
//
// Why walk ahead: a query is mostly cache misses once the writers have run on the reader's core (the
// caches it finds then: scoring/prefix's doc), and each shard's path is a chain of dependent loads
// (node, child set, next node). Stepped in turn, one node per shard at a time, the four chains' misses
// overlap; the walks then find their paths in the cache. The trace's queries at 1,000 workers with 1 or
// 4 MB of other memory read before each, with and without walking ahead alternately in one process,
// six pairs at load 11–12: p50 4.3–6.4 against 4.8–7.3 µs, p90 8.1–12.0 against 9.7–15.5 µs, p99 lower
// in five of the six; back to back (all in the cache) p50 2.6–2.7 µs both. A step prefetches the next
// node's run and chunk sums rather than loading them (a load that misses holds the steps behind it): cold
// floor p99 18.3 → 15.6 µs, mean of five pairs on a Zen 3.
//
// Huge pages: on a host in THP mode madvise the Go heap gets none, and each of a cold query's misses is
// also a TLB miss. --huge-pages (internal/hugepage) reserves the heap up front advised MADV_HUGEPAGE;
// on a 2-vCPU KVM guest the 4 s p99 under writes went 18.0–20.0 → 10.4–11.8 µs and the 20 s p99 17.8–21.1
// → 15.1–16.6 µs (docs/benchmarks.md, "Huge pages under the index"); it is off by default because the
// start waits for a probe and for the pages faulted in ahead of the index (so that no index thread waits
// for a huge page's first fault), and because on a guest whose host uses small pages it made the bench
// slower (the probe turns them down there).
//
// Warming (warm.go): every Config.WarmEvery (5 ms, --router-index-warm-secs) a goroutine reads what
// queries read of each shard's live view (prefix.View.Warm: nodes, chunk sums, worker-set words past
// the inline ones, child tables), 256 nodes at a time, leaving the gate and yielding between slices,
// and only for shards some query read since its last pass (a gate's reader counter also counts finished
// reads in its high bits, so the read path pays nothing for it; the warmer's own exits do not count, so
// an idle index is not warmed). The query-hot
// part of a view is small (about 7,400 nodes, 1.5 MB, a shard on the conversation trace at 1,000 workers,
// against 27 MB of runs and far more of handles), but the writes stream through the caches between two
// turns of a conversation. Indexer.Warmed counts the views read and the time spent (kvroute bench
// indexer reports them per run): at 1,000 workers 90–152 µs a view, 1.3–2.2 % of a core at the 20 s
// pace and 3.6–3.9 % at 4 s; at 10,000 workers 103–165 µs, 2.4–3.8 %. kvroute bench indexer
// (the acceptance sweep, 2 shards, 2-vCPU guest, --warm-every 5ms against 0, alternately; nine runs
// with warming, eleven without): p99 at 20 s 10.1–15.2 µs (median 11.0) against 13.3–19.7 (15.3), at 4 s
// 6.3–10.3 (7.0) against 9.1–15.3 (10.9); p999 at 20 s 30–56 against 34–61 µs; unpaced writes 14.5–16.6
// against 13.0–18.4 M event blocks/s. At 10,000 workers it did not help (20 s p99 44.0 against 47.3 µs;
// that tail was the read's own allocation, since removed: docs/benchmarks.md, "Page faults inside a read"),
// nor after the pass also read the worker-set words past the inline ones (most of a node's set there:
// 20 s p99 40.6 against 35.4 µs, one run each). At 1,000 workers reading those words too gave the lower
// 20 s p99 in 8 of 13 pairs, median difference −0.7 µs (docs/benchmarks.md, "Which queries are slow").
// A pass that read ten fields of each node (every line of it, field by field) instead of a word per line
// did less in four runs (20 s p99 13.7–14.8 µs, 4 s 6.6–10.0). The routing decision (kvroute bench route,
// 256 workers, 1 k prompt, 1 M blocks, 5,000 decisions, three pairs) kept its p50 (3.6–3.7 µs); a warmer
// that read a whole view without yielding raised its p99 from 7.5–12.8 to 9.5–21.8 µs, the slicing
// brought it back (7.4–14.9 against 9.5–26.0 µs). The frontend's routed throughput did not move (12.5 k against 12.5 k req/s, three
// pairs against a build with warming off).
//
// What the p99 under writes is: `kvroute bench indexer --again` times each query a second time at once.
// At 20 s pacing the first read's p99 is 31–34 µs and the second's 10.6–11.5 µs (docs/benchmarks.md, "The
// same query again"): the tail is the first read of a path the caches lost since the conversation's last
// turn, not a wait for a writer (a compute loop timed at the same moment has p99 3.75 µs).
//
// Why a pair of reader counters per shard, not one reader slot per query: entering the four views costs a
// query four atomic adds on lines the writers read at every write (and four more to leave), and under the
// conversation trace's writes at 20 s pacing one query in ten took 1 µs or more to enter them (1.8 µs at
// the p99). A slot per query (one compare-and-swap to enter every view, one store to leave, writers
// scanning the slots) was measured and not kept: BenchmarkFindMatchesUnderWrites p99 0.49–1.30 against
// 0.47–1.37 µs, its p999 10–12 µs in every run where the counters' was under 5 µs in four runs of six,
// and the bench under writes unchanged within its noise (docs/benchmarks.md, "The cold floor, and what
// did not shorten it").
package indexer

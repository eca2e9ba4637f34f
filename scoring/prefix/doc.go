// Package prefix is kvroute's prefix index: which KV cache blocks every (worker, dp_rank) holds, and for a
// request's block hashes, how many leading blocks each of them already has. It reproduces the semantics of
// Dynamo's RadixTree with a faster layout.
//
// # Overview
//
// Engines publish stored and removed KV blocks. A stored block arrives as (engine hash, local hash): the
// engine hash is the engine's own chained hash, opaque and only meaningful to that (worker, dp_rank); the
// local hash is recomputed by the router from the block's tokens (scoring.BlockHash) and is what requests
// are hashed with. The tree navigates only by local hash; engine hashes are per-worker handles that name a
// tree position, used to find a store's parent and to apply removals.
//
//  1. Store(w, parent, hasParent, blocks): start at the position named by w's handle parent (the root when
//     !hasParent; an unknown parent rejects the whole store, ErrParentNotFound). For each block, descend to
//     the child with its local hash (creating it), add w there and map the engine hash to it. Handles are
//     reference counted: vLLM may store one hash twice, and w leaves a block only when its last reference
//     there is removed. A hash that w already uses for a different block (including the parent itself)
//     stops the store with ErrInvalidBlockSequence.
//  2. Remove(w, hashes): drop one reference per hash; unknown hashes are counted and skipped and the first
//     is returned (ErrBlockNotFound). When a block loses its last worker, it and everything below it are
//     dropped (cascade), including handles other workers still had below it; Dynamo keeps such handles
//     pointing at detached nodes, which can never match again, so dropping them loses nothing that
//     matters and keeps Dump exact. The tree knows which workers held a dropped block, not the engine
//     hashes they named it with, so a cascade does not search their tables: their handles there become
//     dead (counted out of every size at once; the block's id stays reserved until the last is deleted),
//     and are deleted when a lookup meets one or when they are half of a worker's table (one scan,
//     amortized over the handles it deletes).
//  3. ClearWorker(id) drops the blocks of every dp_rank of a worker and keeps it known; RemoveWorker(id)
//     also forgets it.
//  4. FindMatches(localHashes, out) appends, per (worker, dp_rank) holding the first block, the number of
//     consecutive blocks from the start it holds. A worker removed from a middle block still sits in the
//     blocks below; the walk intersects worker sets, so those blocks never count. View.Match gives the
//     same answer as the walk finds it (matches.go): a Group (a bitset word of slots and their overlap)
//     wherever workers drop out of the path, with the view's keys table to name the slots.
//  5. Dump(fn) emits single-block stores in breadth-first order, parents first; replaying them into a
//     fresh index reproduces its matches and sizes (snapshots, resync, the standalone indexer's DumpTree).
//     It carries the device tier only.
//  6. Storage tiers (tiers.go): StoreTier / RemoveTier take blocks a worker holds on host memory or disk
//     (an offloading connector's medium "CPU", ...). Each tier keeps its own references, so evicting a
//     block from host memory leaves the device copy and the reverse. FindMatches reports per worker
//     Score.Blocks, the device prefix (a host block never counts there), Score.Host, how many more blocks
//     the prefix continues for on host memory (or the device), and Score.Disk, how many more after that on
//     disk (or a faster tier). A worker with lower-tier blocks gets one extra slot per lower tier holding
//     the union of that tier and the faster ones; the walk is the same, so an index whose workers report
//     no lower tier pays one branch per call.
//
// # Concurrency model
//
// None: an Index is a plain data structure with a single writer and no goroutines, clocks or I/O. The owner
// (an indexer shard actor in actors/indexer) serializes Store, Remove, ClearWorker, RemoveWorker and Dump.
// FindMatches only reads (its scratch lives on its stack), so concurrent calls are safe while nothing
// writes. For reads that never wait for the writer, FindMatches is a method of View, the part of the
// index queries read (nodes' runs, children and worker sets; slot keys and tiers): the Index embeds one,
// NewView makes a second, and Sync brings the second up to date with the nodes written since the last
// Sync (each node is flagged when written; a run that grew at its end copies only its new tail). An owner
// lets readers read one view while it writes the other (the shards of actors/indexer alternate between
// the index's view and the copy), and calls Seal before it lets readers into the index's own view (Seal
// sums the chunks written since the last Sync; Sync seals first). Ahead reads a View as FindMatches does
// (a caller steps several views' paths in turn before querying them, so that their cache misses
// overlap: actors/indexer's doc). Nothing in this package locks.
//
// # Ownership
//
// The Index owns everything it holds: Store copies the blocks it is given and FindMatches only appends to
// the caller's out slice (pass out[:0] of a reused slice for zero allocations; past 2,048 worker slots a
// view's walk allocates its sets of slots, which Match keeps in the caller's reused Matches instead:
// docs/benchmarks.md, "Page faults inside a read"). The keys table (worker
// key by slot) is shared by the index and its views and never written once a view has it: a reused
// slot gets a new table, and appends write past every holder's end; so a Matches stays valid after its
// view is left and written. A View made by NewView
// owns its copies (nothing is shared with the index), and only the index's Sync writes it. Worker keys are mapped to
// dense slots owned by the index; a removed worker's slot is reused.
//
// # Data flow
//
// workers/kvevents decodes engine events → the indexer actor re-keys them (local hashes from token ids)
// → StoreTier / RemoveTier / ClearRank on its shard's Index → Seal → Sync of the
// shard's view copy. A request's local hashes → a Query (its chunk sums, computed once) →
// FindMatchesQuery on every shard's published View → merged overlaps → scoring's cost model. Dump feeds
// snapshots and resync.
//
// # Design, chosen by benchmark
//
// The query is the router's hot path, so the layout is built for it:
//
//   - Compressed radix tree. A node is a run of consecutive positions that hold exactly the same workers,
//     with the run's local hashes in one []uint64. A query compares runs sequentially (about 1 ns a block)
//     and does a child lookup and a worker-set intersection only where the tree branches or the set of
//     workers changes. Runs split when a store branches inside them or a worker joins or leaves part of
//     them, and merge back with their only child when the sets become equal again, so churn does not
//     fragment the tree for good. The W=256 benchmark index (1 M entries) has about 4,000 nodes.
//   - Worker sets are bitsets over dense per-index slots. The walk keeps the active set and, at each node,
//     emits active &^ node (dropouts) and keeps active & node: exact even when a worker is absent from a
//     middle node. Slots 0..255 live inline in the node and the first child is inline too, so visiting a
//     node touches the node and its run, nothing else.
//   - Nodes live in one []node arena addressed by uint32; block positions have stable ids so that handles
//     survive splits and merges (ids → (node, offset) in one []loc). Splits keep the head in place and
//     move the tail; freed nodes keep their run buffers for reuse.
//   - Per-worker handles are an open-addressing table (12 bytes a slot: the engine hash and the block id;
//     linear probing, backward-shift deletion) instead of a Go map[uint64]*node. A slot has no count:
//     references beyond the first (an engine storing one hash twice) sit in a side map, nil for almost
//     every worker. Tables grow by half, not double (the home slot is a multiply-shift, so any length
//     works), and are about 60 % full on average instead of 52 %. Store first touches the home slot of
//     every hash of the event, so the cache misses into 256 large tables overlap instead of queueing.
//     A grown table (and a doubled child table) is written once per page before rehash probes it
//     (writeFirst): probing fresh memory read each page first, mapping the kernel's zero page, and the
//     write after it sent the query's core a TLB shootdown per page; 21–28 k of them in a 4 s run of
//     the index bench at 1,000 workers, read p99 under writes 14–16 µs, against 190–280 and 9.4–9.6 µs.
//   - Dead handles instead of a search on cascades. The tree kept, per position, the engine hash of the
//     store that created it, so that a cascade could find each holder's handle with one probe; a holder
//     that had named the block with another hash (another engine's chain) cost a scan of its whole
//     table per block, 15 % of the CPU in the fleet lab. Now a cascade costs a step per holder and per
//     block, and the tree no longer keeps engine hashes.
//   - Memory is what scales with the fleet, so it is counted per (block, worker) entry on the
//     conversation trace at 1,000 workers, 4 shards (kvroute serve's default on 4 or more CPUs), live heap after a GC,
//     views included: 67.5 B with a creator's engine hash per position, 16-byte handle slots doubling and
//     runs grown by append; 59.0 B without the engine hashes (dead handles); 48.9 B with 12-byte slots
//     growing by half (handle tables 30.6 → 19.7 B per entry); 46.9 B with a new node's run sized for
//     the store that creates it (every block after a branch is new) and the view's copy taking the run's
//     capacity. What is left per entry: handle tables ~20 B, per tree position (0.84 per entry) its local
//     hash twice (index and view, 8 B each), its id (4 B) and its loc (8 B).
//
// Figures (AMD EPYC, 2 cores shared with other builds; docs/benchmarks.md "Prefix index" has the
// commands and the full table), 512-block query, W=256 workers in one index (1 M (block, worker) entries):
//
//	                          this index                 node per block, Go map children
//	conversation query        p50 1.1–1.5 µs, p99 4–6 µs  p50 42–45 µs, p99 117–183 µs
//	hot chain, full match     p50 1.7 µs, p99 3–4 µs      p50 6–10 µs,  p99 13–21 µs
//	staircase (W dropouts)    p50 2.9 µs, p99 6–12 µs     p50 6–13 µs,  p99 21–56 µs
//	memory per (block,worker) 37 B (50 B before the
//	                          handle and run changes below) 158 B
//
// A 64-worker shard answers a conversation query in 0.5–0.9 µs (p99 3–4 µs). Stores of 16-block chains
// apply at 2.5–4.3 M blocks/s (W=256) and 5.5–5.8 M blocks/s (W=64) on one core; evicting and re-storing
// at full size runs at 2.0–2.6 M blocks/s.
//
// The naive layout loses on cold caches: 512 dependent pointer chases into scattered map buckets. The
// compressed tree reads one contiguous run per node.
//
// Reads beside the writer: a second View (left-right) rather than copy-on-write nodes, per-node seqlocks
// or epochs. A View copies only what queries read, about 8 B per tree position plus node headers, while
// the handles (the largest part of the index's memory) stay single; a persistent tree would copy the path
// to the root per store and need reclamation, and seqlocked reads of Go slices that a writer reallocates
// are data races. On the conversation trace at 1,000 workers (actors/indexer's doc has the figures) the
// copy costs about 7 B per (block, worker) at 4 shards, and a query under writes no longer waits: p99
// 24–62 µs where it was 3.8–38 ms, on a 2-core machine at load average 18–22.
//
// What a query costs on its own: the slowest queries of the conversation trace are the longest (3,000–
// 7,000 blocks), whose runs are compared hash by hash from memory in every shard that holds a part of
// the prefix (a path there is short: 1–2 nodes in 88 % of a shard's walks, at most 11; docs/benchmarks.md,
// "How long a query's paths are"). Replayed against the final index with nothing writing, the
// fastest of three passes per request ("floor" in kvroute bench indexer) has p50 3.4–4.5 µs and p99
// 13–18 µs at 1,000 workers, 4 shards (load average 5–25): comparing runs is about 45 % of the query's
// CPU, emitting ~1,000 scores 25 %, child lookups and worker-set intersections the rest. A least-squares
// fit over the trace's 12,031 queries (floor against what each walk does, r² 0.81): 1.3 µs per query
// (its ~1,000 scores), 0.26 µs per node visited, 0.85 ns per hash compared; at the p99 a query compares
// about 12,000 hashes over 4 shards, the same conversation's run in three of them (its turns were
// stored by workers of different shards).
//
// Chunk sums (chunks.go) instead of comparing long runs hash by hash: each node keeps one sum per
// 64-position chunk of its run (aligned on depth, so splits and merges hand them over), a query sums its
// own hashes once for all shards, and a run is compared a word per chunk. Summing first cost about 0.6 ns
// a hash against 0.1 ns for a compare in the cache and 0.85 ns from memory, so only comparisons of 512
// positions or more used them (figures below); the sums are now multilinear, eight products per AVX-512
// multiply, 0.1 ns a hash (next paragraph but one), and a single chunk is compared by sum. The floor over the trace, old and new alternately, two runs of three
// passes each at load average 10–12: p99 16.9–20.5 → 11.2–14.3 µs, p999 24–31 → 17–21 µs, p50 unchanged
// (4.0–4.7 and 4.4–4.9 µs). Memory: 46.7 → 47.1 B per (block, worker) (the sums of both views, and
// each node's depth and sums header). At 10,000 workers (floor p50 ~12 µs, mostly emitting ~7,000
// scores) the floor's p99 is 27–33 µs against 27–32 µs before: there the scores, not the runs, are the
// cost. Scores are emitted by emit, a loop of its own: inside the walk the compiler kept the walk's
// variables in memory and chained BSF on the previous key's load (docs/benchmarks.md, "Long runs
// compared by chunk sums").
//
// Vector kernels for the two loops a query's CPU went to (a profile of the trace's queries replayed with
// nothing writing, 1,000 workers: emitting ~1,000 Scores 27 %, summing the query's chunks 10 %, 58 % in
// its longest queries). chunksum_amd64.s sums eight positions per AVX-512DQ 64-bit multiply: the term is
// h·m mod 2^64 (multilinear), where it was the 128-bit product folded to 64 bits, which has no vector
// form; 0.14–0.2 ns a hash against 0.7–0.9 ns for the scalar loop (BenchmarkChunkSums, load 9), so a
// one-chunk comparison is already cheaper by sum than from memory. emit_amd64.s writes four Scores per step (masked load of their keys,
// compress, two permutes, masked stores): 1.7–1.9 → 0.66–0.85 ns a Score (BenchmarkEmit), from 8
// Scores a call up. Both keep a scalar form with the same results for other CPUs, checked against the
// kernels (TestChunkSumKernel, TestEmitKernel). The floor, old and new binaries alternately at load 5–9:
// at 1,000 workers p50 3.6–5.4 → 2.8–3.7 µs and p99 10.3–17.0 → 8.8–12.4 µs; at 10,000 workers (7,000
// Scores a query) p50 11.8 → 6.3 µs, p99 24.6 → 17.7 µs.
//
// Where there is no AVX-512 (AMD before Zen 4, most Intel client parts), emit_amd64.s has an AVX2 +
// BMI1 kernel: a Score a step, its slot found by TZCNT, which reads no register but its source, so the
// slots do not wait on the keys' loads as the scalar loop's BSF does on AMD. On a Zen 3 (EPYC, no
// AVX-512): 2.07–2.09 → 0.90–0.91 ns a Score (BenchmarkEmit); emitting was a third of a query's CPU
// there. In the bench under writes, two pairs alternately: p50 6.8–7.1 → 5.6–5.9 µs at 20 s and 5.5–6.1
// → 4.5–4.9 µs at 4 s, the same query again (warm) p99 16.9–17.1 → 10.7–10.9 µs; the first read's p99,
// cold, did not move (docs/benchmarks.md, "The same query again").
//
// What is left is memory, not instructions. The trace's queries replayed with nothing writing but 4 MB
// of other data read between them (a one-off experiment: a test replaying the built index) (what a reader meets after the writers ran on its core) have p50
// 5.3–8.3 µs and p99 22–72 µs, against p50 3.0 µs back to back; with 64 MB between them (nothing
// cached) p50 23–27 µs. Without emitting any Score: p50 5.6 and 23 µs. A query reads its path in every
// shard (200-byte nodes, runs, chunk sums, a child map) and 16 bytes of key per Score it writes, and the
// tail under writes is those misses (docs/benchmarks.md, "Vector kernels, and the cache").
//
// Measured since, with a cold floor (kvroute bench indexer --cold-mb 4: each query timed after 4 MiB of
// other memory was written, fastest of three; 1,000 workers, p50 3.6–4.1 µs, p99 10.2–11.3 µs against
// a warm floor of 2.3–2.5 and 5.7–6.5 µs): walking ahead is worth a fifth of the cold p99 (13.5–13.9 µs
// without it), and entering the views and walking ahead alone take half of a cold query (p50 2.2 of 4.2
// µs, p99 6.3 of 11.8 µs): chains of dependent misses. Tried and not kept (docs/benchmarks.md, "The cold
// floor, and what did not shorten it"): prefetching the query's hashes or the worker keys, walking ahead
// further or also touching each run's end. The bench's query hashes come from memory (the router's are
// just computed): copied before the clock starts, the cold p99 is 9.7 µs instead of 11.1.
//
// Child tables (node.go's children): a node with more than eight children keeps them in an
// open-addressing table (linear probing, backward-shift deletion) in the slice that holds a small set's
// children, instead of a Go map. A lookup reads the node's slice header and the slot its hash lands on; the
// map read its header, directory, table and group, four dependent loads. On the 4 MiB cold floor that
// did not show (the roots' map headers and directories stay cached between queries), but under the
// trace's paced writes, where nothing of a path survives between two turns of a conversation, it does:
// the bench on the 1,000-worker trace, three pairs alternately, p99 at 20 s 49.0–54.0 → 43.6–45.6 µs,
// at 4 s 29.8–33.7 → 26.9–34.0 µs, unpaced writes 8.2–9.4 → 9.8–13.6 M event blocks/s, memory 47.0–47.2
// → 47.0–47.1 B per (block, worker); the node is 8 bytes smaller (no map pointer). On the machine of
// those runs a dependent load into a buffer the size of the index costs 280–330 ns (the bench's
// memory-latency table), three times a bare-metal DRAM access: nested page tables, so each cold line is
// also a TLB miss (docs/benchmarks.md, "What a cold read costs").
//
// Answers in groups (matches.go): with the index on 2 MiB pages, a query under the trace's writes spent
// about a third of its p99 writing a 32-byte Score per worker holding the first block (919 a query at
// 1,000 workers) and reading that worker's key, inside the views. View.Match writes a Group per bitset
// word where workers drop out of the path instead (some tens a query), and the router's scheduler maps
// slots to its targets per keys table (scoring/sched's groups.go). kvroute bench indexer at 1,000
// workers, three pairs alternately: 20 s p99 14.1–14.4 → 9.9–10.7 µs, 4 s p99 9.8–10.8 → 7.6–7.9 µs; at
// 10,000 workers, 4 s p99 29.1–29.4 → 10.2–10.8 µs (docs/benchmarks.md, "Overlaps in groups").
//
// Edge sums (chunks.go): a run's unaligned ends were compared hash by hash from memory, up to 63
// positions each; the last node of a conversation's path ends where its previous turn ended, and the next
// turn goes on past it. Each node now keeps the partial sums of both ends (16 bytes, in both views):
// three pairs alternately, 20 s p99 9.7–10.0 → 8.7–9.1 µs, 4 s 7.2–7.4 → 6.4–6.8 µs, memory 47.0 → 47.1–
// 47.2 B per (block, worker) (docs/benchmarks.md, "Edge sums").
//
// Short runs by their edges too: a run with no whole chunk and more than minEdgeRun positions (a node
// between two nearby splits, where the set of workers changes every few blocks: the deep paths of a
// conversation served by many workers) was compared hash by hash from its own page. Its edges now hold
// the sums of the positions before and after the chunk boundary it crosses, so a query that covers it
// reads no run (a shorter run is one line, cheaper to compare than to sum). Measured on the 20 s bench's
// slowest 1 % of queries (a one-off build counting per query): hashes read from runs p50 347 → 69–93;
// with the readers' gates of actors/indexer, two pairs at 4 s: p99 8.8 / 10.0 → 8.4 / 9.3 µs, cold floor
// p99 8.9 / 9.4 → 8.8 / 9.1 µs and p999 12.6 / 13.0 → 11.8 / 11.8 µs; at 20 s the p99 moved within its
// noise (docs/benchmarks.md, "Short runs, gates, and huge pages decided by a probe").
package prefix

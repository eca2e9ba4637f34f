// Package load tracks the active sequences of one worker (worker, dp_rank): the load the cost function
// reads.
//
// # Overview
//
// A Tracker holds the requests routed to its worker and not yet freed. AddRequest (at routing time)
// adds the request's chain of block keys (each identifying its block and every block before it) to a
// compressed trie of the active chains (trie.go), so requests sharing a prefix count their common blocks
// once when KV reuse is assumed, and charges ISL − cached prefill tokens. MarkPrefillCompleted (first
// output token) drops the prefill charge and keeps the blocks; Free (end, error or cancel) drops
// both. Requests never freed expire after StaleExpiry (3600 s): the owner calls MaybeExpire (a sweep at
// most every CleanupInterval, 30 s; Dynamo sweeps lazily on add, scoring/sched on its tick) and learns
// the dropped ids; the clock is the time passed in. With TrackOutputBlocks each generated block adds a block
// unique to the request, weighted by remaining progress when the expected output length is known.
//
// Projection gives additional_active_blocks for a candidate request: its blocks not already active on
// the worker. Because every request adds its whole sequence-hash chain, the active part of any chain is
// a prefix of it, so Projection walks the trie (binary search inside an edge) instead of probing every
// block, and AddRequest and Free walk one root path: their cost grows with the branch points on the
// path, not with the prompt's blocks. Sharing walks the same way and also reports how many active
// requests hold the whole active prefix (the trie's count on the edge where the walk stops): the kvroute
// cost asks it of the worker holding a request's prefix, to tell a prefix in use there (a replica when
// copied) from one cached idle (a dead copy).
//
// # Concurrency model
//
// A Tracker is not safe for concurrent use. All writes (AddRequest, MarkPrefillCompleted, Free,
// RecordOutput, Expire, MaybeExpire) come from one goroutine. A Registry (registry.go) is the fleet-wide
// alternative for projections: one owner mirrors every tracker's AddRequest/Free into it, and one
// FindMatches answers additional blocks for all workers. Readers on the routing path either call Snapshot/
// Projection under a read lock the owner takes around writes (sync.RWMutex; writes are O(branch points)), or
// read a published Snapshot (atomic.Pointer) and accept a projection computed by the owner.
//
// # Ownership
//
// Each Tracker is owned by its worker's mirror actor (actors/worker). Request ids are the router's; a
// request lives in exactly one tracker, the worker it was routed to.
//
// # Data flow
//
//	router: scoring.Select → worker actor: AddRequest → Snapshot published → next Select reads it
//	stream: first token → MarkPrefillCompleted; end/error/cancel → Free
package load

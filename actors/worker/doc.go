// Package worker mirrors backend workers: one mirror actor per worker, under a fleet supervisor.
//
// # Overview
//
// A Fleet is the supervisor of the mirrors; Add and Remove are control-plane messages to it, and the set
// of mirrors is published as an immutable set (atomic.Pointer to an internal/cowmap.Map: a change
// copies one of its 64 parts) for lock-free reads. Each mirror owns one
// subscriber child per dp rank (kvevents.Subscriber on the worker's ZMQ endpoint, port offset by rank),
// the worker's counters, and forwards re-keyed batches to the indexer shard that owns the worker.
//
// Bind mode (Config.BindEndpoints): the fleet owns one kvevents.BindSubscriber per bound endpoint, the
// i-th receiving dp rank i, and attributes batches to workers by topic; a worker's topic is registered on
// every bind socket with its replay endpoint offset by that rank. A fleet with Config.BindShare binds
// nothing and uses the sockets of the fleet that owns them, which dispatches each topic to the fleet
// holding it (a process's cores, one socket per endpoint).
//
// audit.go makes problems visible: Audit (every second, or a quarter of Config.Grace) marks a worker
// degraded with the reason when its stream has shown one for longer than the grace period (no batch
// yet, every store rejected, ranks beyond dp_size) and logs it once; unregistered topics are remembered
// (the first 16) and logged once. metrics.go exports the counters at scrape time (Fleet.Collector).
//
// # Concurrency model
//
// Subscriber goroutines decode and re-key (router local hashes from token_ids, optional image-run
// normalization) and Send the result to their mirror; the mirror counts and forwards to the shard. A
// subscriber actor is supervised by its mirror with exponential backoff: when its goroutine fails, or a
// resync is asked for, it panics and is restarted, opening a fresh subscriber that replays the worker's
// buffered stream from sequence 0. A generation number per rank makes the mirror drop batches still in
// flight from a retired subscriber, so a resync never stores a block twice.
//
// An engine restart found on one dp rank (its stream reset) clears that rank's blocks only
// (indexer.ClearRank); AllBlocksCleared likewise clears the rank that sent it. Ops carry the event's
// storage tier (Op.Medium); the index takes device blocks only. A batch naming a dp rank the worker does
// not have (>= dp_size) is counted (out_of_range_rank_batches) and not indexed.
//
// # Ownership
//
// Bind subscribers' goroutines own their sockets and per-topic converters. The audit goroutine is the
// only writer of each mirror's audit reason; the unknown-topic list is guarded by its own mutex.
// Counters are written only by the mirror actor; the fleet map only by the fleet actor; ZMQ sockets only
// by the subscriber goroutine that opened them. Removing a worker stops its mirror (and subscribers)
// first, then removes the worker from the index, so no batch of a removed worker lands afterwards.
//
// # Data flow
//
// ZMQ PUB → kvevents.Subscriber (decode, sequence checks, replay) → converter (re-key) → mirror actor
// (counters) → indexer shard actor (apply).
package worker

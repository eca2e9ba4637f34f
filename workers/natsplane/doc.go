// Package natsplane scales kvroute out over NATS with JetStream (docs/scale-out.md):
// several frontends share one fleet of workers, each with a complete index of every worker's
// KV cache, and optionally each other's active load.
//
// # Overview
//
//   - embedded.go: StartServer, an in-process NATS server with JetStream (`--nats-embedded`), and
//     StartCluster, an in-process three-node cluster on 127.0.0.1 for tests (Kill / Restart a node).
//   - wire.go: subjects, headers and JetStream names shared by every component.
//   - relay.go: Relay (`kvroute relay`), next to a worker: one kvevents.Subscriber per dp rank (with
//     replay) republishing every batch on kv-events.<worker_id>.
//   - source.go: Source, in a frontend: subscribes to kv-events.* and delivers every batch through the
//     fleet's Injector (actors/worker/source.go), so the index is fed exactly as a ZMQ mirror feeds it.
//     The package sits below the actors (workers layer) and imports none of them: it declares what it
//     drives as small interfaces (EventSink, Index, RemoteLoad, WorkerSet) and cmd/kvroute wires the
//     router's fleet, index and scheduler into them.
//   - snapshot.go: durable mode only: the index dumped to the object store every
//     --router-snapshot-threshold stream messages, and restored by a frontend that starts later.
//   - replica.go: ReplicaSync (`--router-replica-sync`): AddRequest / MarkPrefillCompleted / Free
//     published on active_sequences_events with a router id and applied by the other routers.
//   - discovery.go: Register (workers, or relays on their behalf) and Watcher (frontends) over the
//     kvroute-workers key-value bucket with TTL heartbeats (`--discovery nats`). A record is outside
//     input: the watcher parses it as the admin API parses a registration (registry.ParseJSON, a
//     canonical decimal key, api_key_env under registry.RemoteKeyEnvPrefix); FuzzDiscoveryEntries.
//
// # Wire format of the event plane
//
// Subject kv-events.<worker_id>; headers Kv-Seq (the engine's batch sequence, per dp rank), Kv-Rank,
// Kv-Epoch (one per relay process) and Kv-Reset ("1" when the engine restarted, no payload). The payload
// is the batch re-encoded in the current vLLM layout (kvevents.AppendBatch, LayoutMap) with dp_rank
// filled in: the relay normalizes legacy layouts, frontends decode one shape with the same decoder the
// ZMQ path uses, and a capture of the subject replays through any vLLM-compatible tool. Re-keying
// (token ids → router hashes) stays in the frontends, which know their block size and image token.
//
// Sequence rules at a frontend, per (worker, rank): a batch at or below the last sequence is a duplicate
// and skipped (a relay that reconnected, a retried publish); a jump is counted as a gap (events lost
// upstream, core mode only); Kv-Reset clears the worker rank's blocks; a new epoch (a restarted relay,
// which replays the worker's ring from sequence 0) clears them too and starts over, as a restarted ZMQ
// subscriber does.
//
// Durable mode (--durable-kv-events) publishes into the JetStream stream KV_EVENTS (subjects
// kv-events.*, one hour MaxAge, R = --nats-replicas): each batch is acknowledged before the next one is
// sent, retried with backoff until it is, and carries a Nats-Msg-Id (worker.rank.epoch.resets.seq) so a
// retry is stored once. Frontends read it with an ordered consumer, which resumes after the last stream
// sequence it delivered when its server goes away. The source also watches its own position: once the
// stream has held a later message for SourceConfig.StallAfter (5 s) with the position unmoved and no
// message being applied (a snapshot runs inside the apply), it replaces the consumer with one that starts
// after the last applied sequence. In one CI run a consumer whose
// server shut down reported the shutdown once and then nothing more (not even a missed heartbeat) while
// it delivered nothing for the rest of the test: the client library's own recovery never began. In ten
// runs of TestDurableSurvivesNodeLoss with the watch, it restarted 6 of the 30 frontends (2 after a
// reported shutdown, 4 with no error reported), and every run converged.
//
// # Concurrency model
//
//   - Relay: one goroutine per dp rank (kvevents.Subscriber.Run); each publishes its own rank's batches
//     synchronously, so a rank's order on the subject is the engine's order.
//   - Source: the NATS subscription's (or the consumer's) delivery goroutine runs handle; Source.mu makes
//     the single writer explicit across the ordered consumer's internal resets. It owns the Injector, the
//     per-rank sequence state and the decode Batch. A snapshot runs inline on that goroutine: no batch
//     enters between Fleet.Sync (a barrier through every mirror and shard) and Indexer.Dump.
//   - Source's stall watch (durable): one goroutine reads the stream's last sequence every StallAfter/4
//     while the position does not move and, on a stall, swaps the consumer under ccMu; handle skips any message at or below the applied
//     stream position, so the old consumer's late deliveries and the new one's overlap are harmless.
//   - ReplicaSync: the request path only enqueues into the bounded queue "natsplane.replica"
//     (QueueSize, default 100,000; full → the newest event is dropped and counted); one publisher
//     goroutine drains it; the subscription's goroutine applies remote events (Router.ApplyRemote).
//     Every ListInterval (10 s) a ticker goroutine takes each core's active list (its workers and own
//     requests) in parts of 256 workers, each under that core's lock, and enqueues each in the same
//     queue, so a part follows every event reported before it; a replica frees what it charges for that
//     router on those workers and the list lacks (Router.ReconcileRemote, which holds the core's lock only
//     to collect and to free, a part at a time): a lost Free costs ten seconds of phantom load, not the
//     hour of stale-request expiry. A router's first list goes out at its start; a router silent for
//     three of its intervals (the one its lists announce, or, heard only through its events so far, this
//     router's own, each event counting as a list) is gone and what it was charged is freed.
//   - Watcher: Run owns the known-worker map; one goroutine. Ready is closed once the registrations present
//     at start are added: a frontend starts its Source after it, so no event of a known worker is
//     dropped as unknown.
//   - Counters are atomics, readable from anywhere.
//
// # Ownership
//
//   - The index and the mirrors belong to actors/router and actors/worker; this package only delivers
//     batches into them (EventSink) and reads them for snapshots (Fleet.Barrier, Index.Dump / Restore).
//   - Remote load lives in the router's trackers under namespaced ids ("\x00replica/<router>\x00<id>"; a
//     router id holding a NUL is refused), so active lists, stale-request expiry and worker removal clean
//     up remote requests whose Free was lost.
//
// # Data flow
//
//  1. vLLM (or the simulator) publishes a batch on its ZMQ PUB socket.
//  2. The relay's subscriber decodes it (replaying gaps from the worker's ring), re-encodes it in the
//     current layout and publishes it on kv-events.<id> (core) or into KV_EVENTS (durable).
//  3. Every frontend's Source receives it, checks the sequence, decodes it and hands it to the
//     worker's mirror (Injector.Deliver), which re-keys and applies it to the worker's index shard.
//  4. Durable: every --router-snapshot-threshold messages the frontend dumps its index and sequence state
//     to the object store radix-bucket/radix-state; a frontend started later loads it and consumes the
//     stream from the next sequence.
package natsplane

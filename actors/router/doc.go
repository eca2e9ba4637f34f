// Package router is the routing core that `kvroute router` and the frontend share: the sharded index
// (actors/indexer), the fleet of worker mirrors that feeds it (actors/worker), and the scheduler machine
// (scoring/sched) behind the request path.
//
// # Overview
//
// A Router is built once per process from an actor system and a Config. Control-plane calls (AddWorker,
// RemoveWorker, SetHealthy) go to the fleet supervisor and the machine; data-plane calls (Route,
// PrefillDone, Free) run on the caller's goroutine. Route reads as its stages, each timed into the
// dynamo_router_overhead_* histograms:
//
//	hash (PromptHashes: local hashes + prefix chain) → match (index FindMatches)      [no lock]
//	→ machine step: candidates → queue? → select → commit (AddRequest, side indexes) [scheduler mutex]
//	→ if queued: wait on the request's channel until a later step releases it (or ctx ends)
//
// # Concurrency model
//
// Every method is safe for concurrent use. Hashing and the overlap query run in parallel on request
// goroutines (index shards serve reads beside their writer). The machine is not safe for concurrent use:
// schedule.go serializes its steps under one mutex, held for the selection and the charge only (~2 µs at
// 256 workers, BenchmarkRouteDecision's decide stage). A lock beats a message here: a decision must see the
// charge of the one before it (or a burst of identical prompts herds onto one worker), and a mailbox
// round trip would cost more than the step. Released requests are handed their decision on a buffered
// channel while the mutex is held, so a release never blocks.
//
// Lock order: ctlMu (control plane) → the scheduler mutex → index shard locks (see actors/doc.go).
//
// # Ownership
//
// cmd/ creates the Router and stops it; the HTTP edge (frontend/) calls it. The Router owns the machine
// (load trackers, queue, side indexes, session bindings), the index and the fleet; the fleet's mirrors own
// their event streams. Stop answers waiting requests with ErrShuttingDown before stopping the actors.
//
// # Data flow
//
// Events: worker ZMQ PUB → kvevents.Subscriber (re-key on its goroutine) → mirror actor (counters) →
// shard pending list → shard actor (apply under the writer's lock).
// Requests: tokens → hash → FindMatches → machine.Route → RouteResult → (frontend dispatch) →
// PrefillDone at the first token → Free at the end; each of those steps may release waiting requests.
// Replica sync: the machine's observer reports local load changes (Config.OnLoad); ApplyRemote charges
// other routers' requests.
package router

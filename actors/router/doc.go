// Package router is the routing core that `kvroute router` and the frontend share: the sharded index
// (actors/indexer), the fleet of worker mirrors that feeds it (actors/worker), and request-side hashing.
//
// # Overview
//
// A Router is built once per process from an actor system and a Config. Control-plane calls (AddWorker,
// RemoveWorker) are messages to the fleet supervisor; data-plane calls (HashTokens, Overlap) are direct
// calls that read the index shards under their read locks and never wait on a mailbox.
//
// # Concurrency model
//
// Every method is safe for concurrent use. State is owned by actors (shards, mirrors, the fleet); the
// Router only holds their handles.
//
// # Ownership
//
// cmd/ creates the Router and stops it; the HTTP edge (frontend/) calls it.
//
// # Data flow
//
// worker ZMQ PUB → kvevents.Subscriber (re-key on its goroutine) → mirror actor (counters) → shard actor
// (apply under write lock). Request tokens → HashTokens → Overlap (read every shard) → scores.
package router

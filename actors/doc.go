// Package actors wires kvroute's stateful parts onto protoactor-go: the indexer root and its shard actors
// (actors/indexer), one mirror actor per backend worker under a fleet supervisor (actors/worker), and the
// routing core that holds them with the scheduler machine (actors/router).
//
// # Overview
//
// This package holds what every actor package shares: NewSystem, which builds the one actor system of a
// process (or of a test) with protoactor's own logger silenced, and the pinned dispatcher
// (dispatcher.go). Supervision is declared where each actor is spawned: shard actors restart on a panic
// (one-for-one, 10 in 10 s; their state lives outside the actor), the fleet supervisor restarts a failed
// mirror (one-for-one, 10 in a minute), each mirror's subscription restarts with exponential backoff
// (k × InitialBackoff for the k-th failure within BackoffWindow), and the frontend's request actor
// recovers a panic in a stage itself and answers that request with a 500 (a restart would lose the
// waiting handler's reply). The request actor lives in frontend/request.go, its messages in
// frontend/messages.go: it prepares one OpenAI request, its concurrent stages reporting back as messages.
//
// # Concurrency model
//
// Each actor processes one message at a time; state an actor owns is written only from its Receive.
// Readers on the request path never wait for a mailbox: index shards serve reads beside their writer
// (actors/indexer/doc.go), and the scheduler is not an actor but a state machine behind one mutex
// (actors/router), because a decision must see the charge of the decision before it.
//
// Lock order (a goroutine holding one may take those after it, never before): router control mutex
// (AddWorker/RemoveWorker/SetHealthy) → scheduler mutex → an index shard's locks. The scheduler mutex is
// never held while waiting on a mailbox or the network: the machine's index writes (approximate mode)
// are message sends, and the fleet is read before the mutex is taken.
//
// # What the actors cost, and where that is measured
//
// Every figure is from docs/benchmarks.md, which gives the command:
//
//   - Index reads stand beside the shard actor, not behind its mailbox: a 512-block overlap query over 4
//     shards answered through reply channels in the messages took 10.6–13.2 µs p50 and 851 µs p99 with 36
//     allocations; reading each shard's published view takes 0.5–0.9 µs with none ("Overlap query through
//     the sharded indexer", BenchmarkFindMatches path=chan against path=direct). A bare mailbox round trip
//     to an actor that does no work costs 3.9–6.9 µs through a reply channel and 7.9–8.1 µs with 10
//     allocations (727 B) through protoactor's RequestFuture ("Reply paths", BenchmarkReplyPath), so no
//     request-path read pays a future.
//   - The scheduler is a mutex, not an actor: one machine step (select and charge) takes 2.1–3.9 µs at
//     256 workers under it, and a decision must see the charge of the one before it ("Whole routing
//     decision", BenchmarkRouteDecision's select-us). A mailbox round trip (3.9–8.1 µs, "Reply paths")
//     would cost more than the step.
//   - The request actor costs two allocations (48 B) per request against the same stages run inline with a
//     recover; its time cannot be told apart from inline work on the shared 2-core machine (7–15 µs against
//     13–32 µs per op at load average 20), and the frontend's throughput and added latency did not move
//     ("Request actor", BenchmarkRequestActor, BenchmarkRoutedThroughput, BenchmarkFrontendOverhead).
//   - Request actors are reused from an idle list and run on a ReuseDispatcher: spawning and stopping one
//     per request cost ~19 allocations and a second dispatcher run ("Frontend", the request-path work).
//
// # Ownership
//
// The actor system is created by cmd/ (or a test) and passed down; there is no package-level system.
package actors

import (
	"io"
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"
)

// NewSystem returns an actor system whose internal logging goes to logger (nil discards it). protoactor's
// default logger writes coloured lines to stdout for every lifecycle event, which a router cannot afford.
func NewSystem(logger *slog.Logger) *actor.ActorSystem {
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return logger }),
		actor.WithDeadLetterThrottleCount(0),
	)
}

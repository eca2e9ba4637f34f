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
// mirror (one-for-one), and each mirror's subscription restarts with exponential backoff.
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

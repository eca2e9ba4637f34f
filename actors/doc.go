// Package actors wires kvroute's stateful parts onto protoactor-go: the indexer root and its shard actors
// (actors/indexer), one mirror actor per backend worker under a fleet supervisor (actors/worker).
//
// # Overview
//
// This package holds what every actor package shares: NewSystem, which builds the one actor system of a
// process (or of a test) with protoactor's own logger silenced, and the supervision deciders.
//
// # Concurrency model
//
// Each actor processes one message at a time; state an actor owns is written only from its Receive.
// Readers on the request path never wait for a mailbox: owners publish snapshots (atomic.Pointer) or
// guard read paths with a documented read lock.
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

package worker

import (
	"github.com/kvroute/kvroute/actors/indexer"
	"github.com/kvroute/kvroute/workers/registry"
)

// mirrorMessage seals the messages of a mirror actor.
type mirrorMessage interface{ mirrorMessage() }

// fleetMessage seals the messages of the fleet supervisor.
type fleetMessage interface{ fleetMessage() }

// eventsArrived carries one re-keyed batch from a subscriber goroutine to its mirror.
type eventsArrived struct {
	Rank    int
	Gen     uint64
	Bound   bool
	Seq     uint64
	Events  int
	Partial int
	// BadRank is the dp rank the batch named when the worker has no such rank (the batch is not
	// indexed), else -1.
	BadRank int64
	Apply   *indexer.Apply
}

// engineReset reports that a rank's engine restarted (its sequence went backwards, or its publisher no
// longer holds our last batch): that rank's cache is gone, the other ranks keep theirs.
type engineReset struct{ Rank int }

// subscriberExited reports that a subscriber's Run returned with an error; the subscriber actor panics on
// it so its supervisor restarts it with backoff.
type subscriberExited struct{ Err error }

// resync asks a mirror to drop the worker's blocks and re-read its stream (a returning worker).
type resync struct{ Done chan struct{} }

// AddWorker asks the fleet to start mirroring a worker. Reply receives nil or the reason it was refused.
type AddWorker struct {
	Spec  registry.Spec
	Reply chan error
}

// RemoveWorker asks the fleet to stop mirroring a worker and drop its blocks from the index.
type RemoveWorker struct {
	ID    uint64
	Reply chan error
}

// syncMirror is a barrier through a mirror's mailbox: Done is closed once every batch the mirror received
// before it has been handed to the index.
type syncMirror struct{ Done chan struct{} }

func (*syncMirror) mirrorMessage()       {}
func (*eventsArrived) mirrorMessage()    {}
func (*engineReset) mirrorMessage()      {}
func (*subscriberExited) mirrorMessage() {}
func (*resync) mirrorMessage()           {}
func (*AddWorker) fleetMessage()         {}
func (*RemoveWorker) fleetMessage()      {}

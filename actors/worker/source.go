package worker

import (
	"fmt"

	"github.com/kvroute/kvroute/scoring/prefix"
	"github.com/kvroute/kvroute/workers/kvevents"
)

// This file is the hook of external event sources (the NATS event plane, workers/natsplane): batches that
// were decoded outside the fleet enter the same mirror path as a ZMQ subscriber's, so counters, re-keying
// and the single-writer order per worker are unchanged.

// Injector delivers decoded batches of any worker to that worker's mirror. It keeps one converter (with
// its re-keying scratch) per (worker, dp rank) and is owned by one goroutine: the event source's
// delivery goroutine. The worker must have been added to the fleet (usually without ZMQ endpoints).
type Injector struct {
	f     *Fleet
	convs map[prefix.WorkerKey]*converter
}

// NewInjector returns an injector for this fleet.
func (f *Fleet) NewInjector() *Injector {
	return &Injector{f: f, convs: map[prefix.WorkerKey]*converter{}}
}

// Deliver converts one batch of a worker's dp rank and sends it to the worker's mirror, exactly as that
// worker's ZMQ subscriber would. b may be reused once Deliver returns. It fails with ErrUnknown when the
// worker is not in the fleet (the batch is dropped).
func (in *Injector) Deliver(workerID uint64, rank int, seq uint64, b *kvevents.Batch) error {
	m, ok := in.f.Get(workerID)
	if !ok {
		return fmt.Errorf("%w: %d", ErrUnknown, workerID)
	}
	k := rankKey(workerID, rank)
	c := in.convs[k]
	if c == nil {
		imageTok, imageEnd := in.f.deps.cfg.imageTokensFor(&m.Spec)
		c = &converter{workerID: workerID, rank: rank, dpSize: m.Spec.DPRanks(), blockSize: in.f.deps.cfg.BlockSize, imageTok: imageTok, imageEnd: imageEnd}
		in.convs[k] = c
	}
	msg := c.convert(seq, b)
	msg.Bound = true // no fleet-owned subscriber, so no generation to check
	in.f.system.Root.Send(m.pid, msg)
	return nil
}

// Reset reports that a worker's engine restarted (its sequence went backwards): the mirror drops the
// worker's blocks before the batches that follow.
func (in *Injector) Reset(workerID uint64, rank int) error {
	m, ok := in.f.Get(workerID)
	if !ok {
		return fmt.Errorf("%w: %d", ErrUnknown, workerID)
	}
	in.f.system.Root.Send(m.pid, &engineReset{Rank: rank})
	return nil
}

// Forget drops the converters of a removed worker.
func (in *Injector) Forget(workerID uint64) {
	for k := range in.convs {
		if k.WorkerID == workerID {
			delete(in.convs, k)
		}
	}
}

// Sync returns once every batch delivered to any mirror before the call is applied to the index (a
// barrier through every mirror, then through every index shard). Snapshots use it to dump an index that
// corresponds exactly to a stream position.
func (f *Fleet) Sync() {
	ms := f.Mirrors()
	dones := make([]chan struct{}, len(ms))
	for i, m := range ms {
		dones[i] = make(chan struct{})
		f.system.Root.Send(m.pid, &syncMirror{Done: dones[i]})
	}
	for _, d := range dones {
		<-d
	}
	f.deps.index.Flush()
}

package natsplane

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvroute/kvroute/internal/routine"
	"github.com/kvroute/kvroute/scoring/prefix"
	"github.com/kvroute/kvroute/workers/kvevents"
	"github.com/kvroute/kvroute/workers/registry"
)

// SourceConfig configures a frontend's NATS event source.
type SourceConfig struct {
	// Durable reads the JetStream stream (--durable-kv-events) through an ordered consumer, which resumes
	// after the last delivered stream sequence when the client reconnects to another node. Default false
	// (core NATS subscription: events published while a frontend is disconnected are lost).
	Durable bool
	// Replicas is the event stream's replica count. Default 1.
	Replicas int
	// SnapshotThreshold (--router-snapshot-threshold) is the number of stream messages after which this
	// frontend dumps its index to the object store; 0 disables snapshots. Dynamo's default is 1,000,000.
	// Durable only. Frontends reading one stream share the snapshot: a frontend skips its dump when the
	// store already holds one within half a threshold of its position (another frontend wrote it).
	SnapshotThreshold int
	// Restore starts from the latest snapshot plus the stream tail instead of the whole stream. Durable
	// only. Default true in DefaultSourceConfig.
	Restore bool
	// PendingMsgs bounds the core subscription's client-side queue ("natsplane.events"); messages beyond
	// it are dropped by the client and counted in SourceStats.Dropped. Default 1,000,000.
	PendingMsgs int
	// StallAfter (durable) is how long the ordered consumer may deliver nothing while the stream holds
	// messages past this frontend's position before the source replaces it with a new one that starts
	// after the last applied stream sequence (SourceStats.Restarts). The client library recovers from
	// most failures itself; this is the backstop for one it does not (a consumer left silent after its
	// server shut down), which would otherwise leave the index stale for good. Default 5 s; negative
	// disables.
	StallAfter time.Duration
}

// DefaultSourceConfig is core NATS, restore on, snapshots off.
func DefaultSourceConfig() SourceConfig {
	return SourceConfig{Replicas: 1, Restore: true, PendingMsgs: 1_000_000, StallAfter: 5 * time.Second}
}

// SourceStats are an event source's counters.
type SourceStats struct {
	Messages      uint64 // event messages received
	Batches       uint64 // batches delivered to mirrors
	Duplicates    uint64 // batches at or below the last sequence of their (worker, rank) or the stream position, skipped
	Gaps          uint64 // sequence jumps (events lost upstream of the source)
	Resets        uint64 // engine restarts and relay epochs that cleared a (worker, rank)
	BadMessages   uint64 // undecodable messages
	UnknownWorker uint64 // batches of workers not in the fleet, dropped
	Dropped       uint64 // messages the NATS client dropped (slow consumer, core mode)
	Snapshots     uint64 // snapshots written
	// SnapshotsSkipped counts dumps skipped because the store held a snapshot within half a threshold of
	// this frontend's stream position (written by another frontend).
	SnapshotsSkipped uint64
	Restored         uint64 // index entries restored from a snapshot
	StreamSeq        uint64 // last stream sequence applied (durable)
	ConsumeErrors    uint64 // consumer errors (missed heartbeats, node loss); the ordered consumer recovers
	// Restarts counts ordered consumers replaced after a stall (SourceConfig.StallAfter).
	Restarts  uint64
	LastError string // the latest consumer error
}

// rankState is the sequence state of one (worker, dp rank) on the plane.
type rankState struct {
	Epoch string
	Last  uint64
	Has   bool
}

// Source feeds a router's index from the event plane: it decodes every worker's batches and delivers
// them through the fleet's injector, so each mirror sees what its ZMQ subscriber would have delivered.
//
// One goroutine at a time runs handle (the NATS subscription's or the consumer's delivery goroutine);
// mu makes that explicit across an ordered consumer's internal resets. Stats are atomics.
type Source struct {
	cfg   SourceConfig
	nc    *nats.Conn
	fleet Fleet

	mu     sync.Mutex // held by handle: inj, states, batch, sinceSnap
	inj    EventSink
	states map[prefix.WorkerKey]*rankState
	batch  kvevents.Batch
	since  int

	sub  *nats.Subscription
	js   jetstream.JetStream
	objs jetstream.ObjectStore

	ccMu     sync.Mutex // the current ordered consumer: Start, the stall watch and Stop replace or stop it
	cc       jetstream.ConsumeContext
	occ      jetstream.OrderedConsumerConfig // the first consumer's configuration; a restart starts after streamSeq
	stop     chan struct{}                   // closed by Stop: ends the stall watch
	stopOnce sync.Once
	watch    routine.Group

	messages, batches, dups, gaps, resets, bad, unknown, snapshots, snapSkipped, restored, streamSeq, consumeErrs, restarts atomic.Uint64
	lastErr                                                                                                                 atomic.Pointer[string]
	handling                                                                                                                atomic.Int32 // handle calls in progress
}

// EventSink takes decoded batches into the fleet's mirrors, as a worker's own ZMQ subscriber would hand
// them: *worker.Injector (Fleet.NewInjector) satisfies it. Deliver and Reset fail with an error wrapping
// registry.ErrUnknownWorker when the worker is not in the fleet. One goroutine owns a sink.
type EventSink interface {
	Deliver(workerID uint64, rank int, seq uint64, b *kvevents.Batch) error
	Reset(workerID uint64, rank int) error
	Forget(workerID uint64)
}

// Index is the router's index as snapshots see it: *indexer.Indexer satisfies it.
type Index interface {
	// Dump emits every stored block as a single-block store, parents before children; it returns the
	// blocks it could not express.
	Dump(fn func(prefix.DumpEntry)) (skipped int)
	// Restore replays Dump's entries; Flush is its barrier.
	Restore(entries []prefix.DumpEntry)
	Flush()
}

// Fleet is what a Source feeds and snapshots. The package sits below the actors, so cmd wires it from the
// router: Fleet{Sink: r.Fleet.NewInjector(), Barrier: r.Fleet.Sync, Index: r.Index}.
type Fleet struct {
	Sink  EventSink
	Index Index
	// Barrier returns once every batch handed to Sink before the call is applied to Index.
	Barrier func()
}

// NewSource prepares an event source for a router's fleet. Start subscribes.
func NewSource(nc *nats.Conn, fl Fleet, cfg SourceConfig) (*Source, error) {
	if fl.Sink == nil || fl.Index == nil || fl.Barrier == nil {
		return nil, fmt.Errorf("%w: source needs a sink, an index and a barrier", ErrBadConfig)
	}
	if cfg.PendingMsgs <= 0 {
		cfg.PendingMsgs = 1_000_000
	}
	if !cfg.Durable && cfg.SnapshotThreshold > 0 {
		return nil, fmt.Errorf("%w: snapshots need --durable-kv-events", ErrBadConfig)
	}
	s := &Source{cfg: cfg, nc: nc, fleet: fl, inj: fl.Sink, states: map[prefix.WorkerKey]*rankState{}, stop: make(chan struct{})}
	if cfg.Durable {
		js, err := jetstream.New(nc)
		if err != nil {
			return nil, err
		}
		s.js = js
	}
	return s, nil
}

// Start restores the latest snapshot (durable, Restore) and subscribes to every worker's subject.
func (s *Source) Start(ctx context.Context) error {
	if !s.cfg.Durable {
		sub, err := s.nc.Subscribe(EventSubjectPrefix+"*", func(m *nats.Msg) {
			s.handle(m.Subject, m.Header, m.Data, 0)
		})
		if err != nil {
			return fmt.Errorf("natsplane: subscribe: %w", err)
		}
		_ = sub.SetPendingLimits(s.cfg.PendingMsgs, -1)
		s.sub = sub
		return s.nc.FlushWithContext(ctx)
	}
	if _, err := EnsureEventStream(ctx, s.js, s.cfg.Replicas); err != nil {
		return err
	}
	objs, err := s.js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: SnapshotBucket, Replicas: max(1, s.cfg.Replicas)})
	if err != nil {
		return fmt.Errorf("natsplane: object store %s: %w", SnapshotBucket, err)
	}
	s.objs = objs
	occ := jetstream.OrderedConsumerConfig{FilterSubjects: []string{EventSubjectPrefix + "*"}}
	if s.cfg.Restore {
		seq, err := s.restore(ctx)
		if err != nil {
			return err
		}
		if seq > 0 {
			occ.DeliverPolicy, occ.OptStartSeq = jetstream.DeliverByStartSequencePolicy, seq+1
		}
	}
	s.occ = occ
	s.ccMu.Lock()
	err = s.consume(ctx, occ)
	s.ccMu.Unlock()
	if err != nil {
		return err
	}
	if s.cfg.StallAfter > 0 {
		s.watch.Go(sourceStallWatch, s.watchStalls)
	}
	return nil
}

// consume starts an ordered consumer with occ and makes it the current one. ccMu is held.
func (s *Source) consume(ctx context.Context, occ jetstream.OrderedConsumerConfig) error {
	cons, err := s.js.OrderedConsumer(ctx, EventStream, occ)
	if err != nil {
		return fmt.Errorf("natsplane: ordered consumer: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var seq uint64
		if md, err := m.Metadata(); err == nil {
			seq = md.Sequence.Stream
		}
		s.handle(m.Subject(), m.Headers(), m.Data(), seq)
	}, jetstream.PullExpiry(2*time.Second), jetstream.PullHeartbeat(500*time.Millisecond),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			s.consumeErrs.Add(1)
			msg := err.Error()
			s.lastErr.Store(&msg)
		}))
	if err != nil {
		return fmt.Errorf("natsplane: consume: %w", err)
	}
	s.cc = cc
	return nil
}

// sourceStallWatch is the durable source's stall watch; Stop joins it.
var sourceStallWatch = routine.Named("natsplane.source-stall-watch")

// watchStalls checks the stream's last sequence every StallAfter/4 (while the position is not moving)
// and replaces the ordered consumer once the stream has held messages past this frontend's position for
// StallAfter with the position unmoved and no message being applied (a snapshot, which runs inside
// handle, is not a stall). The replacement starts after the last applied sequence; a message the old
// consumer still delivers is skipped by handle (at or below the position). A stream whose information
// cannot be read counts as caught up: a new consumer could not be made either.
func (s *Source) watchStalls() {
	tick := time.NewTicker(max(s.cfg.StallAfter/4, time.Millisecond))
	defer tick.Stop()
	// since is when the position was last seen moving, in hand, or caught up with the stream: a stall is
	// the stream held ahead of an unmoving position for StallAfter, not an idle stretch before a message.
	pos, since := s.streamSeq.Load(), time.Now()
	for {
		select {
		case <-s.stop:
			return
		case now := <-tick.C:
			if p := s.streamSeq.Load(); p != pos || s.handling.Load() != 0 || !s.streamAhead(p) {
				pos, since = p, now
				continue
			}
			if now.Sub(since) >= s.cfg.StallAfter && s.restart(pos) {
				since = time.Now()
			}
		}
	}
}

// streamAhead reports whether the event stream holds a message past stream sequence pos.
func (s *Source) streamAhead(pos uint64) bool {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.StallAfter)
	defer cancel()
	st, err := s.js.Stream(ctx, EventStream) // one stream-info request; CachedInfo holds its answer
	return err == nil && st.CachedInfo().State.LastSeq > pos
}

// restart stops the current ordered consumer and starts a new one after stream sequence pos.
func (s *Source) restart(pos uint64) bool {
	s.ccMu.Lock()
	defer s.ccMu.Unlock()
	select {
	case <-s.stop:
		return false
	default:
	}
	if s.cc != nil {
		s.cc.Stop()
	}
	occ := s.occ
	occ.DeliverPolicy, occ.OptStartSeq = jetstream.DeliverByStartSequencePolicy, pos+1
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.StallAfter)
	defer cancel()
	if err := s.consume(ctx, occ); err != nil {
		msg := err.Error()
		s.lastErr.Store(&msg)
		s.cc = nil
		return false
	}
	s.restarts.Add(1)
	return true
}

// Stop unsubscribes. Batches already delivered still reach the index.
func (s *Source) Stop() {
	if s.sub != nil {
		_ = s.sub.Unsubscribe()
	}
	s.ccMu.Lock()
	s.stopOnce.Do(func() { close(s.stop) })
	if s.cc != nil {
		s.cc.Stop()
	}
	s.ccMu.Unlock()
	s.watch.Stop()
	s.watch.Wait()
	s.mu.Lock() // wait for a handle in progress
	s.mu.Unlock()
}

// Stats returns the counters.
func (s *Source) Stats() SourceStats {
	st := SourceStats{Messages: s.messages.Load(), Batches: s.batches.Load(), Duplicates: s.dups.Load(), Gaps: s.gaps.Load(),
		Resets: s.resets.Load(), BadMessages: s.bad.Load(), UnknownWorker: s.unknown.Load(), Snapshots: s.snapshots.Load(),
		SnapshotsSkipped: s.snapSkipped.Load(),
		Restored:         s.restored.Load(), StreamSeq: s.streamSeq.Load(), ConsumeErrors: s.consumeErrs.Load(),
		Restarts: s.restarts.Load()}
	if e := s.lastErr.Load(); e != nil {
		st.LastError = *e
	}
	if s.sub != nil {
		if d, err := s.sub.Dropped(); err == nil {
			st.Dropped = uint64(d)
		}
	}
	return st
}

// Forget drops a removed worker's sequence state and converters (discovery calls it).
func (s *Source) Forget(workerID uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.states {
		if k.WorkerID == workerID {
			delete(s.states, k)
		}
	}
	s.inj.Forget(workerID)
}

// handle applies one event message; streamSeq is its JetStream stream sequence (0 in core mode).
func (s *Source) handle(subject string, h nats.Header, data []byte, streamSeq uint64) {
	s.handling.Add(1) // a message in hand is progress to the stall watch (a snapshot can take seconds)
	defer s.handling.Add(-1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if streamSeq != 0 && streamSeq <= s.streamSeq.Load() {
		// At or below the position: a consumer replaced after a stall may still deliver, and its
		// replacement starts right after the position.
		s.dups.Add(1)
		return
	}
	s.messages.Add(1)
	if err := s.apply(subject, h, data); err != nil {
		switch {
		case errors.Is(err, registry.ErrUnknownWorker):
			s.unknown.Add(1)
		default:
			s.bad.Add(1)
		}
	}
	if streamSeq == 0 {
		return
	}
	s.streamSeq.Store(streamSeq)
	s.since++
	if s.cfg.SnapshotThreshold > 0 && s.since >= s.cfg.SnapshotThreshold {
		s.since = 0
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if s.snapshotFresh(ctx, streamSeq) {
			s.snapSkipped.Add(1)
		} else if err := s.snapshot(ctx, streamSeq); err == nil {
			s.snapshots.Add(1)
		}
		cancel()
	}
}

func (s *Source) apply(subject string, h nats.Header, data []byte) error {
	id, err := workerOf(subject)
	if err != nil {
		return err
	}
	rank, err := strconv.Atoi(h.Get(HeaderRank))
	if err != nil || rank < 0 {
		return fmt.Errorf("%w: rank %q", ErrBadMessage, h.Get(HeaderRank))
	}
	key := prefix.WorkerKey{WorkerID: id, DPRank: uint32(rank)}
	st := s.states[key]
	if st == nil {
		st = &rankState{}
		s.states[key] = st
	}
	epoch := h.Get(HeaderEpoch)
	if h.Get(HeaderReset) == "1" {
		s.resets.Add(1)
		st.Epoch, st.Has = epoch, false
		return s.inj.Reset(id, rank)
	}
	seq, err := strconv.ParseUint(h.Get(HeaderSeq), 10, 64)
	if err != nil {
		return fmt.Errorf("%w: seq %q", ErrBadMessage, h.Get(HeaderSeq))
	}
	if st.Has && epoch != st.Epoch {
		// A new relay replays the worker's ring from sequence 0, as a restarted ZMQ subscriber does: start
		// the (worker, rank) over.
		s.resets.Add(1)
		st.Has = false
		if err := s.inj.Reset(id, rank); err != nil {
			return err
		}
	}
	st.Epoch = epoch
	if st.Has {
		if seq <= st.Last {
			s.dups.Add(1)
			return nil
		}
		if seq > st.Last+1 {
			s.gaps.Add(1)
		}
	}
	if err := kvevents.Decode(data, &s.batch); err != nil {
		return err
	}
	st.Last, st.Has = seq, true
	if err := s.inj.Deliver(id, rank, seq, &s.batch); err != nil {
		return err
	}
	s.batches.Add(1)
	return nil
}

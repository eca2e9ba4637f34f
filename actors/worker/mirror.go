package worker

import (
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvroute/kvroute/actors/indexer"
	"github.com/kvroute/kvroute/workers/kvevents"
	"github.com/kvroute/kvroute/workers/registry"
)

// Mirror states, as /v1/workers shows them.
const (
	StateNoEvents   = "no-events"  // the worker publishes no KV events (approximate routing only)
	StateConnecting = "connecting" // subscribed, no batch seen yet
	StateReady      = "ready"      // batches are flowing
	StateRemoved    = "removed"
)

// counters are a mirror's counters: written only by the mirror actor and its subscribers' callbacks
// through that actor, read by anyone.
type counters struct {
	batches       atomic.Uint64
	events        atomic.Uint64
	partialBlocks atomic.Uint64
	resets        atomic.Uint64
	restarts      atomic.Uint64
	badRanks      atomic.Uint64 // batches naming a dp rank >= the worker's dp_size, not indexed
	lastSeq       atomic.Int64  // -1 before the first batch
	lastBatch     atomic.Int64  // unix nanoseconds of the last batch, 0 before the first
	state         atomic.Pointer[string]
}

// Mirror is the handle of one backend worker's mirror actor: its spec, PID and live counters.
type Mirror struct {
	Spec registry.Spec
	pid  *actor.PID
	c    *counters
	subs []*subscription
	// bound is true for a worker whose batches arrive on the fleet's bind sockets, attributed by topic;
	// topicStats then sums its topic's stream counters over the bind sockets.
	bound      bool
	topicStats func() kvevents.Stats
	// health is "" when healthy, else why the worker is out of routing; degraded is why its KV
	// predictions cannot be trusted ("" when they can).
	health     atomic.Pointer[string]
	degraded   atomic.Pointer[string]
	prediction atomic.Pointer[string]
	// audit is why the worker's event stream is unusable, from Fleet.Audit ("" or nil when it is fine);
	// added is when the worker was added (Audit's grace period starts there).
	audit atomic.Pointer[string]
	added time.Time
}

// Prediction modes of a worker's cached blocks, as /v1/workers shows them.
const (
	PredictionEvents = "events"      // from the worker's KV events
	PredictionApprox = "approximate" // from routing history: its events stopped (per-worker degradation)
)

// Status is a point-in-time view of a mirror for /v1/workers.
type Status struct {
	ID             uint64 `json:"worker_id"`
	URL            string `json:"url,omitempty"`
	Events         string `json:"events,omitempty"`
	Topic          string `json:"topic,omitempty"`
	State          string `json:"state"`
	IndexedBlocks  int    `json:"indexed_blocks"`
	EventsApplied  uint64 `json:"events_applied"`
	Batches        uint64 `json:"batches"`
	LastSequence   int64  `json:"last_sequence"`
	Gaps           uint64 `json:"gaps"`
	Replays        uint64 `json:"replays"`
	ReplayTimeouts uint64 `json:"replay_timeouts"`
	// StaleBatches are live batches a replay proved to be an earlier engine's; DiscardedBatches were
	// queued when the engine's restart was confirmed (the new engine's among them come back by replay).
	StaleBatches     uint64 `json:"stale_batches"`
	DiscardedBatches uint64 `json:"discarded_batches"`
	Resets           uint64 `json:"resets"`
	// DuplicateBatches were dropped because they had been delivered already (by replay); LostBatches are
	// sequence numbers never delivered (no replay, or the publisher's buffer had moved on).
	DuplicateBatches uint64 `json:"duplicate_batches"`
	LostBatches      uint64 `json:"lost_batches"`
	// OutOfRangeRanks counts batches that named a dp rank >= dp_size: not indexed, since they could
	// never be routed to.
	OutOfRangeRanks uint64 `json:"out_of_range_rank_batches"`
	RejectedStores  uint64 `json:"rejected_stores"`
	// OtherTierEvents are stores and removals of blocks outside the device (medium "CPU", disk...): not
	// credited as device cache.
	OtherTierEvents uint64 `json:"other_tier_events"`
	MissingRemoves  uint64 `json:"missing_removes"`
	PartialBlocks   uint64 `json:"partial_blocks"`
	DecodeErrors    uint64 `json:"decode_errors"`
	Restarts        uint64 `json:"subscriber_restarts"`
	DPSize          int    `json:"dp_size"`
	BlockSize       int    `json:"block_size,omitempty"`
	TotalKVBlocks   int    `json:"total_kv_blocks,omitempty"`
	Device          string `json:"device,omitempty"`
	// Role is the worker's role: both (aggregated), prefill or decode.
	Role string `json:"role"`
	// Healthy is false while health checks fail; Unhealthy says why.
	Healthy   bool   `json:"healthy"`
	Unhealthy string `json:"unhealthy_reason,omitempty"`
	// Degraded says why the worker's KV events cannot be trusted (compatibility self-test).
	Degraded string `json:"degraded,omitempty"`
	// Prediction is "events" or "approximate" (events stopped; routing history until they resume).
	Prediction string `json:"prediction"`
}

// status builds the mirror's Status, reading the index for block counts.
func (m *Mirror) status(ix *indexer.Indexer) Status {
	st := Status{
		ID:            m.Spec.ID,
		URL:           m.Spec.URL,
		Events:        m.Spec.Events,
		Topic:         m.Spec.Topic,
		State:         *m.c.state.Load(),
		EventsApplied: m.c.events.Load(),
		Batches:       m.c.batches.Load(),
		LastSequence:  m.c.lastSeq.Load(),
		Resets:        m.c.resets.Load(),
		PartialBlocks: m.c.partialBlocks.Load(),
		Restarts:      m.c.restarts.Load(),
		DPSize:        m.Spec.DPRanks(),
		BlockSize:     m.Spec.BlockSize,
		TotalKVBlocks: m.Spec.TotalKVBlocks,
		Device:        m.Spec.Device,
		Role:          m.Spec.RoleOf(),
	}
	st.Healthy = true
	st.Prediction = PredictionEvents
	if p := m.prediction.Load(); p != nil {
		st.Prediction = *p
	}
	if h := m.health.Load(); h != nil && *h != "" {
		st.Healthy, st.Unhealthy = false, *h
	}
	if d := m.degraded.Load(); d != nil {
		st.Degraded = *d
	}
	if a := m.audit.Load(); a != nil && *a != "" {
		if st.Degraded != "" {
			st.Degraded += "; "
		}
		st.Degraded += *a
	}
	ss := m.eventStats()
	st.Gaps, st.Replays, st.ReplayTimeouts, st.DecodeErrors = ss.Gaps, ss.Replays, ss.ReplayTimeouts, ss.DecodeErrors
	st.StaleBatches, st.DiscardedBatches = ss.Stale, ss.Discarded
	st.DuplicateBatches, st.LostBatches = ss.Duplicates, ss.Lost
	st.OutOfRangeRanks = m.c.badRanks.Load()
	is := ix.Stats(m.Spec.ID)
	st.RejectedStores = is.RejectedStores
	st.MissingRemoves = is.MissingRemoves
	st.OtherTierEvents = is.OtherTierOps
	for r := 0; r < m.Spec.DPRanks(); r++ {
		st.IndexedBlocks += ix.Blocks(rankKey(m.Spec.ID, r))
	}
	return st
}

// eventStats sums the stream counters of the worker's subscribers (connect mode) or of its topic on the
// bind sockets.
func (m *Mirror) eventStats() kvevents.Stats {
	var ss kvevents.Stats
	for _, s := range m.subs {
		addStats(&ss, s.stats())
	}
	if m.topicStats != nil {
		addStats(&ss, m.topicStats())
	}
	return ss
}

// LastBatch returns when the mirror last saw a batch (zero time before the first).
func (m *Mirror) LastBatch() time.Time {
	ns := m.c.lastBatch.Load()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

func setState(c *counters, s string) { c.state.Store(&s) }

// mirrorActor mirrors one backend worker: it owns the subscriber children (one per dp rank), keeps the
// worker's counters and forwards re-keyed batches to the indexer shard that owns the worker.
type mirrorActor struct {
	m     *Mirror
	deps  *deps
	pids  []*actor.PID
	ranks []bool // ranks that have delivered a batch
}

func (a *mirrorActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.start(ctx)
	case *actor.Stopping, *actor.Stopped, *actor.Restarting:
	case *eventsArrived:
		if !msg.Bound && (msg.Rank >= len(a.m.subs) || msg.Gen != a.m.subs[msg.Rank].gen.Load()) {
			return // from a subscriber retired by a resync
		}
		c := a.m.c
		if msg.BadRank >= 0 {
			c.badRanks.Add(1)
			return
		}
		c.batches.Add(1)
		c.events.Add(uint64(msg.Events))
		c.partialBlocks.Add(uint64(msg.Partial))
		c.lastSeq.Store(int64(msg.Seq))
		c.lastBatch.Store(a.deps.now().UnixNano())
		if msg.Rank < len(a.ranks) && !a.ranks[msg.Rank] {
			a.ranks[msg.Rank] = true
			setState(c, StateReady)
		}
		if len(msg.Apply.Ops) > 0 {
			_ = a.deps.index.Apply(msg.Apply)
		}
	case *engineReset:
		a.m.c.resets.Add(1)
		// Same mailbox order as the applies that follow, so the clear lands before the new stream. Only
		// the restarted rank's engine lost its cache.
		_ = a.deps.index.Send(a.m.Spec.ID, &indexer.ClearRank{WorkerID: a.m.Spec.ID, DPRank: uint32(msg.Rank)})
	case *syncMirror: // barrier of external event sources (source.go)
		close(msg.Done)
	case *resync:
		for _, s := range a.m.subs {
			s.gen.Add(1)
		}
		_ = a.deps.index.Send(a.m.Spec.ID, &indexer.ClearWorker{WorkerID: a.m.Spec.ID, Done: msg.Done})
		for _, pid := range a.pids {
			// Restarting a subscriber reconnects and asks for replay from sequence 0.
			ctx.Send(pid, &subscriberExited{Err: errResync})
		}
	default:
		a.deps.unknown.Add(1)
	}
}

func (a *mirrorActor) start(ctx actor.Context) {
	spec := a.m.Spec
	a.ranks = make([]bool, spec.DPRanks())
	if a.m.bound {
		setState(a.m.c, StateConnecting)
		return
	}
	if spec.Events == "" {
		setState(a.m.c, StateNoEvents)
		return
	}
	setState(a.m.c, StateConnecting)
	for _, sub := range a.m.subs {
		sub := sub
		props := actor.PropsFromProducer(func() actor.Actor {
			return &subscriberActor{sub: sub, mirror: ctx.Self(), system: ctx.ActorSystem(), c: a.m.c}
		})
		a.pids = append(a.pids, ctx.Spawn(props))
	}
}

package kvevents

import "sync/atomic"

// Counters are the event-plane metrics of one subscriber. The socket goroutine writes them; any goroutine
// may read them (Stats) at any time. Each field is monotonic.
type Counters struct {
	Batches         atomic.Uint64 // batches delivered to the handler (live and replayed)
	Events          atomic.Uint64 // events in delivered batches
	DecodeErrors    atomic.Uint64 // payloads or frames that did not parse; skipped
	Gaps            atomic.Uint64 // sequence gaps detected on the live stream
	Lost            atomic.Uint64 // sequence numbers never delivered (replay unavailable or incomplete)
	Replays         atomic.Uint64 // replay requests sent
	ReplayedBatches atomic.Uint64 // batches delivered from replay responses
	ReplayTimeouts  atomic.Uint64 // replays abandoned because the replay socket fell silent
	Duplicates      atomic.Uint64 // live batches dropped because replay had delivered them
	Resets          atomic.Uint64 // engine restarts (sequence went backwards)
	Stale           atomic.Uint64 // live batches a completed replay did not hold: an earlier engine's, dropped
	Discarded       atomic.Uint64 // live batches queued when a restart was found, dropped before the replay
	PartialBlocks   atomic.Uint64 // stored blocks whose tokens on the wire were short (PartialBlocks)
	SkippedEvents   atomic.Uint64 // events with an unknown tag
	UnknownTopics   atomic.Uint64 // bind mode: messages from unregistered topics, dropped
	Reconnects      atomic.Uint64 // socket sessions restarted after an error
	Connects        atomic.Uint64 // connections established (handshakes): to the publisher, or from publishers in bind mode
}

// Stats is a point-in-time copy of Counters.
type Stats struct {
	Batches, Events, DecodeErrors, Gaps, Lost, Replays, ReplayedBatches, ReplayTimeouts, Duplicates,
	Resets, Stale, Discarded, PartialBlocks, SkippedEvents, UnknownTopics, Reconnects, Connects uint64
}

// Snapshot copies the counters. Fields are read one by one, so a snapshot taken while batches flow is
// not an atomic cut.
func (c *Counters) Snapshot() Stats {
	return Stats{
		Batches: c.Batches.Load(), Events: c.Events.Load(), DecodeErrors: c.DecodeErrors.Load(),
		Gaps: c.Gaps.Load(), Lost: c.Lost.Load(), Replays: c.Replays.Load(),
		ReplayedBatches: c.ReplayedBatches.Load(), ReplayTimeouts: c.ReplayTimeouts.Load(),
		Duplicates: c.Duplicates.Load(), Resets: c.Resets.Load(), Stale: c.Stale.Load(),
		Discarded: c.Discarded.Load(), PartialBlocks: c.PartialBlocks.Load(),
		SkippedEvents: c.SkippedEvents.Load(), UnknownTopics: c.UnknownTopics.Load(),
		Reconnects: c.Reconnects.Load(), Connects: c.Connects.Load(),
	}
}

// Add adds every counter of o to st.
func (st *Stats) Add(o Stats) {
	st.Batches += o.Batches
	st.Events += o.Events
	st.DecodeErrors += o.DecodeErrors
	st.Gaps += o.Gaps
	st.Lost += o.Lost
	st.Replays += o.Replays
	st.ReplayedBatches += o.ReplayedBatches
	st.ReplayTimeouts += o.ReplayTimeouts
	st.Duplicates += o.Duplicates
	st.Resets += o.Resets
	st.Stale += o.Stale
	st.Discarded += o.Discarded
	st.PartialBlocks += o.PartialBlocks
	st.SkippedEvents += o.SkippedEvents
	st.UnknownTopics += o.UnknownTopics
	st.Reconnects += o.Reconnects
	st.Connects += o.Connects
}

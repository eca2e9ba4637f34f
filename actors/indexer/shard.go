package indexer

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
)

// WorkerStats are the index-side counters of one worker, kept by the shard that owns it.
type WorkerStats struct {
	// Events is the number of ops applied (stores, removes, clears).
	Events uint64
	// RejectedStores counts stores refused because their parent block was unknown (or invalid).
	RejectedStores uint64
	// MissingRemoves counts removes of engine hashes the index did not hold.
	MissingRemoves uint64
	// OtherTierOps counts stores and removals of a tier other than the device (Op.Medium). They are
	// applied to that tier (host, or disk for disk and external media), never credited as device cache;
	// those of an unknown medium are skipped.
	OtherTierOps uint64
}

// shard is one partition of the index. Its actor is the only writer; readers never wait for it. Queries
// read one of two views of the tree (left-right): the index's own, and a copy the actor keeps in step
// (prefix.View). The actor writes the index while the readers are on the copy, publishes the index's view,
// brings the copy up to date once the readers that were on it have left, and publishes the copy again. The
// struct outlives actor restarts, so a restarted shard keeps its index.
type shard struct {
	idx *prefix.Index
	g   *gate // readers' entrance: the views, the one to enter, and who is inside

	// mu is held by the actor while it writes idx, and by the control-plane reads of idx (Blocks, Size,
	// Stats, Dump); it also guards stats.
	mu    sync.Mutex
	stats map[uint64]*WorkerStats

	// Every message for the shard waits here for the shard actor, in the order it was sent; the actor
	// takes the whole list at once (drain) and publishes each run of consecutive event batches in one
	// write. Messages go through this list rather than the mailbox because a mailbox cannot be drained in
	// one go; the mailbox only carries a drainPending, sent when the list turns non-empty.
	pendMu  sync.Mutex
	pending []shardMessage // "indexer.pending": bounded by maxPending, senders wait on space when full
	kicked  bool           // a drainPending is in the mailbox or being handled
	space   *sync.Cond     // on pendMu: signalled when the actor takes the list
	spare   []shardMessage // the actor's second buffer, swapped with pending
	// maxPending bounds pending (Config.MailboxSize): a flood blocks the senders, as a full mailbox did.
	maxPending int
	// unknown counts messages of a type the shard does not handle.
	unknown atomic.Uint64
	// applied counts events by status and type (dynamo_component_kv_cache_events_applied).
	applied [numStatus][numEventType]atomic.Uint64
}

// gate is what a reader of a shard touches before its view: which view is live, how many readers are
// inside each, and the views. It is one cache line, and the gates of an indexer's shards are one array
// (Indexer.gates), so that a query entering every shard asks for one page of lines, all at once (read),
// rather than a chain of two misses per shard: the counter's atomic add waits for every load before it,
// so entering shard after shard from separate structs queued eight misses on a cold query.
type gate struct {
	live    atomic.Uint32              // the view readers enter
	readers [2]atomic.Int64            // readers inside each view (low 32 bits), reads finished in it (high bits)
	views   [2]*prefix.View            // views[0] is the index's own, views[1] the copy
	_       [64 - 4 - 4 - 16 - 16]byte // to a cache line (make([]gate, n) is line-aligned: its size class is a multiple of 64 bytes)
}

// enter returns the view a reader may read until it calls leave with the same number; k is a load of
// live made a moment before (the caller's, so that it can load every gate's at once). It never blocks:
// it retries only when the writer published between the two loads.
func (g *gate) enter(k uint32) (*prefix.View, uint32) {
	for {
		g.readers[k].Add(1)
		if g.live.Load() == k {
			return g.views[k], k
		}
		g.readers[k].Add(-1)
		k = g.live.Load()
	}
}

// leave counts a reader out of view k and its read in: a reader count's low 32 bits are the readers
// inside, its high bits the reads finished (reads), in the same atomic add.
func (g *gate) leave(k uint32) { g.readers[k].Add(1<<32 - 1) }

// exit counts a reader out of view k without counting a read (the warmer).
func (g *gate) exit(k uint32) { g.readers[k].Add(-1) }

// reads returns a number that changes whenever a reader leaves either view (the warmer's sign of use).
func (g *gate) reads() int64 { return g.readers[0].Load()>>32 + g.readers[1].Load()>>32 }

// enter is the gate's enter for a reader of this shard alone.
func (s *shard) enter() (*prefix.View, uint32) { return s.g.enter(s.g.live.Load()) }

func (s *shard) leave(k uint32) { s.g.leave(k) }

// waitReaders waits until no reader is inside view k; live no longer names it, so none can enter. The
// readers inside entered before the last publication, at most a query's duration ago.
func (g *gate) waitReaders(k uint32) {
	for uint32(g.readers[k].Load()) != 0 {
		runtime.Gosched()
	}
}

// write applies batch to the index and publishes it (shard actor only), advancing *next before each
// message: readers are moved to the copy, the index is written and sealed (its chunk sums brought up to
// date), readers are moved back to the index's view, and the copy is synced for the next write.
func (s *shard) write(batch []shardMessage, next *int) {
	s.g.waitReaders(0) // readers are on the copy since the last write
	s.mu.Lock()
	func() {
		defer s.mu.Unlock()
		for _, m := range batch {
			*next++
			s.applyTo(m)
		}
		s.idx.Seal()
	}()
	s.g.live.Store(0)
	s.g.waitReaders(1)
	s.idx.Sync(s.g.views[1])
	s.g.live.Store(1)
}

// applyTo applies one message to the index (shard actor, under mu).
func (s *shard) applyTo(msg shardMessage) {
	switch m := msg.(type) {
	case *Apply:
		s.apply(m)
	case *ClearWorker:
		s.idx.ClearWorker(m.WorkerID)
	case *ClearRank:
		s.idx.ClearRank(prefix.WorkerKey{WorkerID: m.WorkerID, DPRank: m.DPRank})
	case *RemoveWorker:
		s.idx.RemoveWorker(m.WorkerID)
		delete(s.stats, m.WorkerID)
	}
}

// Event statuses and types of the applied-events counter, with Dynamo's label values.
const (
	statusOK = iota
	statusParentNotFound
	statusBlockNotFound
	statusInvalidBlock
	numStatus
)

const (
	typeStored = iota
	typeRemoved
	typeCleared
	numEventType
)

var statusLabel = [numStatus]string{"ok", "parent_block_not_found", "block_not_found", "invalid_block"}
var typeLabel = [numEventType]string{"stored", "removed", "cleared"}

func statusOf(err error) int {
	switch {
	case err == nil:
		return statusOK
	case errors.Is(err, prefix.ErrParentNotFound):
		return statusParentNotFound
	case errors.Is(err, prefix.ErrBlockNotFound):
		return statusBlockNotFound
	}
	return statusInvalidBlock
}

// newShard returns a shard whose readers enter through g.
func newShard(g *gate, maxPending int) *shard {
	idx := prefix.New()
	g.views = [2]*prefix.View{&idx.View, idx.NewView()}
	g.live.Store(1)
	s := &shard{idx: idx, g: g, stats: make(map[uint64]*WorkerStats), maxPending: maxPending}
	s.space = sync.NewCond(&s.pendMu)
	return s
}

// enqueue adds a message to the pending list, waiting while it is full, and reports whether the caller
// must send the shard actor a drainPending.
func (s *shard) enqueue(m shardMessage) (kick bool) {
	s.pendMu.Lock()
	for len(s.pending) >= s.maxPending {
		s.space.Wait()
	}
	s.pending = append(s.pending, m)
	kick = !s.kicked
	s.kicked = true
	s.pendMu.Unlock()
	return kick
}

// drainBudget bounds the work published in one write, in blocks stored or removed plus one per op: readers
// see a backlog's first batches while the rest is applied. A batch of one block per request (the common
// case) shares a write with up to 255 others; a long prefill is published alone.
const drainBudget = 256

// weight is a batch's share of drainBudget.
func weight(m *Apply) int {
	n := 0
	for i := range m.Ops {
		n += 1 + len(m.Ops[i].Blocks) + len(m.Ops[i].Hashes)
	}
	return n
}

// drain handles every pending message in order (shard actor only); consecutive event batches share a
// write up to drainBudget.
func (s *shard) drain() {
	s.pendMu.Lock()
	list := s.pending
	s.pending, s.spare = s.spare[:0], nil
	s.kicked = false
	s.pendMu.Unlock()
	s.space.Broadcast()
	next := 0 // list[:next] are handled, or dropped: the one whose handling panicked
	defer func() {
		if next < len(list) {
			// A message panicked (a broken invariant; the supervisor restarts the actor, as it did when
			// messages came through the mailbox): it is dropped, the ones behind it are kept.
			s.requeue(list[next:])
		}
	}()
	for next < len(list) {
		a, ok := list[next].(*Apply)
		if !ok {
			m := list[next]
			next++
			s.handle(m)
			continue
		}
		end, w := next+1, weight(a)
		for end < len(list) && w < drainBudget {
			b, ok := list[end].(*Apply)
			if !ok {
				break
			}
			w += weight(b)
			end++
		}
		s.applyChunk(list[next:end], &next)
	}
	clear(list)
	s.spare = list[:0]
}

// applyChunk publishes event batches in order in one write, advancing *next before each, then closes
// their Done channels.
func (s *shard) applyChunk(batches []shardMessage, next *int) {
	s.write(batches, next)
	for _, m := range batches {
		closeIf(m.(*Apply).Done)
	}
}

// requeue puts messages back at the head of the pending list (after a panic); the restarted actor
// drains them when it starts.
func (s *shard) requeue(list []shardMessage) {
	s.pendMu.Lock()
	s.pending = append(append([]shardMessage(nil), list...), s.pending...)
	s.pendMu.Unlock()
}

// handle handles one message other than an event batch.
func (s *shard) handle(msg shardMessage) {
	switch m := msg.(type) {
	case *ClearWorker:
		var n int
		s.write([]shardMessage{m}, &n)
		closeIf(m.Done)
	case *ClearRank:
		var n int
		s.write([]shardMessage{m}, &n)
		closeIf(m.Done)
	case *RemoveWorker:
		var n int
		s.write([]shardMessage{m}, &n)
		closeIf(m.Done)
	case *Barrier:
		closeIf(m.Done)
	case *Query:
		ix, k := s.enter()
		out := ix.FindMatches(m.Local, nil)
		s.leave(k)
		m.Reply <- out
	case *Apply:
		var n int
		s.applyChunk([]shardMessage{m}, &n)
	default:
		s.unknown.Add(1)
	}
}

// shardActor applies its shard's pending messages when told to, and when it (re)starts.
type shardActor struct{ s *shard }

func (a *shardActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Stopping, *actor.Stopped, *actor.Restarting:
	case *actor.Started, *drainPending:
		a.s.drain()
	case shardMessage:
		// Sent to the mailbox directly, not through Indexer (which queues every message): handled after
		// what is pending.
		a.s.drain()
		a.s.handle(m)
	default:
		a.s.unknown.Add(1)
	}
}

// apply applies one batch to the index (shard actor, under mu).
func (s *shard) apply(m *Apply) {
	st := s.stats[m.WorkerID]
	if st == nil {
		st = &WorkerStats{}
		s.stats[m.WorkerID] = st
	}
	for i := range m.Ops {
		op := &m.Ops[i]
		w := prefix.WorkerKey{WorkerID: m.WorkerID, DPRank: op.DPRank}
		st.Events++
		tier := prefix.TierDevice
		if op.Medium != scoring.MediumDevice && op.Kind != OpClear {
			st.OtherTierOps++
			var ok bool
			if tier, ok = tierOf(op.Medium); !ok {
				continue
			}
		}
		switch op.Kind {
		case OpStore:
			err := s.idx.StoreTier(w, tier, op.Parent, op.HasParent, op.Blocks)
			if err != nil {
				st.RejectedStores++
			}
			s.applied[statusOf(err)][typeStored].Add(1)
		case OpRemove:
			err := s.idx.RemoveTier(w, tier, op.Hashes)
			if err != nil && errors.Is(err, prefix.ErrBlockNotFound) {
				st.MissingRemoves++
			}
			s.applied[statusOf(err)][typeRemoved].Add(1)
		case OpClear:
			// vLLM's AllBlocksCleared comes from one rank's block pool: the other ranks keep theirs.
			s.idx.ClearRank(w)
			s.applied[statusOK][typeCleared].Add(1)
		}
	}
}

// tierOf maps an event's storage medium to the index's tier: host-pinned memory is the host tier, disk and
// storage beyond the worker (external) the disk tier. An unknown medium has no tier: never credited.
func tierOf(m scoring.Medium) (prefix.Tier, bool) {
	switch m {
	case scoring.MediumDevice:
		return prefix.TierDevice, true
	case scoring.MediumHostPinned:
		return prefix.TierHost, true
	case scoring.MediumDisk, scoring.MediumExternal:
		return prefix.TierDisk, true
	}
	return 0, false
}

func closeIf(c chan struct{}) {
	if c != nil {
		close(c)
	}
}

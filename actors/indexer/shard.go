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
	// OtherTierOps counts stores and removals of a tier other than the device (Op.Medium), not applied.
	OtherTierOps uint64
}

// shard is one partition of the index. Its actor is the only writer; FindMatches readers take the read
// lock. The struct outlives actor restarts, so a restarted shard keeps its index.
type shard struct {
	mu    sync.RWMutex
	idx   *prefix.Index
	stats map[uint64]*WorkerStats

	// Every message for the shard waits here for the shard actor, in the order it was sent; the actor
	// takes the whole list at once (drain) and applies each run of consecutive event batches under one
	// write lock. A write lock per batch, with a batch per request under load, made the overlap queries
	// of the request path queue behind writers on every shard: on 2 cores a reader that blocks behind a
	// writer waits for a run-queue turn, and the convoy lasts hundreds of µs. Messages go through this
	// list rather than the mailbox because a mailbox cannot be drained in one go; the mailbox only
	// carries a drainPending, sent when the list turns non-empty.
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

func newShard(maxPending int) *shard {
	s := &shard{idx: prefix.New(), stats: make(map[uint64]*WorkerStats), maxPending: maxPending}
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

// drainBudget bounds the work applied under one write lock, in blocks stored or removed plus one per op,
// so a backlog does not hold readers out for long: a batch of one block per request (the common case)
// shares the lock with 31 others, a 512-block prefill holds it alone. With a budget in batches instead,
// BenchmarkFindMatchesUnderWrites (flooding 17-op batches) read p99 in milliseconds.
const drainBudget = 32

// weight is a batch's share of drainBudget.
func weight(m *Apply) int {
	n := 0
	for i := range m.Ops {
		n += 1 + len(m.Ops[i].Blocks) + len(m.Ops[i].Hashes)
	}
	return n
}

// drain handles every pending message in order (shard actor only); consecutive event batches share a
// write lock up to drainBudget.
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
	locked := false // a write lock was taken in this drain: yield before the next one
	for next < len(list) {
		a, ok := list[next].(*Apply)
		if !ok {
			m := list[next]
			next++
			s.handle(m)
			continue
		}
		if locked {
			// A backlog: let the readers woken by the last Unlock (and everything else queued behind this
			// goroutine) run before taking the lock again.
			runtime.Gosched()
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
		locked = true
	}
	clear(list)
	s.spare = list[:0]
}

// applyChunk applies event batches in order under one write lock, advancing *next before each, then
// closes their Done channels.
func (s *shard) applyChunk(batches []shardMessage, next *int) {
	func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, m := range batches {
			*next++
			s.apply(m.(*Apply))
		}
	}()
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
		s.mu.Lock()
		s.idx.ClearWorker(m.WorkerID)
		s.mu.Unlock()
		closeIf(m.Done)
	case *ClearRank:
		s.mu.Lock()
		s.idx.ClearRank(prefix.WorkerKey{WorkerID: m.WorkerID, DPRank: m.DPRank})
		s.mu.Unlock()
		closeIf(m.Done)
	case *RemoveWorker:
		s.mu.Lock()
		s.idx.RemoveWorker(m.WorkerID)
		delete(s.stats, m.WorkerID)
		s.mu.Unlock()
		closeIf(m.Done)
	case *Barrier:
		closeIf(m.Done)
	case *Query:
		s.mu.RLock()
		out := s.idx.FindMatches(m.Local, nil)
		s.mu.RUnlock()
		m.Reply <- out
	case *Apply:
		var n int
		s.applyChunk([]shardMessage{m}, &n)
	default:
		s.unknown.Add(1)
	}
}

// drainPending tells the shard actor that batches are waiting (shard.enqueue).
type drainPending struct{}

func (*drainPending) shardMessage() {}

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

// apply applies one batch; the caller holds the write lock.
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
		if op.Medium != scoring.MediumDevice && op.Kind != OpClear {
			st.OtherTierOps++
			continue
		}
		switch op.Kind {
		case OpStore:
			err := s.idx.Store(w, op.Parent, op.HasParent, op.Blocks)
			if err != nil {
				st.RejectedStores++
			}
			s.applied[statusOf(err)][typeStored].Add(1)
		case OpRemove:
			err := s.idx.Remove(w, op.Hashes)
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

func closeIf(c chan struct{}) {
	if c != nil {
		close(c)
	}
}

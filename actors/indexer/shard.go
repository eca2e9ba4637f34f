package indexer

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

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
}

// shard is one partition of the index. Its actor is the only writer; FindMatches readers take the read
// lock. The struct outlives actor restarts, so a restarted shard keeps its index.
type shard struct {
	mu    sync.RWMutex
	idx   *prefix.Index
	stats map[uint64]*WorkerStats
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

func newShard() *shard {
	return &shard{idx: prefix.New(), stats: make(map[uint64]*WorkerStats)}
}

// shardActor applies messages to its shard.
type shardActor struct{ s *shard }

func (a *shardActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting:
	case *Apply:
		a.s.apply(m)
		closeIf(m.Done)
	case *ClearWorker:
		a.s.mu.Lock()
		a.s.idx.ClearWorker(m.WorkerID)
		a.s.mu.Unlock()
		closeIf(m.Done)
	case *RemoveWorker:
		a.s.mu.Lock()
		a.s.idx.RemoveWorker(m.WorkerID)
		delete(a.s.stats, m.WorkerID)
		a.s.mu.Unlock()
		closeIf(m.Done)
	case *Barrier:
		closeIf(m.Done)
	case *Query:
		a.s.mu.RLock()
		out := a.s.idx.FindMatches(m.Local, nil)
		a.s.mu.RUnlock()
		m.Reply <- out
	default:
		a.s.unknown.Add(1)
	}
}

func (s *shard) apply(m *Apply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats[m.WorkerID]
	if st == nil {
		st = &WorkerStats{}
		s.stats[m.WorkerID] = st
	}
	for i := range m.Ops {
		op := &m.Ops[i]
		w := prefix.WorkerKey{WorkerID: m.WorkerID, DPRank: op.DPRank}
		st.Events++
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
			// vLLM's AllBlocksCleared comes from one rank's pool; Dynamo clears the whole worker.
			s.idx.ClearWorker(m.WorkerID)
			s.applied[statusOK][typeCleared].Add(1)
		}
	}
}

func closeIf(c chan struct{}) {
	if c != nil {
		close(c)
	}
}

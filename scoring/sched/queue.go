package sched

import (
	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
	"github.com/kvroute/kvroute/scoring/queue"
)

// waiting is a parked request: a copy of what its decision needs, and when it arrived.
type waiting struct {
	req     Request
	chain   []uint64
	isl     int
	scores  []prefix.Score // the overlap at arrival (refreshed after OverlapRefreshAfter)
	arrival time.Time
	gated   bool // at the minimum-workers gate, not in the queue
	gone    bool // cancelled while in the queue heap (skipped when it reaches the head)
}

// park copies req into a waiting entry: at the minimum-workers gate (gated) or in the queue.
func (m *Machine) park(now time.Time, req *Request, chain []uint64, isl int, scores []prefix.Score, gated bool) {
	w := &waiting{req: *req, chain: append([]uint64(nil), chain...), isl: isl, arrival: now, gated: gated,
		scores: append([]prefix.Score(nil), scores...)}
	w.req.Local = append([]uint64(nil), req.Local...)
	w.req.Exclude = append([]uint64(nil), req.Exclude...)
	w.req.Chain, w.req.Scores = nil, nil
	if req.Pin != nil {
		p := *req.Pin
		w.req.Pin = &p
	}
	m.waitByID[req.ID] = w
	if gated {
		m.gate = append(m.gate, w)
		return
	}
	m.enqueue(now, w)
}

// enqueue pushes w into the queue under its key (spec §9.2: strict tier, then the policy score; WSPT
// reads the best cached prefix among the eligible workers at arrival).
func (m *Machine) enqueue(now time.Time, w *waiting) {
	pin, pinRank := m.sessionPin(now, &w.req)
	key := queue.Key{Strict: w.req.Strict, PriorityJump: queue.Jump(w.req.Priority), Arrival: w.arrival, ISL: w.isl,
		BestCachedTokens: m.bestCached(w, pin, pinRank)}
	m.q.Push(key, w)
}

// bestCached is the WSPT key input: the largest min(overlap × block size, ISL) over the eligible workers
// (the pinned worker's when pinned).
func (m *Machine) bestCached(w *waiting, pin *scoring.WorkerKey, pinRank bool) int {
	best := uint32(0)
	for _, s := range w.scores {
		k := scoring.WorkerKey(s.Worker)
		if pin != nil && (k.WorkerID != pin.WorkerID || pinRank && k.DPRank != pin.DPRank) {
			continue
		}
		if i, ok := m.pos.find(k); !ok || m.skip(i, w.req.Exclude) {
			continue
		}
		best = max(best, s.Blocks)
	}
	return min(int(best)*m.cfg.BlockSize, w.isl)
}

// queueFull reports whether a request with this pin and exclusions must wait (spec §9.1): a queue
// threshold is set and every eligible worker has active prefill tokens > threshold ×
// max_num_batched_tokens. With no eligible worker it is false, so the request falls through to the
// selection error instead of waiting forever.
func (m *Machine) queueFull(pin *scoring.WorkerKey, pinRank bool, exclude []uint64) bool {
	cfg := m.cfg
	if !cfg.QueueThreshold.Set {
		return false
	}
	any := false
	var c scoring.Candidate
	for i, t := range m.list {
		if pin != nil && (t.key.WorkerID != pin.WorkerID || pinRank && t.key.DPRank != pin.DPRank) {
			continue
		}
		if m.skip(i, exclude) {
			continue
		}
		l := &m.lines[i]
		c.Worker = t.key
		c.Load = scoring.Load{Known: true, ActivePrefillTokens: l.prefill, ActiveDecodeBlocks: l.decode, ActiveRequests: l.active}
		m.capacity(&c.Capacity, i)
		if scoring.Busy(&c, cfg) {
			continue
		}
		any = true
		mb := c.Capacity.MaxNumBatchedTokens
		if mb == 0 {
			mb = scoring.DefaultMaxBatchedTokens
		}
		if float64(l.prefill) <= cfg.QueueThreshold.V*float64(mb) {
			return false
		}
	}
	return any
}

// head returns the queue's first live entry, dropping cancelled ones on the way.
func (m *Machine) head() *waiting {
	for m.q.Len() > 0 {
		w, _, _ := m.q.Peek()
		if !w.gone {
			return w
		}
		m.q.Pop()
	}
	return nil
}

// drain releases waiting requests after capacity changed (a request's first token or end on worker t,
// nil when unknown): the minimum-workers gate first, then the queue head by head, each released request
// charged before the next check (spec §9.1: pop while not every eligible worker is busy). A head that
// waited longer than OverlapRefreshAfter has its overlap queried again.
func (m *Machine) drain(now time.Time, _ *target) []Released {
	var rel []Released
	if !m.gateOpen && len(m.gate) > 0 && m.openGate() {
		gate := m.gate
		m.gate = nil
		for _, w := range gate {
			rel = m.admit(now, w, rel)
		}
	}
	for {
		w := m.head()
		if w == nil {
			break
		}
		pin, pinRank := m.sessionPin(now, &w.req)
		if m.queueFull(pin, pinRank, w.req.Exclude) {
			break
		}
		m.q.Pop()
		if ra := m.cfg.OverlapRefreshAfter; ra > 0 && now.Sub(w.arrival) > ra && m.cfg.NeedsIndexer() {
			w.scores = m.index.FindMatches(w.req.Local, w.scores[:0])
		}
		delete(m.waitByID, w.req.ID)
		d, err := m.decide(now, &w.req, w.chain, w.isl, w.scores, pin, pinRank)
		d.Queued, d.ID, d.Ticket = now.Sub(w.arrival), w.req.ID, w.req.Ticket
		rel = append(rel, Released{Decision: d, Err: err})
	}
	return rel
}

// admit routes a request released from the minimum-workers gate: decided now, or queued behind the
// queue threshold like any new arrival.
func (m *Machine) admit(now time.Time, w *waiting, rel []Released) []Released {
	w.gated = false
	if m.cfg.NeedsIndexer() {
		w.scores = m.index.FindMatches(w.req.Local, w.scores[:0])
	}
	pin, pinRank := m.sessionPin(now, &w.req)
	if m.cfg.QueueThreshold.Set && (m.head() != nil || m.queueFull(pin, pinRank, w.req.Exclude)) {
		m.enqueue(now, w)
		return rel
	}
	delete(m.waitByID, w.req.ID)
	d, err := m.decide(now, &w.req, w.chain, w.isl, w.scores, pin, pinRank)
	d.Queued, d.ID, d.Ticket = now.Sub(w.arrival), w.req.ID, w.req.Ticket
	return append(rel, Released{Decision: d, Err: err})
}

// openGate opens the minimum-workers gate for good once enough workers have joined.
func (m *Machine) openGate() bool {
	if m.seenWorkers >= m.cfg.MinInitialWorkers {
		m.gateOpen = true
	}
	return m.gateOpen
}

// expireGate fails the gate's requests that waited past the patience (ErrNotReady).
func (m *Machine) expireGate(now time.Time, rel []Released) []Released {
	keep := m.gate[:0]
	for _, w := range m.gate {
		if now.Sub(w.arrival) < m.patience {
			keep = append(keep, w)
			continue
		}
		delete(m.waitByID, w.req.ID)
		rel = append(rel, Released{Decision: Decision{ID: w.req.ID, Ticket: w.req.Ticket, Queued: now.Sub(w.arrival)}, Err: ErrNotReady})
	}
	clear(m.gate[len(keep):])
	m.gate = keep
	return rel
}

// Cancel withdraws a waiting request (its caller gave up). It reports whether the request was waiting;
// false means it is active (already released) or unknown, and the caller frees it if it was routed.
func (m *Machine) Cancel(id string) bool {
	w := m.waitByID[id]
	if w == nil {
		return false
	}
	delete(m.waitByID, id)
	if w.gated {
		for i, g := range m.gate {
			if g == w {
				m.gate = append(m.gate[:i], m.gate[i+1:]...)
				break
			}
		}
		return true
	}
	w.gone = true // dropped when it reaches the head; Len counts it until then
	m.head()
	return true
}

// QueueLen is the number of requests waiting in the queue (not at the minimum-workers gate).
func (m *Machine) QueueLen() int { return len(m.waitByID) - len(m.gate) }

package sched

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/policy"
	"github.com/kvroute/kvroute/scoring/prefix"
	"github.com/kvroute/kvroute/scoring/queue"
)

// ErrQueueRejected: the request's policy class has a queue at one of its limits (requests, raw ISL
// tokens or cached tokens per worker); Dynamo's QueueRejected, HTTP 529 at the edge.
var ErrQueueRejected = errors.New("router: queue rejected")

// waiting is a parked request: a copy of what its decision needs, and when it arrived.
type waiting struct {
	req   Request
	chain []uint64
	isl   int
	// scores, or grouped when not nil (a copy of the index's groups), is the overlap at arrival,
	// refreshed after OverlapRefreshAfter.
	scores  []prefix.Score
	grouped *prefix.Matches
	arrival time.Time
	gated   bool // at the minimum-workers gate, not in the queue
	gone    bool // cancelled while in the queue heap (skipped when it reaches the head)
	// class is the policy class whose heap holds the request; cached its best cached tokens among the
	// eligible workers when it was queued (its limits, its DRR cost and its WSPT key).
	class  int
	cached int
}

// cost is what serving w takes from its class's deficit: its uncached tokens, at least 1 so a fully
// cached request still takes its turn.
func (w *waiting) cost() uint64 { return uint64(max(1, w.isl-w.cached)) }

// classQueue is one policy class's heap, its deficit and what it holds (live entries only).
type classQueue struct {
	cls     *policy.Class
	q       *queue.Queue[*waiting]
	deficit uint64
	st      policy.Stats
	pool    poolCount // the fleet's targets in the class's pool (pool.go)
}

// drrCand is a class head's turn in a DRR pass: its cost, and whether it can be served now.
type drrCand struct {
	cost uint64
	ok   bool
}

// policyQueue is the machine's queue: one heap per policy class (each in its class's order), served by
// deficit round robin charged in uncached tokens. Without a policy document it is the single synthetic
// class of --router-queue-threshold / --router-queue-policy, for which DRR reduces to popping the head.
type policyQueue struct {
	profile *policy.Profile
	fixed   bool // the profile came from a policy document: SetConfig leaves it alone
	classes []classQueue
	on      bool // some class queues at all
	live    int  // live entries over all classes
	cursor  int  // where the next DRR ring pass starts
	carry   int  // the class that keeps its turn while its deficit lasts, -1 none
	cands   []drrCand
	epoch   time.Time
}

// init builds the queue for profile p, or the synthetic class of cfg when p is nil.
func (pq *policyQueue) init(cfg *scoring.Config, p *policy.Profile, epoch time.Time) error {
	fixed := p != nil
	if p == nil {
		p = policy.Synthetic(cfg.QueueThreshold, cfg.QueuePolicy)
	}
	*pq = policyQueue{profile: p, fixed: fixed, carry: -1, epoch: epoch, classes: make([]classQueue, len(p.Classes)),
		cands: make([]drrCand, len(p.Classes))}
	for i := range p.Classes {
		cls := &p.Classes[i]
		q, err := queue.New[*waiting](cls.QueuePolicy, epoch)
		if err != nil {
			return err
		}
		pq.classes[i] = classQueue{cls: cls, q: q}
		pq.on = pq.on || cls.Queues()
	}
	return nil
}

// reconfigure follows a configuration change: the synthetic class takes the new queue threshold and
// policy (the policy only while nothing waits); a policy document's classes do not change.
func (pq *policyQueue) reconfigure(cfg *scoring.Config) error {
	if pq.fixed {
		return nil
	}
	if cfg.QueuePolicy == pq.classes[0].cls.QueuePolicy {
		// Same order: the waiting requests stay; only the threshold may have changed.
		pq.profile = policy.Synthetic(cfg.QueueThreshold, cfg.QueuePolicy)
		pq.classes[0].cls = &pq.profile.Classes[0]
		pq.on = pq.classes[0].cls.Queues()
		return nil
	}
	if pq.live > 0 {
		return fmt.Errorf("%w: the queue policy cannot change while requests wait", scoring.ErrBadConfig)
	}
	return pq.init(cfg, nil, pq.epoch)
}

// Class names the policy class a request is in; for the scenarios and status pages. ok is false when
// the request is not waiting in the queue.
func (m *Machine) Class(id string) (name string, ok bool) {
	w := m.waitByID[id]
	if w == nil || w.gated {
		return "", false
	}
	return m.pq.classes[w.class].cls.Name, true
}

// ClassQueue is one policy class's queue, for metrics.
type ClassQueue struct {
	Class   string
	Deficit uint64
	policy.Stats
}

// Classes appends every policy class's queue to dst.
func (m *Machine) Classes(dst []ClassQueue) []ClassQueue {
	for i := range m.pq.classes {
		c := &m.pq.classes[i]
		dst = append(dst, ClassQueue{Class: c.cls.Name, Deficit: c.deficit, Stats: c.st})
	}
	return dst
}

// newWaiting copies req and its overlap (scores, or grouped when not nil) into a waiting entry and
// registers it by id.
func (m *Machine) newWaiting(now time.Time, req *Request, chain []uint64, isl int, scores []prefix.Score,
	grouped *prefix.Matches, gated bool) *waiting {
	w := &waiting{req: *req, chain: append([]uint64(nil), chain...), isl: isl, arrival: now, gated: gated}
	w.keep(scores, grouped)
	w.req.Local = append([]uint64(nil), req.Local...)
	w.req.Exclude = append([]uint64(nil), req.Exclude...)
	w.req.Only = append([]uint64(nil), req.Only...)
	w.req.Chain, w.req.Scores = nil, nil
	if req.Pin != nil {
		p := *req.Pin
		w.req.Pin = &p
	}
	m.waitByID[req.ID] = w
	return w
}

// keep copies an overlap into w: the groups when there are groups (the caller's Matches is reused once
// this decision is over), else the Scores.
func (w *waiting) keep(scores []prefix.Score, grouped *prefix.Matches) {
	if grouped != nil {
		w.scores, w.grouped = w.scores[:0], grouped.Clone()
		return
	}
	w.scores, w.grouped = append(w.scores[:0], scores...), nil
}

// park holds req at the minimum-workers gate.
func (m *Machine) park(now time.Time, req *Request, chain []uint64, isl int) {
	w := m.newWaiting(now, req, chain, isl, nil, nil, true)
	m.gate = append(m.gate, w)
}

// classify returns the policy class of a request and whether it must wait (its class
// queues, and either others of the class already wait — no bypass of a backlog — or its eligible pool
// is busy by the class's rule). cached is the best cached prefix among the eligible workers; the
// uncached rest picks the cache bucket.
func (m *Machine) classify(req *Request, isl int, scores []prefix.Score, grouped *prefix.Matches, pin *scoring.WorkerKey,
	pinRank bool) (ci, cached int, wait bool) {
	ci, direct := m.pq.profile.Direct(req.PolicyClass)
	cached = -1
	if !direct {
		cached = m.bestCached(scores, grouped, isl, pin, pinRank, avoidOf(req))
		ci = m.pq.profile.Classify(req.PolicyClass, isl-cached)
	}
	c := &m.pq.classes[ci]
	if !c.cls.Queues() || (c.st.Requests == 0 && !m.poolBusy(c, pin, pinRank, avoidOf(req))) {
		return ci, cached, false
	}
	if cached < 0 {
		cached = m.bestCached(scores, grouped, isl, pin, pinRank, avoidOf(req))
	}
	return ci, cached, true
}

// queueOrReject is the queue step of a decision: a request that must wait is parked in its class
// (queued), or rejected when the class is at a limit; otherwise it goes on to selection. Its overlap is
// scores, or grouped when not nil.
func (m *Machine) queueOrReject(now time.Time, req *Request, chain []uint64, isl int, scores []prefix.Score,
	grouped *prefix.Matches, pin *scoring.WorkerKey, pinRank bool) (queued bool, err error) {
	ci, cached, wait := m.classify(req, isl, scores, grouped, pin, pinRank)
	if !wait {
		return false, nil
	}
	if err := m.admitClass(ci); err != nil {
		return false, err
	}
	m.enqueue(m.newWaiting(now, req, chain, isl, scores, grouped, false), ci, cached)
	return true, nil
}

// admitClass checks class ci's queue limits, scaled by the number of workers.
func (m *Machine) admitClass(ci int) error {
	c := &m.pq.classes[ci]
	if rej := c.cls.Admit(c.st, m.workerCount()); rej != nil {
		return fmt.Errorf("%w: %w", ErrQueueRejected, rej)
	}
	return nil
}

// workerCount is the number of workers (not ranks) the machine routes to.
func (m *Machine) workerCount() int { return m.workers }

// enqueue pushes w into class ci's heap under its key (strict tier, then the class's policy
// score; WSPT reads the best cached prefix among the eligible workers at arrival).
func (m *Machine) enqueue(w *waiting, ci, cached int) {
	w.class, w.cached = ci, cached
	c := &m.pq.classes[ci]
	key := queue.Key{Strict: w.req.Strict, PriorityJump: queue.Jump(w.req.Priority), Arrival: w.arrival, ISL: w.isl,
		BestCachedTokens: cached}
	c.q.Push(key, w)
	c.st.Requests++
	c.st.RawISLTokens += uint64(w.isl)
	c.st.CachedTokens += uint64(cached)
	m.pq.live++
}

// unqueue takes w's share out of its class's stats (popped or cancelled); an emptied class loses its
// deficit, so credit never piles up while a class has nothing to send.
func (m *Machine) unqueue(w *waiting) *classQueue {
	c := &m.pq.classes[w.class]
	c.st.Requests--
	c.st.RawISLTokens -= uint64(w.isl)
	c.st.CachedTokens -= uint64(w.cached)
	m.pq.live--
	if c.st.Requests == 0 {
		c.deficit = 0
	}
	return c
}

// bestCached is the largest min(overlap × block size, ISL) over the eligible workers (the pinned
// worker's when pinned), the overlap being scores, or grouped when not nil. A worker is looked at only
// when its overlap would raise the best so far, so groups of equal overlap cost a step each.
func (m *Machine) bestCached(scores []prefix.Score, grouped *prefix.Matches, isl int, pin *scoring.WorkerKey, pinRank bool,
	av avoid) int {
	best := uint32(0)
	if grouped != nil {
		best, scores = m.bestGrouped(grouped, pin, pinRank, av), grouped.Scores
	}
	for _, s := range scores {
		if s.Blocks <= best {
			continue
		}
		k := scoring.WorkerKey(s.Worker)
		if pin != nil && !pinMatches(k, pin, pinRank) {
			continue
		}
		if i, ok := m.pos.find(k); !ok || m.skip(i, av) {
			continue
		}
		best = s.Blocks
	}
	return min(int(best)*m.cfg.BlockSize, isl)
}

// bestGrouped is the largest overlap of g's groups held by an eligible target, found through the
// slot maps as a decision scatters them.
func (m *Machine) bestGrouped(g *prefix.Matches, pin *scoring.WorkerKey, pinRank bool, av avoid) uint32 {
	best := uint32(0)
	for p := range g.Parts() {
		keys, groups := g.Part(p)
		rows := m.slotMap(keys)
		for _, gr := range groups {
			if gr.Blocks <= best {
				continue
			}
			base := rows[gr.Word<<6:]
			for s := gr.Set; s != 0; s &= s - 1 {
				i := int(base[bits.TrailingZeros64(s)])
				if i < 0 || m.skip(i, av) || (pin != nil && !pinMatches(m.list[i].key, pin, pinRank)) {
					continue
				}
				best = gr.Blocks
				break
			}
		}
	}
	return best
}

// poolBusy reports whether a request with this pin and exclusions finds its eligible workers busy by
// class c's rule: a worker is busy above the class's prefill thresholds (absolute tokens, or a
// fraction of max_num_batched_tokens); the pool when all of them are, or busy_worker_ratio of them.
// Workers already busy by the router's busy thresholds are not eligible. With no eligible worker it is
// false, so the request falls through to the selection error instead of waiting forever. A request
// with no pin and no exclusion reads the class's counts (pool.go); a pinned one its worker's targets.
func (m *Machine) poolBusy(c *classQueue, pin *scoring.WorkerKey, pinRank bool, av avoid) bool {
	if pin == nil && len(av.exclude) == 0 && len(av.only) == 0 {
		return c.cls.PoolBusy(c.pool.busy, c.pool.eligible)
	}
	from, to := 0, len(m.list)
	if pin != nil {
		from, to = m.ranks(pin.WorkerID)
	}
	return c.cls.PoolBusy(m.poolPass(c, from, to, pin, pinRank, av))
}

// poolPass counts the eligible and the busy targets among from..to for poolBusy, as the counts do for
// the whole fleet.
func (m *Machine) poolPass(c *classQueue, from, to int, pin *scoring.WorkerKey, pinRank bool, av avoid) (busy, eligible int) {
	for i := from; i < to; i++ {
		t := m.list[i]
		if pin != nil && !pinMatches(t.key, pin, pinRank) || m.skip(i, av) {
			continue
		}
		st := m.poolStanding(t, c.cls)
		if st&poolEligible != 0 {
			eligible++
		}
		if st&poolBusy != 0 {
			busy++
		}
	}
	return busy, eligible
}

// classHead returns class c's first live entry, dropping cancelled ones on the way.
func classHead(c *classQueue) *waiting {
	for c.q.Len() > 0 {
		w, _, _ := c.q.Peek()
		if !w.gone {
			return w
		}
		c.q.Pop()
	}
	return nil
}

// dispatchable is class c's head's turn: its cost, and whether its eligible pool has room by the
// class's rule (a blocked head blocks its class, not the others).
func (m *Machine) dispatchable(now time.Time, c *classQueue) drrCand {
	w := classHead(c)
	if w == nil {
		return drrCand{}
	}
	pin, pinRank := m.sessionPin(now, &w.req)
	if m.poolBusy(c, pin, pinRank, avoidOf(&w.req)) {
		return drrCand{}
	}
	return drrCand{cost: w.cost(), ok: true}
}

// popNext is one deficit-round-robin step over the class heads that can be served now: a class whose
// deficit covers its head's uncached tokens sends it; each visit in a ring pass adds the class's
// quantum; a class keeps its turn (carry) while credit is left. When no head is affordable after a
// pass, the fewest whole rounds that make one affordable are granted to every servable class at once
// (the same rounds keep the quanta's proportions) instead of looping. nil: nothing can be served.
func (m *Machine) popNext(now time.Time) *waiting {
	pq := &m.pq
	if pq.live == 0 {
		pq.carry = -1
		return nil
	}
	n := len(pq.classes)
	cands := pq.cands
	clear(cands)
	carried := pq.carry
	pq.carry = -1
	if carried >= 0 {
		c := &pq.classes[carried]
		cd := m.dispatchable(now, c)
		if cd.ok && cd.cost <= c.deficit {
			return m.popClass(carried)
		}
		cands[carried] = cd
	}
	for off := range n {
		i := (pq.cursor + off) % n
		c := &pq.classes[i]
		cd := cands[i]
		if i != carried {
			cd = m.dispatchable(now, c)
			cands[i] = cd
		}
		if !cd.ok {
			continue
		}
		if cd.cost <= c.deficit {
			return m.popClass(i) // carried credit is spent before a new quantum
		}
		c.deficit = satAdd(c.deficit, c.cls.Quantum)
		if cd.cost <= c.deficit {
			return m.popClass(i)
		}
	}
	rounds := uint64(math.MaxUint64)
	for i, cd := range cands {
		if cd.ok {
			c := &pq.classes[i]
			missing := cd.cost - min(cd.cost, c.deficit)
			rounds = min(rounds, (missing+c.cls.Quantum-1)/c.cls.Quantum)
		}
	}
	if rounds == math.MaxUint64 {
		return nil // every head is blocked
	}
	for i, cd := range cands {
		if cd.ok {
			c := &pq.classes[i]
			c.deficit = satAdd(c.deficit, satMul(c.cls.Quantum, rounds))
		}
	}
	for off := range n {
		i := (pq.cursor + off) % n
		if cd := cands[i]; cd.ok && cd.cost <= pq.classes[i].deficit {
			return m.popClass(i)
		}
	}
	return nil
}

// popClass sends class i's head: charged to its deficit, out of its stats; the ring's next pass starts
// after it, and it keeps the turn while credit is left.
func (m *Machine) popClass(i int) *waiting {
	pq := &m.pq
	c := &pq.classes[i]
	w, _, _ := c.q.Pop() // the live head dispatchable just saw
	pq.cursor = (i + 1) % len(pq.classes)
	c.deficit -= min(c.deficit, w.cost())
	m.unqueue(w)
	if c.st.Requests > 0 && c.deficit > 0 {
		pq.carry = i
	}
	return w
}

func satAdd(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

func satMul(a, b uint64) uint64 {
	if a != 0 && b > math.MaxUint64/a {
		return math.MaxUint64
	}
	return a * b
}

// drain releases waiting requests after capacity changed (a first token, an end, a worker joining or
// turning healthy, a new configuration): the minimum-workers gate first, then the queue one request at a
// time, each released request charged before the next check (pop while not every eligible worker is
// busy), the classes taking turns by deficit round robin. A request that waited longer than
// OverlapRefreshAfter has its overlap queried again.
func (m *Machine) drain(now time.Time) []Released {
	var rel []Released
	if !m.gateOpen && len(m.gate) > 0 && m.openGate() {
		gate := m.gate
		m.gate = nil
		for _, w := range gate {
			rel = m.admit(now, w, rel)
		}
	}
	for {
		w := m.popNext(now)
		if w == nil {
			break
		}
		pin, pinRank := m.sessionPin(now, &w.req)
		scores, grouped := w.scores, w.grouped
		if ra := m.cfg.OverlapRefreshAfter; ra > 0 && now.Sub(w.arrival) > ra && m.cfg.NeedsIndexer() {
			scores, grouped = m.requery(w.req.Local, w.scores)
		}
		delete(m.waitByID, w.req.ID)
		d, err := m.decide(now, &w.req, w.chain, w.isl, scores, grouped, pin, pinRank)
		d.Queued, d.ID, d.Ticket = now.Sub(w.arrival), w.req.ID, w.req.Ticket
		rel = append(rel, Released{Decision: d, Err: err})
	}
	return rel
}

// admit routes a request released from the minimum-workers gate: decided now, queued behind its class
// like any new arrival, or rejected at its class's limits.
func (m *Machine) admit(now time.Time, w *waiting, rel []Released) []Released {
	w.gated = false
	var scores []prefix.Score
	var grouped *prefix.Matches
	if m.cfg.NeedsIndexer() {
		scores, grouped = m.requery(w.req.Local, w.scores)
	}
	pin, pinRank := m.sessionPin(now, &w.req)
	if m.pq.on {
		ci, cached, wait := m.classify(&w.req, w.isl, scores, grouped, pin, pinRank)
		if wait {
			err := m.admitClass(ci)
			if err == nil {
				w.keep(scores, grouped)
				m.enqueue(w, ci, cached)
				return rel
			}
			delete(m.waitByID, w.req.ID)
			return append(rel, Released{Decision: Decision{ID: w.req.ID, Ticket: w.req.Ticket, Queued: now.Sub(w.arrival)}, Err: err})
		}
	}
	delete(m.waitByID, w.req.ID)
	d, err := m.decide(now, &w.req, w.chain, w.isl, scores, grouped, pin, pinRank)
	d.Queued, d.ID, d.Ticket = now.Sub(w.arrival), w.req.ID, w.req.Ticket
	return append(rel, Released{Decision: d, Err: err})
}

// requery reads the index again for a request leaving the gate or the queue, as a new decision reads
// it: in groups into the machine's scratch when the index answers in groups (nothing allocated at any
// fleet size), else as Scores into out's array.
func (m *Machine) requery(local []uint64, out []prefix.Score) ([]prefix.Score, *prefix.Matches) {
	if m.matcher != nil {
		m.matcher.Match(local, &m.sc.matches)
		return out[:0], &m.sc.matches
	}
	return m.index.FindMatches(local, out[:0]), nil
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
	w.gone = true // dropped from its heap when it reaches the head
	classHead(m.unqueue(w))
	return true
}

// QueueLen is the number of requests waiting in the queue (not at the minimum-workers gate).
func (m *Machine) QueueLen() int { return len(m.waitByID) - len(m.gate) }

// CancelAll releases every waiting request (queue and gate) with err: the owner is shutting down.
func (m *Machine) CancelAll(now time.Time, err error) []Released {
	rel := make([]Released, 0, len(m.waitByID))
	for id, w := range m.waitByID {
		m.Cancel(id)
		rel = append(rel, Released{Decision: Decision{ID: id, Ticket: w.req.Ticket, Queued: now.Sub(w.arrival)}, Err: err})
	}
	return rel
}

package sched

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/load"
	"github.com/kvroute/kvroute/scoring/prefix"
)

// Request is one routing decision's input. The machine reads its slices during the call and copies what
// it keeps (a request that waits keeps copies of Local, Chain and Scores).
type Request struct {
	// ID names the request for its lifecycle (prefill done, free). Required, unique while active.
	ID string
	// Local are the prompt's local block hashes; Chain their prefix chain (scoring.ChainHashes), the
	// blocks' keys in load tracking and the side indexes. A nil Chain is computed from Local.
	Local, Chain []uint64
	// ISL is the number of input tokens; at least len(Local) × block size is assumed.
	ISL int
	// Scores is the primary index's overlap for Local when Matched (the caller queried it outside the
	// machine's step); otherwise the machine queries its Index.
	Scores  []prefix.Score
	Matched bool
	// Matches, when not nil and Matched, is that overlap in the index's groups instead of Scores
	// (actors/indexer's Match). The machine reads it during the call only.
	Matches *prefix.Matches
	// Priority is nvext.agent_hints.priority / x-dynamo-request-priority (seconds of queue jump);
	// Strict is x-dynamo-request-strict-priority (absolute tier).
	Priority float64
	Strict   uint32
	// Pin names the worker for direct mode (or pins a request); PinRank pins its dp rank too.
	Pin     *scoring.WorkerKey
	PinRank bool
	// Override is the per-request router config override.
	Override *scoring.Override
	// OSL is the expected output length (nvext.agent_hints.osl), 0 when unknown.
	OSL int
	// Sequences is the request's n (sequences sharing its prefill), 0 or 1 for one.
	Sequences int
	// ReturnCosts asks for every candidate's overlap and cost (nvext return_routing).
	ReturnCosts bool
	// CostsTop, with ReturnCosts, keeps only the cheapest candidate of each of the CostsTop cheapest
	// workers, busy candidates left out (cheapestWorkers): what a picker's fallback endpoints need. 0
	// keeps every candidate.
	CostsTop int
	// Exclude lists workers not to route to (they failed this request before; migration).
	Exclude []uint64
	// Only, when not empty, lists the only workers the request may go to (a gateway's endpoint subset):
	// a decision reads it in O(its length), where the same subset as an exclusion list is as long as
	// the rest of the fleet.
	Only []uint64
	// Session is the X-Dynamo-Session-ID of the request ("" none); with session affinity on, a session's
	// requests go to the worker its first request went to while the binding lives.
	Session string
	// PolicyClass is the x-dynamo-meta-policy-class header ("" none): an explicit policy class by name,
	// or a policy family (classified further by the request's uncached ISL); see scoring/policy.
	PolicyClass string
	// Ticket is the caller's handle for the request, returned with its Released when it waited.
	Ticket any
}

// Decision is where a request goes; the machine has already charged that worker.
type Decision struct {
	ID            string
	Worker        scoring.WorkerKey
	Tag           any // the worker's Tag
	OverlapBlocks uint32
	CachedTokens  int
	Cost          float64
	ISL           int
	Blocks        int
	// Candidates are every candidate's overlap and cost, when asked for.
	Candidates []scoring.CandidateCost
	// Queued is how long the request waited (queue or minimum-workers gate).
	Queued time.Duration
	// Ticket is the request's Ticket.
	Ticket any
}

// Released is a waiting request's outcome, produced by the call that released it: a Decision (already
// charged), or Err when it failed (no eligible worker left, the minimum fleet never came, cancelled).
type Released struct {
	Decision
	Err error
}

// scratch is the per-decision scratch, reused by every decision of the machine.
type scratch struct {
	marks   []EventMark // EventHealth's
	evict   []float64   // room.go's charges
	chain   []uint64
	scores  []prefix.Score
	matches prefix.Matches // the machine's own Match, when its index answers in groups
	slots   []slotRows     // groups.go: slot → target maps of the index's keys tables
	side    []prefix.Score
	merged  []prefix.Score
	// calibrated says the last choice took the kvroute cost, and chosenK is the chosen worker's active
	// blocks with the request's own (for calibration when it is committed).
	calibrated bool
	chosenK    float64
	now        int64 // the decision's time (ns): the drain of a prefill in progress
	osl        int   // the request's expected output tokens (0: unknown), for the decode charge
	cands      []scoring.Candidate
	costs      []scoring.CandidateCost // a decision's costs, when its request asks for them
	tgts       []*target
	ov         []uint32
	most       int             // overlaps: the target with the largest overlap, -1 when none
	mostAt     int             // overlaps: the index in scores of most's score
	sole       bool            // overlaps: no other worker listed has as many blocks as most
	raised     []raisedOverlap // overlaps: targets whose grouped overlap a prediction raised
	rows       []scoring.LoadRow
	caps       []scoring.Capacity
	targetOf   []int32
	ties       []uint64
	mask       []uint8 // calibrated: the candidates' standing when some are filtered (eligibility)
	visit      []int32 // calibrated: the only targets to cost, when a pin or a short only list names them
	// calibrated's vector kernel (vectorCosts): the targets' costs and active blocks with the request's,
	// and the projections of those with active requests.
	cost, k, proj []float64
	active        []uint8 // a bitmap of the lines with active requests
	// memo[j] is the position of the worker the j-th overlap score named last time (-1: none); reset
	// whenever positions change.
	memo []posMemo
	// excl is the bitmap of target positions a long exclusion list names (skip), with the list it was
	// built from; dropped when positions change and when a caller's request comes in (Route, Query:
	// the caller may reuse the list's array), while lists the machine holds (a waiting request's) are
	// never written.
	excl exclusion
}

type exclusion struct {
	src, only []uint64
	valid     bool
	bits      []uint64
}

type posMemo struct {
	key scoring.WorkerKey
	pos int32
}

// Route decides where req goes at now and charges that worker. When the request must wait (the queue
// threshold is reached for every eligible worker, requests already wait, or the minimum fleet has not
// joined) it is parked and queued is true: its Released comes back from a later call.
func (m *Machine) Route(now time.Time, req *Request) (d Decision, queued bool, err error) {
	m.sc.excl.valid = false
	if req.ID == "" {
		return d, false, fmt.Errorf("%w: missing request id", ErrBadRequest)
	}
	if m.active[req.ID] != nil || m.waitByID[req.ID] != nil {
		return d, false, fmt.Errorf("%w: %q", ErrDuplicateRequest, req.ID)
	}
	if len(req.Session) > MaxSessionIDBytes {
		return d, false, fmt.Errorf("%w: session id longer than %d bytes", ErrBadRequest, MaxSessionIDBytes)
	}
	if req.Override != nil {
		if _, err := m.cfg.WithOverride(req.Override); err != nil {
			return d, false, fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
	}
	chain, isl := m.chainOf(req)
	if !m.gateOpen && !m.openGate() {
		m.park(now, req, chain, isl)
		return d, true, nil
	}
	scores, grouped, pin, pinRank := m.prepare(now, req)
	if m.pq.on {
		if queued, err = m.queueOrReject(now, req, chain, isl, scores, grouped, pin, pinRank); queued || err != nil {
			return d, queued, err
		}
	}
	d, err = m.decide(now, req, chain, isl, scores, grouped, pin, pinRank)
	return d, false, err
}

// chainOf is req's prefix chain (computed into scratch when not given) and its ISL, at least its full
// blocks' tokens.
func (m *Machine) chainOf(req *Request) ([]uint64, int) {
	chain := req.Chain
	if chain == nil && len(req.Local) > 0 {
		m.sc.chain = scoring.ChainHashes(m.sc.chain[:0], req.Local)
		chain = m.sc.chain
	}
	return chain, max(req.ISL, len(req.Local)*m.cfg.BlockSize)
}

// prepare is what a decision reads before choosing: due predicted-index expiry, the overlap (the
// caller's, or the index's; in groups when grouped is not nil, else scores), and the pin (the request's,
// or its session's).
func (m *Machine) prepare(now time.Time, req *Request) (scores []prefix.Score, grouped *prefix.Matches, pin *scoring.WorkerKey, pinRank bool) {
	m.pred.expireDue(now)
	scores = req.Scores
	switch {
	case req.Matched:
		grouped = req.Matches
	case !m.cfg.NeedsIndexer():
	case m.matcher != nil:
		m.matcher.Match(req.Local, &m.sc.matches)
		grouped = &m.sc.matches
	default:
		m.sc.scores = m.index.FindMatches(req.Local, m.sc.scores[:0])
		scores = m.sc.scores
	}
	pin, pinRank = m.sessionPin(now, req)
	return scores, grouped, pin, pinRank
}

// sessionPin is the pin a request routes under: its own, else its session's bound worker (hard
// affinity) when that worker is still routable for it.
func (m *Machine) sessionPin(now time.Time, req *Request) (*scoring.WorkerKey, bool) {
	if req.Pin != nil || req.Session == "" || !m.sess.on() {
		return req.Pin, req.PinRank
	}
	k, ok := m.sess.lookup(now, req.Session)
	if !ok {
		return nil, false
	}
	if t := m.find(k); t == nil || !t.healthy || avoidOf(req).names(k.WorkerID) {
		return nil, false
	}
	return &k, true
}

// decide selects a worker for req with the given overlap (scores, or grouped when not nil) and commits
// the decision.
func (m *Machine) decide(now time.Time, req *Request, chain []uint64, isl int, scores []prefix.Score,
	grouped *prefix.Matches, pin *scoring.WorkerKey, pinRank bool) (Decision, error) {
	m.sc.now = now.UnixNano()
	t, sel, reuse, err := m.choose(req, chain, isl, scores, grouped, pin, pinRank)
	if err != nil {
		return Decision{}, err
	}
	return m.commit(now, t, req, chain, isl, sel, reuse)
}

// Query is a dry decision: where req would go now, with nothing charged, recorded or bound (the
// standalone API's query-only routing, and the scenarios' sampling). It never waits.
func (m *Machine) Query(now time.Time, req *Request) (Decision, error) {
	m.sc.excl.valid = false
	if req.Override != nil {
		if _, err := m.cfg.WithOverride(req.Override); err != nil {
			return Decision{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
	}
	chain, isl := m.chainOf(req)
	scores, grouped, pin, pinRank := m.prepare(now, req)
	m.sc.now = now.UnixNano()
	t, sel, _, err := m.choose(req, chain, isl, scores, grouped, pin, pinRank)
	if err != nil {
		return Decision{}, err
	}
	d := Decision{ID: req.ID, Worker: t.key, Tag: t.w.Tag, OverlapBlocks: sel.Overlap, CachedTokens: sel.CachedTokens,
		Cost: sel.Cost, ISL: isl, Blocks: len(req.Local), Ticket: req.Ticket}
	if req.ReturnCosts {
		d.Candidates = m.candidatesOf(sel.Costs, req.CostsTop)
	}
	return d, nil
}

// candidatesOf is a decision's Candidates: a copy of every candidate's cost, or with top > 0 the
// cheapest workers' (cheapestWorkers); costs, written into the machine's buffer (choose), is kept as
// that buffer for the next decision. At 8,192 workers a decision returning its costs, the picker's
// sort of them included, took 0.60–0.68 ms and 2.0 MB; 0.24–0.29 ms and 0.66 MB with every cost (the
// costs now in the machine's buffer, copied once), 0.13 ms and 1.7 KB with the 17 cheapest workers'
// chosen here from every row, 24–36 µs with them chosen inside the kvroute cost's loop (topCosts;
// costs then holds those rows alone, and this choice keeps them as they are).
func (m *Machine) candidatesOf(costs []scoring.CandidateCost, top int) []scoring.CandidateCost {
	m.sc.costs = costs[:0]
	if top <= 0 {
		return append([]scoring.CandidateCost(nil), costs...)
	}
	return cheapestWorkers(costs, top)
}

// cheapestWorkers returns, cheapest first, the cheapest candidate of each of the n cheapest workers,
// busy candidates left out; equal costs keep the candidates' order, as a stable sort of costs would,
// and NaN costs come last.
func cheapestWorkers(costs []scoring.CandidateCost, n int) []scoring.CandidateCost {
	top := newTopCosts(n, nil)
	for _, c := range costs {
		if !c.Busy && top.worth(c.Cost) {
			top.offer(c)
		}
	}
	return top.rows
}

// topCosts collects cheapestWorkers' rows from candidates offered in order. A cost loop asks worth
// before it builds a row, so a decision over thousands of candidates writes a handful of rows.
type topCosts struct {
	n    int
	rows []scoring.CandidateCost
}

// newTopCosts returns an empty collection of n rows in buf's array (a new one when it is too small).
func newTopCosts(n int, buf []scoring.CandidateCost) topCosts {
	if cap(buf) < n+1 {
		buf = make([]scoring.CandidateCost, 0, n+1)
	}
	return topCosts{n: n, rows: buf[:0]}
}

// worth reports whether a candidate of this cost can enter: not cheaper than the n-th is out, also as
// its worker's cheaper candidate (that worker's row is no dearer than the n-th).
func (t *topCosts) worth(cost float64) bool {
	return len(t.rows) < t.n || cheaper(cost, t.rows[t.n-1].Cost)
}

// offer enters c (worth said it may), replacing its worker's dearer row.
func (t *topCosts) offer(c scoring.CandidateCost) {
	if j := slices.IndexFunc(t.rows, func(r scoring.CandidateCost) bool { return r.Worker.WorkerID == c.Worker.WorkerID }); j >= 0 {
		if !cheaper(c.Cost, t.rows[j].Cost) {
			return
		}
		t.rows = slices.Delete(t.rows, j, j+1)
	}
	at := len(t.rows)
	for at > 0 && cheaper(c.Cost, t.rows[at-1].Cost) {
		at--
	}
	t.rows = slices.Insert(t.rows, at, c)
	if len(t.rows) > t.n {
		t.rows = t.rows[:t.n]
	}
}

// cheaper orders costs with NaN last.
func cheaper(a, b float64) bool { return a < b || (math.IsNaN(b) && !math.IsNaN(a)) }

// choose selects the target for req: the one-pass argmin in the common case, else candidates and the
// configured selection. reuse is the request's assume_kv_reuse.
func (m *Machine) choose(req *Request, chain []uint64, isl int, scores []prefix.Score, grouped *prefix.Matches,
	pin *scoring.WorkerKey, pinRank bool) (t *target, sel scoring.Decision, reuse bool, err error) {
	cfg := m.cfg
	// The largest device overlap, and whether lower tiers hold more (the candidates then carry those
	// overlaps for the cost's host and disk weights; the one-pass rows carry the device overlap only). One
	// pass for both: predictions raise device overlaps only, so the merged scores are tiered when the
	// engines' are.
	var most uint32
	var tiered bool
	if grouped != nil {
		most, tiered = grouped.Most()
		if tiered { // lower tiers are weighed per worker
			scores, grouped = m.ungroup(scores, grouped), nil
		}
	} else {
		most, tiered = prefix.MostOf(scores)
	}
	src := overlap{scores: scores, grouped: grouped}
	primary := scores // the engines' own report, before predictions merge in
	if m.pred.on() {
		if side := m.pred.scores(chain, most, &m.sc.side); len(side) > 0 {
			if grouped != nil {
				src.side = side // merged by overlaps
			} else {
				src.scores = maxScores(scores, side, &m.sc.merged)
			}
		}
	}
	// Costs go into the machine's buffer: a decision's Candidates are a copy (candidatesOf).
	sreq := scoring.Request{ISL: isl, Override: req.Override, ReturnCosts: req.ReturnCosts, CostsBuf: m.sc.costs, CostsTop: req.CostsTop}
	if pin != nil {
		sreq.Pin, sreq.Pinned, sreq.PinRank = *pin, true, pinRank
	}
	reuse = cfg.AssumeKVReuse
	if req.Override != nil && req.Override.AssumeKVReuse != nil {
		reuse = *req.Override.AssumeKVReuse
	}
	m.sc.calibrated = m.useCalibrated(req)
	if m.sc.calibrated {
		m.sc.osl = req.OSL
		m.rr++
		t, sel, err = m.calibrated(&sreq, src, primary, tiered, chain, isl, reuse, avoidOf(req))
		return t, sel, reuse, err
	}
	if am, ok := scoring.NewArgmin(&sreq, cfg, m.rng); ok && m.selector == nil && !tiered {
		// The common case in one pass over the targets, no candidate slice (argmin).
		m.rr++
		t, sel, err = m.argmin(&am, src, chain, reuse, avoidOf(req))
		return t, sel, reuse, err
	}
	cands := m.candidates(src, chain, reuse, avoidOf(req), tiered)
	sreq.RoundRobin = m.rr
	m.rr++
	if m.selector != nil {
		sel, err = m.selector.Select(sreq, cands, m.rng)
	} else {
		sel, err = scoring.Select(sreq, cands, cfg, m.rng)
	}
	if err != nil {
		return nil, sel, reuse, err
	}
	return m.sc.tgts[sel.Index], sel, reuse, nil
}

// maxScores merges two overlap lists into dst, keeping the larger overlap per worker (predict-on-route:
// the primary index and the side index of recent decisions): a's scores in their order, then b's
// workers that a lacks.
func maxScores(a, b []prefix.Score, dst *[]prefix.Score) []prefix.Score {
	out := append((*dst)[:0], a...)
	for _, s := range b {
		found := false
		for i := range out {
			if out[i].Worker == s.Worker {
				out[i].Blocks = max(out[i].Blocks, s.Blocks)
				found = true
				break
			}
		}
		if !found {
			out = append(out, s)
		}
	}
	*dst = out
	return out
}

// commit performs a decision: charges the worker, records approximate-mode and predicted blocks, the
// pending-events mark and the session binding, and builds the answer.
func (m *Machine) commit(now time.Time, t *target, req *Request, chain []uint64, isl int, sel scoring.Decision, reuse bool) (Decision, error) {
	var trackPf *bool
	if req.Override != nil {
		trackPf = req.Override.TrackPrefillTokens
	}
	u := max(isl-int(sel.Overlap)*m.cfg.BlockSize, 0) // the request's uncached tokens there
	m.observeRouted(now, req.ID, t, u)
	if err := t.t.AddRequest(load.Request{ID: req.ID, SeqHashes: chain, ISL: isl, OverlapBlocks: sel.Overlap,
		ExpectedOutputTokens: req.OSL, Sequences: req.Sequences, AssumeKVReuse: &reuse, TrackPrefillTokens: trackPf, Now: now}); err != nil {
		return Decision{}, err
	}
	m.active[req.ID] = t
	m.ageRouted(t, req)
	m.decodeRouted(t, req.ID, isl, u, now.UnixNano())
	m.publish(t)
	if trackPf == nil && m.cfg.TrackPrefillTokens || trackPf != nil && *trackPf {
		m.pfPush(t, req.ID, uint64(u), now.UnixNano())
	}
	if m.observe != nil {
		ev := LoadEvent{Kind: LoadAdd, RequestID: req.ID, Worker: t.key, SeqHashes: append([]uint64(nil), chain...), ISL: isl,
			OverlapBlocks: sel.Overlap, ExpectedOutputTokens: req.OSL, AssumeKVReuse: reuse, TrackPrefillTokens: trackPf}
		m.observe(ev)
	}
	if (!m.cfg.UseKVEvents || t.approx) && m.cfg.NeedsIndexer() {
		m.recordApprox(now, t.key, req.Local, chain)
	}
	m.pred.record(now, t.key, chain, int(sel.Overlap))
	if int(sel.Overlap) < len(req.Local) && t.pendingSince == 0 {
		// New full blocks: the engine must publish a BlockStored for them (a fully cached or sub-block
		// prompt publishes nothing, so it proves nothing about the stream).
		t.pendingSince = now.UnixNano()
	}
	if req.Session != "" && m.sess.on() {
		m.sess.bind(now, req.Session, t.key)
		if m.observe != nil {
			m.observe(LoadEvent{Kind: LoadBind, RequestID: req.Session, Worker: t.key})
		}
	}
	d := Decision{ID: req.ID, Worker: t.key, Tag: t.w.Tag, OverlapBlocks: sel.Overlap, CachedTokens: sel.CachedTokens,
		Cost: sel.Cost, ISL: isl, Blocks: len(req.Local), Ticket: req.Ticket}
	if req.ReturnCosts {
		d.Candidates = m.candidatesOf(sel.Costs, req.CostsTop)
	}
	return d, nil
}

// chainBlocks are a routed prompt's blocks from index from on, keyed as the machine predicts them (engine
// hash = prefix chain), and the parent of the first; nil when none is new.
func chainBlocks(local, chain []uint64, from int) (blocks []prefix.Block, parent uint64) {
	if from >= len(chain) {
		return nil, 0
	}
	blocks = make([]prefix.Block, 0, len(chain)-from)
	for i := from; i < len(chain); i++ {
		blocks = append(blocks, prefix.Block{EngineHash: chain[i], LocalHash: local[i]})
	}
	if from > 0 {
		parent = chain[from-1]
	}
	return blocks, parent
}

// recordApprox writes a routed prompt into the index for the chosen worker (approximate mode), with
// engine hashes = the blocks' prefix chain, and removes what the per-worker capacity evicts.
func (m *Machine) recordApprox(now time.Time, k scoring.WorkerKey, local, chain []uint64) {
	from, evicted := m.approx.Record(k, chain, now)
	if blocks, parent := chainBlocks(local, chain, from); blocks != nil {
		m.index.Store(k, parent, from > 0, blocks)
	}
	if len(evicted) > 0 {
		m.index.Remove(k, evicted)
	}
}

// avoid is the workers a request may not go to: every one exclude names and, when only is not empty,
// every one only does not name.
type avoid struct{ exclude, only []uint64 }

// avoidOf is req's avoid.
func avoidOf(req *Request) avoid { return avoid{exclude: req.Exclude, only: req.Only} }

// names reports whether a leaves worker id out.
func (a avoid) names(id uint64) bool {
	return slices.Contains(a.exclude, id) || len(a.only) > 0 && !slices.Contains(a.only, id)
}

// filtering reports whether some target may be left out of a decision (excluded workers, an only list,
// or any target unhealthy), so the common case skips the per-target check.
func (m *Machine) filtering(av avoid) bool {
	return len(av.exclude) > 0 || len(av.only) > 0 || m.unhealthy > 0
}

// skip reports whether target i is left out: its worker is avoided or it is unhealthy. An only list,
// or an exclusion list of more than shortExclude workers, is read through a bitmap of target positions
// built once for it (excluded): a gateway's endpoint subset excludes every other worker, and a scan of that list per
// target made a decision excluding half of 8,192 workers take 15 ms (BenchmarkRouteExcluding; 0.12 ms
// now).
func (m *Machine) skip(i int, av avoid) bool {
	if m.unhealthy > 0 && !m.list[i].healthy { // the count first: a pass reads no target it needs not
		return true
	}
	if len(av.only) == 0 && len(av.exclude) <= shortExclude {
		return slices.Contains(av.exclude, m.tmpl[i].worker.WorkerID)
	}
	return m.excluded(av)[i>>6]&(1<<(i&63)) != 0
}

// shortExclude is the longest exclusion list skip scans.
const shortExclude = 8

// excluded returns the bitmap of the target positions av leaves out, built when av's lists are not
// those the scratch's bitmap was built from: from an only list, every position but its workers'.
func (m *Machine) excluded(av avoid) []uint64 {
	e := &m.sc.excl
	if e.valid && sameList(e.src, av.exclude) && sameList(e.only, av.only) {
		return e.bits
	}
	n := (len(m.list) + 63) >> 6
	e.src, e.only, e.valid, e.bits = av.exclude, av.only, true, slices.Grow(e.bits[:0], n)[:n]
	mark := func(id uint64, on bool) {
		from, to := m.ranks(id)
		for i := from; i < to; i++ {
			if on {
				e.bits[i>>6] |= 1 << (i & 63)
			} else {
				e.bits[i>>6] &^= 1 << (i & 63)
			}
		}
	}
	if len(av.only) > 0 {
		for i := range e.bits {
			e.bits[i] = ^uint64(0)
		}
		for _, id := range av.only {
			mark(id, false)
		}
	} else {
		clear(e.bits)
	}
	for _, id := range av.exclude {
		mark(id, true)
	}
	return e.bits
}

// sameList reports whether a and b are the same list: the same array and length.
func sameList(a, b []uint64) bool { return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0]) }

// argmin is the decision of scoring.Argmin over every routable target: in the common case (the linear
// policy) by the vector kernel (linearArgmin) or as compact load rows (and capacities, with busy
// thresholds) in one cost loop, otherwise one stack candidate at a time.
func (m *Machine) argmin(am *scoring.Argmin, src overlap, chain []uint64, reuse bool, av avoid) (*target, scoring.Decision, error) {
	filter := m.filtering(av)
	var targetOf []int32 // row → target index when targets are left out
	switch {
	case am.LoadOnly() && haveCostKernel && m.linearArgmin(am, src, chain, reuse, filter, av):
	case am.LoadOnly():
		var rows []scoring.LoadRow
		rows, targetOf = m.loadRows(src, chain, reuse, filter, av)
		var caps []scoring.Capacity
		if am.ReadsCapacity() {
			caps = m.capacities(targetOf)
		}
		am.OfferLoads(rows, caps)
	default:
		am.Ties(m.sc.ties)
		m.offer(am, src, chain, reuse, filter, av)
	}
	d, err := am.Decision()
	if t := am.Ties(nil); t != nil {
		m.sc.ties = t
	}
	if err != nil {
		return nil, d, err
	}
	if targetOf != nil {
		d.Index = int(targetOf[d.Index])
	}
	t := m.list[d.Index]
	d.Worker = t.key
	return t, d, nil
}

// linearArgmin offers every target left in to am (LoadOnly) by their costs from the vector kernel
// (linearCosts) and the vector argmin, the targets left out, and with busy thresholds those marked busy
// (busy.go), at +Inf; false, with nothing offered, when no target is left in or none is eligible or the
// least cost is NaN or infinite (the scalar loop's comparisons and errors decide those). The loop over
// load rows took 77-86 us a decision at 8,192 workers (BenchmarkRouteOneUnhealthy, dynamo).
func (m *Machine) linearArgmin(am *scoring.Argmin, src overlap, chain []uint64, reuse, filter bool, av avoid) bool {
	ov := m.overlaps(src)
	cost := m.linearCosts(am.Linear(), ov, chain, reuse)
	in := len(cost)
	switch {
	case filter && shortVisits && len(av.only) == 0 && len(av.exclude) <= shortExclude:
		in -= m.infLeftOut(cost, av.exclude)
	case filter:
		notEligible(m.leftOutMask(av), func(i int) { cost[i], in = math.Inf(1), in-1 })
	}
	eligible := in
	if am.ReadsCapacity() { // the marks are the thresholds the Argmin reads: the machine's configuration
		eachBit(m.over, len(cost), func(i int) {
			if !filter || !m.skip(i, av) {
				cost[i], eligible = math.Inf(1), eligible-1
			}
		})
	}
	if eligible == 0 {
		return false
	}
	tied, ok := vectorArgmin(cost, cost, m.sc.ties) // k = cost: every target at the least cost
	m.sc.ties = tied[:0]
	if !ok || math.IsInf(cost[tied[0]], 0) {
		return false
	}
	am.OfferTied(in, eligible, cost[tied[0]], tied, ov)
	return true
}

// infLeftOut sets the cost of every target the unhealthy workers or exclude (a short list) leave out to
// +Inf, each once (eachLeftOut), and returns how many, without a pass over every target (with one
// unhealthy worker among 8,192 the pass over the mask took 4-8 us of a 14-20 us decision).
func (m *Machine) infLeftOut(cost []float64, exclude []uint64) (out int) {
	m.eachLeftOut(exclude, func(i int) { cost[i], out = math.Inf(1), out+1 })
	return out
}

// loadRows writes a row of cost inputs for every target left in, in one pass over the load lines and
// the overlaps (overlaps). Row i is target i unless targets are left out (filter); then the others' rows
// are moved up, and targetOf maps a row to its target.
func (m *Machine) loadRows(src overlap, chain []uint64, reuse, filter bool, av avoid) (rows []scoring.LoadRow, targetOf []int32) {
	ov := m.overlaps(src)
	rows = slices.Grow(m.sc.rows[:0], len(m.lines))[:len(m.lines)]
	for i := range rows {
		l := &m.lines[i]
		r := &rows[i]
		r.Prefill, r.Decode = l.prefill, l.decode
		r.Additional, r.Overlap, r.Requests = m.additional(i, l.active, chain, reuse), ov[i], l.active
	}
	m.sc.rows = rows
	if !filter {
		return rows, nil
	}
	mask := m.leftOutMask(av)
	targetOf = m.sc.targetOf[:0]
	for i := range rows {
		if mask[i] == candEligible {
			rows[len(targetOf)] = rows[i]
			targetOf = append(targetOf, int32(i))
		}
	}
	m.sc.targetOf = targetOf
	return rows[:len(targetOf)], targetOf
}

// leftOutMask is, by target position, candLeftOut for the targets av or their health leave out and
// candEligible for the rest. When the only filters are the unhealthy targets and a few excluded
// workers, those are marked from their lists (markLeftOut), not asked of each target: an unhealthy
// worker in a fleet of 8,192 made a decision on Dynamo's cost 40 % slower (BenchmarkRouteOneUnhealthy).
func (m *Machine) leftOutMask(av avoid) []uint8 {
	mask := slices.Grow(m.sc.mask[:0], len(m.list))[:len(m.list)]
	m.sc.mask = mask
	if shortVisits {
		m.markAvoided(mask, av)
		return mask
	}
	for i := range mask {
		mask[i] = candEligible
		if m.skip(i, av) {
			mask[i] = candLeftOut
		}
	}
	return mask
}

// capacities writes the capacity of every row's target (busy thresholds); targetOf as loadRows.
func (m *Machine) capacities(targetOf []int32) []scoring.Capacity {
	n := len(m.list)
	if targetOf != nil {
		n = len(targetOf)
	}
	caps := slices.Grow(m.sc.caps[:0], n)[:n]
	for k := range caps {
		i := k
		if targetOf != nil {
			i = int(targetOf[k])
		}
		m.capacity(&caps[k], i)
	}
	m.sc.caps = caps
	return caps
}

// offer offers every target left in to am as a candidate, one at a time.
func (m *Machine) offer(am *scoring.Argmin, src overlap, chain []uint64, reuse, filter bool, av avoid) {
	ov := m.overlaps(src)
	capacity := am.ReadsCapacity()
	var c scoring.Candidate
	for i := range m.list {
		if filter && m.skip(i, av) {
			continue
		}
		m.fillLoad(&c, i, ov[i], chain, reuse)
		if capacity {
			m.capacity(&c.Capacity, i)
		}
		am.Offer(i, &c)
	}
}

// overlaps scatters the overlap into a slice by target index. m.sc.most is the target with the largest
// (the first in target order among equals), -1 when none, and m.sc.sole says that no other worker the
// overlap lists, a target or not, has as many blocks. With groups, the side index's predictions are
// merged here as maxScores merges them into Scores, and m.sc.raised keeps what they replaced.
func (m *Machine) overlaps(src overlap) []uint32 {
	n := len(m.list)
	ov := slices.Grow(m.sc.ov[:0], n)[:n]
	clear(ov)
	t := overlapTop{at: -1}
	atJ := -1
	scores := src.scores
	if src.grouped != nil {
		m.groupOverlaps(src.grouped, ov, &t)
		scores = src.grouped.Scores
	}
	// The index lists workers in an order that rarely changes between decisions, so the position found
	// for the j-th score last time is checked first (one key compare) before the table is probed.
	memo := m.sc.memo
	for j := range scores {
		b := scores[j].Blocks
		t.listed(b, 1)
		k := scoring.WorkerKey(scores[j].Worker)
		var i int
		if j < len(memo) && memo[j].key == k {
			i = int(memo[j].pos)
		} else {
			var ok bool
			if i, ok = m.pos.find(k); !ok {
				i = -1
			}
			if j < len(memo) {
				memo[j] = posMemo{key: k, pos: int32(i)}
			} else if j == len(memo) {
				memo = append(memo, posMemo{key: k, pos: int32(i)})
			}
		}
		if i < 0 {
			continue
		}
		ov[i] = b
		if t.target(b, i) {
			atJ = j
		}
	}
	m.sc.memo = memo
	m.sc.raised = m.sc.raised[:0]
	for _, s := range src.side {
		// Predictions are longer than anything the primary lists (their floor), so a worker the primary
		// also lists is never counted twice at the top.
		b := s.Blocks
		i, ok := m.pos.find(scoring.WorkerKey(s.Worker))
		if ok && b <= ov[i] {
			continue
		}
		t.listed(b, 1)
		if !ok {
			continue
		}
		m.sc.raised = append(m.sc.raised, raisedOverlap{target: i, primary: ov[i]})
		ov[i] = b
		t.target(b, i)
	}
	m.sc.ov = ov
	if src.grouped != nil {
		atJ = -1 // an index into grouped.Scores, not into any list a caller holds
	}
	m.sc.most, m.sc.mostAt = t.at, atJ
	m.sc.sole = t.at >= 0 && t.most == t.top && t.tops == 1
	return ov
}

// overlapTop is what overlaps keeps of the largest overlaps as it scatters them: the holder (most
// blocks among the targets, the first in target order among equals; at -1 when none) and the largest
// overlap of every listed worker, a target or not, with how many have it.
type overlapTop struct {
	most uint32
	at   int
	top  uint32
	tops int
}

// listed counts n listed workers with b blocks.
func (t *overlapTop) listed(b uint32, n int) {
	if b > t.top {
		t.top, t.tops = b, n
	} else if b == t.top {
		t.tops += n
	}
}

// target offers target i with b blocks as the holder and reports whether it became the holder.
func (t *overlapTop) target(b uint32, i int) bool {
	if b > t.most || b == t.most && i < t.at {
		t.most, t.at = b, i
		return true
	}
	return false
}

// candidates builds one Candidate per routable target: overlap (per tier when tiered), load plus this
// request's additional blocks, capacity. m.sc.tgts[i] is candidate i's target.
func (m *Machine) candidates(src overlap, chain []uint64, reuse bool, av avoid, tiered bool) []scoring.Candidate {
	ov := m.overlaps(src)
	cands := m.sc.cands[:0]
	tgts := m.sc.tgts[:0]
	filter := m.filtering(av)
	for i := range m.list {
		if filter && m.skip(i, av) {
			continue
		}
		cands = append(cands, scoring.Candidate{})
		c := &cands[len(cands)-1]
		tm := &m.tmpl[i]
		c.Worker, c.Device = tm.worker, tm.device
		m.capacity(&c.Capacity, i)
		m.fillLoad(c, i, ov[i], chain, reuse)
		tgts = append(tgts, m.list[i])
	}
	if tiered {
		for _, sco := range src.scores { // tiered overlaps are never grouped (choose)
			if sco.Host|sco.Disk == 0 {
				continue
			}
			k := scoring.WorkerKey(sco.Worker)
			for j := range cands {
				if cands[j].Worker == k {
					cands[j].Overlap.Host, cands[j].Overlap.Disk = sco.Host, sco.Disk
				}
			}
		}
	}
	m.sc.cands, m.sc.tgts = cands, tgts
	return cands
}

// fillLoad writes what the cost of target i reads: device overlap ov, the load and the request's
// additional blocks, the in-flight count.
func (m *Machine) fillLoad(c *scoring.Candidate, i int, ov uint32, chain []uint64, reuse bool) {
	l := &m.lines[i]
	additional := m.additional(i, l.active, chain, reuse)
	c.Overlap.Device, c.InFlight = ov, l.active
	c.Load.Known, c.Load.ActiveRequests, c.Load.AdditionalBlocks = true, l.active, additional
	c.Load.ActivePrefillTokens, c.Load.ActiveDecodeBlocks = l.prefill, l.decode
}

// additional is the request's blocks (chain: their prefix chain) not already active on target i, which
// has active requests in flight.
func (m *Machine) additional(i int, active uint32, chain []uint64, reuse bool) uint64 {
	if !reuse || active == 0 || len(chain) == 0 {
		return uint64(len(chain))
	}
	// Only a worker with active requests can already hold some of this prompt's blocks.
	return m.list[i].t.Projection(chain, true)
}

// capacity writes target i's capacity: its registration's, else what it reported, and its KV usage.
func (m *Machine) capacity(cp *scoring.Capacity, i int) {
	t, tm := m.list[i], &m.tmpl[i]
	cp.TotalKVBlocks, cp.MaxNumBatchedTokens = tm.totalKV, tm.maxBatched
	cp.KVUsedBlocks, cp.KVUsedKnown = 0, t.kvKnown
	if t.kvKnown {
		cp.KVUsedBlocks = t.kvUsed
	}
}

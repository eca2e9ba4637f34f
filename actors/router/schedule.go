package router

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvroute/kvroute/actors/indexer"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/load"
	"github.com/kvroute/kvroute/scoring/prefix"
	"github.com/kvroute/kvroute/scoring/queue"
	"github.com/kvroute/kvroute/workers/registry"
)

// Errors of the request path, as sentinels the HTTP edge maps to statuses.
var (
	// ErrUnknownRequest: prefill_done or free for an id that is not active (never routed, already freed,
	// or expired).
	ErrUnknownRequest = errors.New("router: unknown request id")
	// ErrDuplicateRequest: Route with an id that is already active.
	ErrDuplicateRequest = errors.New("router: request id already active")
	// ErrBadRequest: a request the router cannot route as given (no tokens, a bad pin).
	ErrBadRequest = errors.New("router: bad route request")
)

// RouteRequest is one routing decision's input.
type RouteRequest struct {
	// ID names the request for its lifecycle (prefill done, free). Required, unique while active.
	ID string
	// Tokens are the routing tokens (with image positions already expanded to pad values). Ignored when
	// Local is given.
	Tokens []uint32
	// Local are precomputed local block hashes (the standalone API's block_hashes, or the legacy
	// block_mm_infos hashing); ISL must then be given.
	Local []uint64
	ISL   int
	// LoraName and CacheNamespace change the block-hash seed (spec/hashing.md §3). CacheNamespace is the
	// cache_salt the request's engine hashes its blocks with; the workers' salted blocks are re-keyed with
	// the salt their events carry, so only requests of the same namespace match them.
	LoraName       string
	CacheNamespace string
	// Priority is nvext.agent_hints.priority / x-dynamo-request-priority (seconds of queue jump);
	// Strict is x-dynamo-request-strict-priority (absolute tier).
	Priority float64
	Strict   uint32
	// Pin names the worker for direct mode (or pins a request); PinRank pins its dp rank too.
	Pin     *scoring.WorkerKey
	PinRank bool
	// Override is the per-request router config override.
	Override *scoring.Override
	// ExpectedOutputTokens (nvext.agent_hints.osl), 0 when unknown.
	ExpectedOutputTokens int
	// ReturnCosts asks for every candidate's overlap and cost (nvext return_routing).
	ReturnCosts bool
	// Exclude lists workers not to route to (they failed this request before; migration).
	Exclude []uint64
}

// RouteResult is what Route decided.
type RouteResult struct {
	Worker        scoring.WorkerKey
	Spec          registry.Spec
	OverlapBlocks uint32
	CachedTokens  int
	Cost          float64
	ISL           int
	Blocks        int
	// Candidates are every candidate's overlap and cost, when asked for.
	Candidates []scoring.CandidateCost
	// Queued is how long the request waited in the queue.
	Queued time.Duration
}

// target is one (worker, dp rank) the scheduler routes to, with its load tracker.
//
// The tracker is written under mu by whichever request goroutine routes to, or ends a request on, this
// worker, not by a mailbox: a decision must see the load of the decisions before it, or a burst of
// identical prompts herds onto one worker before its load arrives. The published snapshot lets the
// selector read every worker's load without taking any lock.
type target struct {
	key  scoring.WorkerKey
	spec registry.Spec

	mu  sync.Mutex
	t   *load.Tracker
	hot *hotLoad // the published load and the state every decision reads

	// pendingSince is when a request was first routed here after the worker's last KV event batch (0:
	// none since); approx is set while the worker's events have stopped and its blocks are predicted
	// from routing history instead (per-worker degradation).
	pendingSince atomic.Int64
	approx       atomic.Bool
}

// hotLoad is the part of a target that every routing decision reads, in one cache line: the published
// load snapshot, the worker's own KV usage report and learned capacity, health. The lines come from
// shared chunks (hotLines), so the candidate loop over a fleet reads adjacent memory (16 KiB for 256
// workers) instead of chasing a target and a snapshot pointer per worker.
//
// Fields are written one by one (the load under the target's mutex), so a reader may see one update
// half applied; each field is a value some consistent state had, which is all the cost function needs.
type hotLoad struct {
	prefill    atomic.Uint64 // ActivePrefillTokens
	decode     atomic.Uint64 // ActiveDecodeBlocks, float64 bits
	unique     atomic.Uint64 // UniqueBlocks
	active     atomic.Uint32 // ActiveRequests
	prefilling atomic.Uint32 // PrefillingRequests
	// kvUsed is the worker's own report of KV blocks in use (vllm:kv_cache_usage_perc × capacity), for
	// the decode-blocks busy threshold, valid when kvKnown.
	kvUsed atomic.Uint64
	// learnedKV and learnedBatched are the capacity the worker reported, when its spec gave none.
	learnedKV      atomic.Int64
	learnedBatched atomic.Int64
	kvKnown        atomic.Bool
	// unhealthy takes the worker out of the candidate set (health checks).
	unhealthy atomic.Bool
	_         [6]byte
}

// hotLines hands out hotLoad lines from chunks of adjacent lines. Lines are never reused: a removed
// worker's line may still be written by a request that routed to it, and the garbage collector frees a
// chunk once no target points into it.
type hotLines struct {
	mu    sync.Mutex
	chunk *[64]hotLoad
	next  int
}

func (h *hotLines) alloc() *hotLoad {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.chunk == nil || h.next == len(h.chunk) {
		h.chunk, h.next = new([64]hotLoad), 0
	}
	h.next++
	return &h.chunk[h.next-1]
}

// publish stores the tracker's load for readers; callers hold t.mu.
func (t *target) publish() {
	s := t.t.Snapshot()
	h := t.hot
	h.prefill.Store(s.ActivePrefillTokens)
	h.decode.Store(math.Float64bits(s.ActiveDecodeBlocks))
	h.unique.Store(uint64(s.UniqueBlocks))
	h.active.Store(uint32(s.ActiveRequests))
	h.prefilling.Store(uint32(s.PrefillingRequests))
}

func (t *target) snapshot() load.Snapshot { return t.hot.snapshot() }

func (h *hotLoad) snapshot() load.Snapshot {
	return load.Snapshot{
		ActivePrefillTokens: h.prefill.Load(),
		ActiveDecodeBlocks:  math.Float64frombits(h.decode.Load()),
		UniqueBlocks:        int(h.unique.Load()),
		ActiveRequests:      int(h.active.Load()),
		PrefillingRequests:  int(h.prefilling.Load()),
	}
}

// targets is an immutable view of every routable (worker, rank), replaced whenever the fleet changes.
type targets struct {
	// unhealthy counts unhealthy targets (shared by every view), so the common case skips the filter.
	unhealthy *atomic.Int32
	list      []*target
	hot       []*hotLoad // hot[i] is list[i].hot
	pos       posTable   // (worker, rank) → index in list
	// tmpl holds each target's static candidate fields, read per decision (compact: the candidate pass
	// is bound by the bytes it moves).
	tmpl []candTmpl
}

// newTargets indexes a target list.
func newTargets(list []*target, unhealthy *atomic.Int32) *targets {
	ts := &targets{unhealthy: unhealthy, list: list, hot: make([]*hotLoad, len(list)), pos: newPosTable(len(list)),
		tmpl: make([]candTmpl, len(list))}
	for i, t := range list {
		ts.hot[i] = t.hot
		ts.pos.put(t.key, i)
		c := candTmpl{worker: t.key, totalKV: uint64(t.spec.TotalKVBlocks), maxBatched: uint64(t.spec.MaxNumBatchedTokens)}
		if t.spec.Device == registry.DeviceCPU {
			c.device = scoring.DeviceCPU
		}
		ts.tmpl[i] = c
	}
	return ts
}

// filtering reports whether some target may be left out of a decision (excluded workers, or any target
// unhealthy), so the common case skips the per-target check.
func (ts *targets) filtering(exclude []uint64) bool {
	return len(exclude) > 0 || ts.unhealthy.Load() > 0
}

// skip reports whether target i is left out: its worker is excluded or it is unhealthy.
func (ts *targets) skip(i int, exclude []uint64) bool {
	return slices.Contains(exclude, ts.tmpl[i].worker.WorkerID) || ts.hot[i].unhealthy.Load()
}

// candTmpl is a target's static part of a candidate: key, capacity from its spec, device.
type candTmpl struct {
	worker              scoring.WorkerKey
	totalKV, maxBatched uint64
	device              scoring.Device
}

// waiter is a queued request: the route goroutine blocks on ready until a drain pops it.
type waiter struct{ ready chan struct{} }

// scheduler turns routing requests into decisions and keeps the load of every worker.
type scheduler struct {
	index *indexer.Indexer
	now   func() time.Time
	rng   scoring.RNG

	cfg       atomic.Pointer[scoring.Config]
	targets   atomic.Pointer[targets]
	unhealthy *atomic.Int32
	rr        atomic.Uint64
	hot       hotLines

	active *activeMap

	qMu    sync.Mutex
	queue  *queue.Queue[*waiter]
	queued atomic.Int64 // queue.Len(), readable without qMu

	apMu   sync.Mutex
	approx *scoring.Approx

	metrics *Metrics
	// selector, when set, replaces scoring.Select (peer-style baselines in benchmarks).
	selector scoring.Selector
	observe  func(LoadEvent) // replica sync observer, Config.OnLoad (replica.go); nil when off
}

// lockedRNG makes a seeded math/rand source safe for concurrent routing.
type lockedRNG struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (l *lockedRNG) Float64() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Float64()
}

func (l *lockedRNG) IntN(n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.IntN(n)
}

// globalRNG uses math/rand/v2's per-goroutine-safe global source.
type globalRNG struct{}

func (globalRNG) Float64() float64 { return rand.Float64() }
func (globalRNG) IntN(n int) int   { return rand.IntN(n) }

func newScheduler(cfg scoring.Config, index *indexer.Indexer, now func() time.Time, seed *uint64, m *Metrics) (*scheduler, error) {
	cfg = cfg.Resolved()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	q, err := queue.New[*waiter](cfg.QueuePolicy, now())
	if err != nil {
		return nil, err
	}
	s := &scheduler{index: index, now: now, active: newActiveMap(), queue: q, unhealthy: &atomic.Int32{},
		approx: scoring.NewApprox(scoring.ApproxConfigFrom(&cfg)), metrics: m}
	if seed != nil {
		s.rng = &lockedRNG{r: rand.New(rand.NewPCG(*seed, *seed^0x9e3779b97f4a7c15))}
	} else {
		s.rng = globalRNG{}
	}
	s.cfg.Store(&cfg)
	s.targets.Store(newTargets(nil, s.unhealthy))
	return s, nil
}

// config returns the current router configuration.
func (s *scheduler) config() *scoring.Config { return s.cfg.Load() }

// setConfig swaps the configuration (busy thresholds at run time).
func (s *scheduler) setConfig(cfg scoring.Config) error {
	cfg = cfg.Resolved()
	if err := cfg.Validate(); err != nil {
		return err
	}
	s.cfg.Store(&cfg)
	s.drain()
	return nil
}

// addWorker makes a worker's ranks routable.
func (s *scheduler) addWorker(spec registry.Spec) {
	cfg := s.config()
	lc := load.ConfigFrom(cfg)
	list := append([]*target(nil), s.targets.Load().list...)
	for r := 0; r < spec.DPRanks(); r++ {
		t := &target{key: scoring.WorkerKey{WorkerID: spec.ID, DPRank: uint32(r)}, spec: spec, t: load.New(lc), hot: s.hot.alloc()}
		t.publish()
		list = append(list, t)
		if spec.TotalKVBlocks > 0 {
			s.apMu.Lock()
			s.approx.SetCapacity(t.key, spec.TotalKVBlocks)
			s.apMu.Unlock()
		}
	}
	s.targets.Store(newTargets(list, s.unhealthy))
}

// removeWorker drops a worker's ranks; its active requests are forgotten (their lifecycle calls will
// answer unknown).
func (s *scheduler) removeWorker(id uint64) {
	var list []*target
	for _, t := range s.targets.Load().list {
		if t.key.WorkerID != id {
			list = append(list, t)
		} else {
			s.apMu.Lock()
			s.approx.RemoveWorker(t.key)
			s.apMu.Unlock()
		}
	}
	s.targets.Store(newTargets(list, s.unhealthy))
	s.active.removeWorker(id)
	s.drain()
}

// routeScratch is the per-decision scratch, pooled so the hot path does not allocate.
type routeScratch struct {
	local    []uint64
	chain    []uint64 // the prefix chain of local (scoring.ChainHashes): the blocks' keys in load tracking
	scores   []prefix.Score
	cands    []scoring.Candidate
	tgts     []*target // tgts[i] is the target of cands[i]: the view's list, or own when filtered
	own      []*target
	ov       []uint32 // device overlap by target index
	rows     []scoring.LoadRow
	caps     []scoring.Capacity // caps[i]: rows[i]'s capacity, with busy thresholds
	targetOf []int32            // row → target when some targets are left out
	ties     []uint64           // the one-pass decision's tie list (scoring.Argmin.Ties)
}

var scratchPool = sync.Pool{New: func() any { return &routeScratch{} }}

// route decides where req goes and charges that worker. It waits in the queue while every eligible
// worker is over the queue threshold, until ctx is done.
func (s *scheduler) route(ctx context.Context, req *RouteRequest, blockSize int) (RouteResult, error) {
	if req.ID == "" {
		return RouteResult{}, fmt.Errorf("%w: missing request id", ErrBadRequest)
	}
	if s.active.has(req.ID) {
		return RouteResult{}, fmt.Errorf("%w: %q", ErrDuplicateRequest, req.ID)
	}
	sc := scratchPool.Get().(*routeScratch)
	defer scratchPool.Put(sc)

	t0 := s.now()
	var th time.Time // hashing done: the first overlap query starts
	isl := req.ISL
	if req.Local != nil {
		sc.local = append(sc.local[:0], req.Local...)
		t1 := s.now()
		s.metrics.observeStage(stageBlockHashing, t1.Sub(t0))
		sc.chain = scoring.ChainHashes(sc.chain[:0], sc.local)
		th = s.now()
		s.metrics.observeStage(stageSeqHashing, th.Sub(t1))
	} else {
		// One pass computes both (the chain step overlaps the block hashes); it is recorded as block
		// hashing, and the sequence-hashing stage times only the chain over given local hashes.
		sc.local, sc.chain = scoring.PromptHashes(sc.local[:0], sc.chain[:0], req.Tokens, blockSize, scoring.DeriveSeed(req.LoraName, req.CacheNamespace))
		isl = len(req.Tokens)
		th = s.now()
		s.metrics.observeStage(stageBlockHashing, th.Sub(t0))
	}
	if isl < len(sc.local)*blockSize {
		isl = len(sc.local) * blockSize
	}

	var queued time.Duration
	for attempt := 0; ; attempt++ {
		cfg := s.config()
		tq := th
		if attempt > 0 {
			tq = s.now()
		}
		sc.scores = sc.scores[:0]
		if cfg.NeedsIndexer() {
			sc.scores = s.index.FindMatches(sc.local, sc.scores)
		}
		tf := s.now()
		s.metrics.observeStage(stageFindMatches, tf.Sub(tq))

		ts := s.targets.Load()
		sreq := scoring.Request{ISL: isl, Override: req.Override, ReturnCosts: req.ReturnCosts}
		if req.Pin != nil {
			sreq.Pin, sreq.Pinned, sreq.PinRank = *req.Pin, true, req.PinRank
		}
		reuse := cfg.AssumeKVReuse
		if req.Override != nil && req.Override.AssumeKVReuse != nil {
			reuse = *req.Override.AssumeKVReuse
		}
		if s.selector == nil && !cfg.QueueThreshold.Set {
			if am, ok := scoring.NewArgmin(&sreq, cfg, s.rng); ok {
				// The common case in one pass over the targets, no candidate slice (argmin).
				s.rr.Add(1)
				tg, d, err := s.argmin(ts, sc, &am, reuse, req.Exclude)
				tsel := s.now()
				s.metrics.observeStage(stageScheduling, tsel.Sub(tf))
				if err != nil {
					return RouteResult{}, err
				}
				return s.commit(tg, req, sc, isl, d, reuse, cfg, t0, tsel, queued)
			}
		}
		sc.cands = s.candidates(ts, sc, cfg, reuse, req.Exclude)

		if attempt == 0 && scoring.ShouldQueue(&sreq, sc.cands, cfg) {
			w := &waiter{ready: make(chan struct{})}
			key := queue.Key{Strict: req.Strict, PriorityJump: queue.Jump(req.Priority), Arrival: s.now(), ISL: isl,
				BestCachedTokens: scoring.BestCachedTokens(&sreq, sc.cands, cfg)}
			s.qMu.Lock()
			s.queue.Push(key, w)
			s.queued.Store(int64(s.queue.Len()))
			s.metrics.setPending(s.queue.Len())
			s.qMu.Unlock()
			s.drain() // capacity may have freed between the check and the push
			start := s.now()
			select {
			case <-w.ready:
			case <-ctx.Done():
				s.cancelWaiter(w)
				return RouteResult{}, ctx.Err()
			}
			queued = s.now().Sub(start)
			continue // re-query overlap and load: the picture changed while waiting
		}

		sreq.RoundRobin = s.rr.Add(1) - 1
		var d scoring.Decision
		var err error
		if s.selector != nil {
			d, err = s.selector.Select(sreq, sc.cands, s.rng)
		} else {
			d, err = scoring.Select(sreq, sc.cands, cfg, s.rng)
		}
		tsel := s.now()
		s.metrics.observeStage(stageScheduling, tsel.Sub(tf))
		if err != nil {
			return RouteResult{}, err
		}
		return s.commit(sc.tgts[d.Index], req, sc, isl, d, reuse, cfg, t0, tsel, queued)
	}
}

// commit performs a decision made at tsel: charges the worker, records approximate-mode blocks and the
// pending-events mark, observes the total stage since t0 and the hit rate, and builds the result.
func (s *scheduler) commit(tg *target, req *RouteRequest, sc *routeScratch, isl int, d scoring.Decision, reuse bool,
	cfg *scoring.Config, t0, tsel time.Time, queued time.Duration) (RouteResult, error) {
	if err := s.charge(tg, req, sc, isl, d, reuse, tsel); err != nil {
		return RouteResult{}, err
	}
	if (!cfg.UseKVEvents || tg.approx.Load()) && cfg.NeedsIndexer() {
		s.recordApprox(tg.key, sc.local, sc.chain)
	}
	if int(d.Overlap) < len(sc.local) {
		// New full blocks: the engine must publish a BlockStored for them (a fully cached or
		// sub-block prompt publishes nothing, so it proves nothing about the stream).
		tg.pendingSince.CompareAndSwap(0, tsel.UnixNano())
	}
	s.metrics.observeStage(stageTotal, s.now().Sub(t0))
	if len(sc.local) > 0 {
		s.metrics.observeHitRate(float64(d.Overlap) / float64(len(sc.local)))
	}
	res := RouteResult{Worker: tg.key, Spec: tg.spec, OverlapBlocks: d.Overlap, CachedTokens: d.CachedTokens,
		Cost: d.Cost, ISL: isl, Blocks: len(sc.local), Queued: queued}
	if req.ReturnCosts {
		res.Candidates = append([]scoring.CandidateCost(nil), d.Costs...)
	}
	return res, nil
}

// argmin is the decision of scoring.Argmin over every routable target: in the common case (no target
// left out, the linear policy) as compact load rows (and capacities, with busy thresholds) in one cost
// loop, otherwise one stack candidate at a time; d.Index is the chosen target's index in ts.list.
func (s *scheduler) argmin(ts *targets, sc *routeScratch, am *scoring.Argmin, reuse bool, exclude []uint64) (*target, scoring.Decision, error) {
	filter := ts.filtering(exclude)
	var targetOf []int32 // row → target index when targets are left out
	if am.LoadOnly() {
		var rows []scoring.LoadRow
		rows, targetOf = sc.loadRows(ts, reuse, filter, exclude)
		var caps []scoring.Capacity
		if am.ReadsCapacity() {
			caps = sc.capacities(ts, targetOf)
		}
		am.OfferLoads(rows, caps)
	} else {
		am.Ties(sc.ties)
		sc.offer(ts, am, reuse, filter, exclude)
	}
	d, err := am.Decision()
	if t := am.Ties(nil); t != nil {
		sc.ties = t
	}
	if err != nil {
		return nil, d, err
	}
	if targetOf != nil {
		d.Index = int(targetOf[d.Index])
	}
	d.Worker = ts.list[d.Index].key
	return ts.list[d.Index], d, nil
}

// loadRows writes a row of cost inputs for every target left in, in one pass over the hot lines, then
// scatters the index's overlap scores into them. Row i is target i unless targets are left out (filter);
// then the others' rows are moved up, and targetOf maps a row to its target.
func (sc *routeScratch) loadRows(ts *targets, reuse, filter bool, exclude []uint64) (rows []scoring.LoadRow, targetOf []int32) {
	rows = slices.Grow(sc.rows[:0], len(ts.list))[:len(ts.list)]
	for i, h := range ts.hot[:len(rows)] {
		active := h.active.Load()
		r := &rows[i]
		r.Prefill, r.Decode = h.prefill.Load(), math.Float64frombits(h.decode.Load())
		r.Additional, r.Overlap, r.Requests = ts.additional(i, active, sc.chain, reuse), 0, active
	}
	for _, sco := range sc.scores {
		if i, ok := ts.pos.find(scoring.WorkerKey(sco.Worker)); ok {
			rows[i].Overlap = sco.Blocks
		}
	}
	sc.rows = rows
	if !filter {
		return rows, nil
	}
	targetOf = sc.targetOf[:0]
	for i := range rows {
		if !ts.skip(i, exclude) {
			rows[len(targetOf)] = rows[i]
			targetOf = append(targetOf, int32(i))
		}
	}
	sc.targetOf = targetOf
	return rows[:len(targetOf)], targetOf
}

// capacities writes the capacity of every row's target (busy thresholds); targetOf as loadRows.
func (sc *routeScratch) capacities(ts *targets, targetOf []int32) []scoring.Capacity {
	n := len(ts.list)
	if targetOf != nil {
		n = len(targetOf)
	}
	caps := slices.Grow(sc.caps[:0], n)[:n]
	for k := range caps {
		i := k
		if targetOf != nil {
			i = int(targetOf[k])
		}
		ts.capacity(&caps[k], i)
	}
	sc.caps = caps
	return caps
}

// offer offers every target left in to am as a candidate, one at a time.
func (sc *routeScratch) offer(ts *targets, am *scoring.Argmin, reuse, filter bool, exclude []uint64) {
	ov := sc.overlaps(ts)
	// Offer reads the load, and the capacity only for busy thresholds: the rest of the candidate (key,
	// device) stays unset, and the capacity too when no threshold is set.
	capacity := am.ReadsCapacity()
	var c scoring.Candidate
	for i := range ts.list {
		if filter && ts.skip(i, exclude) {
			continue
		}
		ts.fillLoad(&c, i, ov[i], sc.chain, reuse)
		if capacity {
			ts.fillCapacity(&c, i)
		}
		am.Offer(i, &c)
	}
}

// overlaps scatters the index's overlap scores into sc.ov by target index.
func (sc *routeScratch) overlaps(ts *targets) []uint32 {
	n := len(ts.list)
	ov := slices.Grow(sc.ov[:0], n)[:n]
	clear(ov)
	for _, sco := range sc.scores {
		if i, ok := ts.pos.find(scoring.WorkerKey(sco.Worker)); ok {
			ov[i] = sco.Blocks
		}
	}
	sc.ov = ov
	return ov
}

// candidates builds one Candidate per routable target: index overlap, published load plus this
// request's additional blocks, capacity. The overlap scores are scattered into a small array first, so the
// candidates are written in one streaming pass.
func (s *scheduler) candidates(ts *targets, sc *routeScratch, cfg *scoring.Config, reuse bool, exclude []uint64) []scoring.Candidate {
	// One streaming pass writes every candidate whole (a template copy first would push the start of a
	// 30 KiB candidate array out of L1 before the pass reached it).
	n := len(ts.list)
	ov := sc.overlaps(ts)
	cands := slices.Grow(sc.cands[:0], n)[:n]
	for i := range cands {
		ts.fill(&cands[i], i, ov[i], sc.chain, reuse)
	}
	sc.tgts = ts.list // read-only; copied below when filtering reorders it
	if ts.filtering(exclude) {
		sc.own = append(sc.own[:0], ts.list...)
		sc.tgts = sc.own
		n := 0
		for i := range cands {
			if !ts.skip(i, exclude) { // positions ≥ n still hold the view's order
				cands[n], sc.tgts[n] = cands[i], sc.tgts[i]
				n++
			}
		}
		cands, sc.tgts = cands[:n], sc.tgts[:n]
	}
	sc.cands = cands
	return cands
}

// fill writes target i's candidate: its static part, published load plus the request's additional
// blocks (chain: their prefix chain), capacity, device overlap ov.
func (ts *targets) fill(c *scoring.Candidate, i int, ov uint32, chain []uint64, reuse bool) {
	tm := &ts.tmpl[i]
	c.Worker, c.Device = tm.worker, tm.device
	c.Overlap.Host, c.Overlap.Disk, c.Overlap.Shared = 0, 0, 0
	ts.fillCapacity(c, i)
	ts.fillLoad(c, i, ov, chain, reuse)
}

// fillLoad writes what the cost of target i reads: device overlap ov, the published load and the
// request's additional blocks, the in-flight count.
func (ts *targets) fillLoad(c *scoring.Candidate, i int, ov uint32, chain []uint64, reuse bool) {
	h := ts.hot[i]
	active := h.active.Load()
	additional := ts.additional(i, active, chain, reuse)
	// Field by field: a composite literal is built on the stack and copied with 16-byte moves that
	// cannot forward from its narrower stores, a stall per candidate.
	c.Overlap.Device, c.InFlight = ov, active
	c.Load.Known, c.Load.ActiveRequests, c.Load.AdditionalBlocks = true, active, additional
	c.Load.ActivePrefillTokens, c.Load.ActiveDecodeBlocks = h.prefill.Load(), math.Float64frombits(h.decode.Load())
}

// additional is the request's blocks (chain: their prefix chain) not already active on target i, which
// has active requests in flight.
func (ts *targets) additional(i int, active uint32, chain []uint64, reuse bool) uint64 {
	if !reuse || active == 0 || len(chain) == 0 {
		return uint64(len(chain))
	}
	// Only a worker with active requests can already hold some of this prompt's blocks.
	return ts.list[i].projection(chain)
}

// projection walks the tracker's trie of active chains (the active part of a chain is a prefix of it)
// for the request's blocks not active yet.
func (t *target) projection(chain []uint64) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.t.Projection(chain, true)
}

// fillCapacity writes target i's capacity into its candidate.
func (ts *targets) fillCapacity(c *scoring.Candidate, i int) { ts.capacity(&c.Capacity, i) }

// capacity writes target i's capacity: its spec's, else what it reported, and its KV usage report.
func (ts *targets) capacity(cp *scoring.Capacity, i int) {
	h, tm := ts.hot[i], &ts.tmpl[i]
	total, batched := tm.totalKV, tm.maxBatched
	if total == 0 {
		total = uint64(h.learnedKV.Load())
	}
	if batched == 0 {
		batched = uint64(h.learnedBatched.Load())
	}
	cp.TotalKVBlocks, cp.MaxNumBatchedTokens = total, batched
	cp.KVUsedBlocks, cp.KVUsedKnown = 0, h.kvKnown.Load()
	if cp.KVUsedKnown {
		cp.KVUsedBlocks = h.kvUsed.Load()
	}
}

// charge records the decision made at now: AddRequest on the chosen worker's tracker and the id → worker
// map.
func (s *scheduler) charge(t *target, req *RouteRequest, sc *routeScratch, isl int, d scoring.Decision, reuse bool, now time.Time) error {
	if !s.active.add(req.ID, t) {
		return fmt.Errorf("%w: %q", ErrDuplicateRequest, req.ID)
	}

	var trackPf *bool
	if req.Override != nil {
		trackPf = req.Override.TrackPrefillTokens
	}
	t.mu.Lock()
	err := t.t.AddRequest(load.Request{ID: req.ID, SeqHashes: sc.chain, ISL: isl, OverlapBlocks: d.Overlap,
		ExpectedOutputTokens: req.ExpectedOutputTokens, AssumeKVReuse: &reuse, TrackPrefillTokens: trackPf, Now: now})
	if err == nil {
		t.publish()
	}
	t.mu.Unlock()
	if err != nil {
		s.active.remove(req.ID)
		return err
	}
	s.observeCharge(t, req, sc.chain, isl, d.Overlap, reuse) // replica sync (replica.go)
	return nil
}

// prefillDone marks the first token of a request: its prefill charge leaves the worker's load.
func (s *scheduler) prefillDone(id string) error {
	t := s.active.get(id)
	if t == nil {
		return fmt.Errorf("%w: %q", ErrUnknownRequest, id)
	}
	t.mu.Lock()
	ok := t.t.MarkPrefillCompleted(id)
	t.publish()
	t.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownRequest, id)
	}
	s.observeLifecycle(LoadPrefillDone, id, t) // replica sync (replica.go)
	s.drain()
	return nil
}

// free ends a request (completion, error, cancel).
func (s *scheduler) free(id string) error {
	t := s.active.remove(id)
	if t == nil {
		return fmt.Errorf("%w: %q", ErrUnknownRequest, id)
	}
	t.mu.Lock()
	t.t.Free(id)
	t.publish()
	t.mu.Unlock()
	s.observeLifecycle(LoadFree, id, t) // replica sync (replica.go)
	s.drain()
	return nil
}

// recordOutput reports a request's generated tokens so far (output-block tracking).
func (s *scheduler) recordOutput(id string, tokens int) {
	t := s.active.get(id)
	if t == nil || !s.config().TrackOutputBlocks {
		return
	}
	t.mu.Lock()
	if t.t.RecordOutput(id, tokens) {
		t.publish()
	}
	t.mu.Unlock()
}

// drain pops queued requests while some eligible worker is under the queue threshold.
func (s *scheduler) drain() {
	if s.queued.Load() == 0 {
		// Nothing waits (the common case, and always without a queue threshold). A request queued after
		// this check drains once itself after its push, so it cannot be missed.
		return
	}
	s.qMu.Lock()
	defer s.qMu.Unlock()
	defer func() { s.queued.Store(int64(s.queue.Len())) }()
	for s.queue.Len() > 0 {
		cfg := s.config()
		if cfg.QueueThreshold.Set && s.allBusy(cfg) {
			break
		}
		w, _, _ := s.queue.Pop()
		close(w.ready)
	}
	s.metrics.setPending(s.queue.Len())
}

// allBusy reports whether every worker is over the queue threshold (no request-specific filter: a
// popped request re-checks eligibility when it routes).
func (s *scheduler) allBusy(cfg *scoring.Config) bool {
	ts := s.targets.Load()
	if len(ts.list) == 0 {
		return false // let the request fail with no workers rather than wait forever
	}
	cands := make([]scoring.Candidate, len(ts.list))
	for i, t := range ts.list {
		snap := t.snapshot()
		cands[i] = scoring.Candidate{Worker: t.key, Load: snap.Load(0),
			Capacity: scoring.Capacity{MaxNumBatchedTokens: uint64(t.spec.MaxNumBatchedTokens)}}
	}
	return scoring.ShouldQueue(&scoring.Request{}, cands, cfg)
}

// cancelWaiter removes a waiter whose request was cancelled; if a drain already released it, the
// capacity it was given is passed on.
func (s *scheduler) cancelWaiter(w *waiter) {
	s.qMu.Lock()
	found := false
	var keep []*waiter
	var keys []queue.Key
	for s.queue.Len() > 0 {
		v, k, _ := s.queue.Pop()
		if v == w {
			found = true
			continue
		}
		keep, keys = append(keep, v), append(keys, k)
	}
	for i, v := range keep {
		s.queue.Push(keys[i], v)
	}
	s.queued.Store(int64(s.queue.Len()))
	s.metrics.setPending(s.queue.Len())
	s.qMu.Unlock()
	if !found {
		s.drain()
	}
}

// recordApprox writes a routed prompt into the index for the chosen worker (approximate mode), with
// engine hashes = the blocks' prefix chain, and removes what the per-worker capacity evicts.
func (s *scheduler) recordApprox(k scoring.WorkerKey, local, chain []uint64) {
	s.apMu.Lock()
	from, evicted := s.approx.Record(k, chain, s.now())
	s.apMu.Unlock()
	var ops []indexer.Op
	if from < len(chain) {
		blocks := make([]prefix.Block, 0, len(chain)-from)
		for i := from; i < len(chain); i++ {
			blocks = append(blocks, prefix.Block{EngineHash: chain[i], LocalHash: local[i]})
		}
		op := indexer.Op{Kind: indexer.OpStore, DPRank: k.DPRank, Blocks: blocks}
		if from > 0 {
			op.Parent, op.HasParent = chain[from-1], true
		}
		ops = append(ops, op)
	}
	if len(evicted) > 0 {
		ops = append(ops, indexer.Op{Kind: indexer.OpRemove, DPRank: k.DPRank, Hashes: evicted})
	}
	if len(ops) > 0 {
		_ = s.index.Apply(&indexer.Apply{WorkerID: k.WorkerID, Ops: ops})
	}
}

// expireApprox removes approximate-mode blocks whose TTL passed.
func (s *scheduler) expireApprox() {
	s.apMu.Lock()
	rem := s.approx.Expire(s.now())
	s.apMu.Unlock()
	for _, r := range rem {
		_ = s.index.Apply(&indexer.Apply{WorkerID: r.Worker.WorkerID, Ops: []indexer.Op{{Kind: indexer.OpRemove, DPRank: r.Worker.DPRank, Hashes: r.Hashes}}})
	}
}

// expireStale frees requests never freed within the stale expiry.
func (s *scheduler) expireStale() {
	now := s.now()
	for _, t := range s.targets.Load().list {
		t.mu.Lock()
		ids := t.t.Expire(now)
		if len(ids) > 0 {
			t.publish()
		}
		t.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		for _, id := range ids {
			s.active.remove(id)
		}
	}
	s.drain()
}

// setHealthy takes a worker's ranks out of (or back into) the candidate set. It reports whether the
// state changed.
func (s *scheduler) setHealthy(id uint64, healthy bool) bool {
	changed := false
	for _, t := range s.targets.Load().list {
		if t.key.WorkerID != id {
			continue
		}
		if t.hot.unhealthy.Swap(!healthy) != !healthy {
			changed = true
			if healthy {
				s.unhealthy.Add(-1)
			} else {
				s.unhealthy.Add(1)
			}
		}
	}
	if changed && healthy {
		s.drain()
	}
	return changed
}

// setKVUsage records a worker rank's reported KV blocks in use.
func (s *scheduler) setKVUsage(k scoring.WorkerKey, used uint64) {
	ts := s.targets.Load() // one view: a fleet change between loads could index another list
	if i, ok := ts.pos.find(k); ok {
		t := ts.list[i]
		t.hot.kvUsed.Store(used)
		t.hot.kvKnown.Store(true)
	}
}

// setCapacity records a worker's KV capacity and token budget learned from the worker itself (its
// vllm:cache_config_info), for busy thresholds and approximate mode. Zero values leave a field as it is;
// values given in the worker's spec are not overridden.
func (s *scheduler) setCapacity(id uint64, totalKVBlocks, maxBatched int) {
	for _, t := range s.targets.Load().list {
		if t.key.WorkerID != id {
			continue
		}
		if totalKVBlocks > 0 && t.spec.TotalKVBlocks == 0 && t.hot.learnedKV.Swap(int64(totalKVBlocks)) != int64(totalKVBlocks) {
			s.apMu.Lock()
			s.approx.SetCapacity(t.key, totalKVBlocks)
			s.apMu.Unlock()
		}
		if maxBatched > 0 && t.spec.MaxNumBatchedTokens == 0 {
			t.hot.learnedBatched.Store(int64(maxBatched))
		}
	}
}

// posTable maps a worker rank to its index in a targets list: open addressing with linear probing over
// a power-of-two array at most half full, keys in place. The candidate loop scatters every overlap score
// through it, so it must cost a probe or two, not a general map's hashing and indirection.
type posTable struct {
	shift uint
	slots []posSlot
}

type posSlot struct {
	key scoring.WorkerKey
	pos int32 // index + 1; 0 marks an empty slot
}

func newPosTable(n int) posTable {
	size, bits := 2, uint(1)
	for size < 2*n {
		size, bits = size*2, bits+1
	}
	return posTable{shift: 64 - bits, slots: make([]posSlot, size)}
}

// home is Fibonacci hashing of the id with the rank mixed in: worker ids are Dynamo lease ids (64-bit,
// often sequential in tests), so the multiply spreads them over the high bits the slot is taken from.
func (p *posTable) home(k scoring.WorkerKey) uint64 {
	return ((k.WorkerID ^ uint64(k.DPRank)<<48) * 0x9e3779b97f4a7c15) >> p.shift
}

func (p *posTable) put(k scoring.WorkerKey, i int) {
	mask := uint64(len(p.slots) - 1)
	for h := p.home(k); ; h = (h + 1) & mask {
		if s := &p.slots[h]; s.pos == 0 || s.key == k {
			s.key, s.pos = k, int32(i+1)
			return
		}
	}
}

func (p *posTable) find(k scoring.WorkerKey) (int, bool) {
	mask := uint64(len(p.slots) - 1)
	for h := p.home(k); ; h = (h + 1) & mask {
		s := &p.slots[h]
		if s.pos == 0 {
			return 0, false
		}
		if s.key == k {
			return int(s.pos - 1), true
		}
	}
}

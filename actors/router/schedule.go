package router

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvroute/kvroute/actors/indexer"
	"github.com/kvroute/kvroute/actors/worker"
	"github.com/kvroute/kvroute/internal/clock"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/policy"
	"github.com/kvroute/kvroute/scoring/prefix"
	"github.com/kvroute/kvroute/scoring/sched"
	"github.com/kvroute/kvroute/workers/registry"
)

// Errors of the request path, as sentinels the HTTP edge maps to statuses (the scheduler machine's).
var (
	// ErrUnknownRequest: prefill_done or free for an id that is not active (never routed, already freed,
	// or expired).
	ErrUnknownRequest = sched.ErrUnknownRequest
	// ErrDuplicateRequest: Route with an id that is already active.
	ErrDuplicateRequest = sched.ErrDuplicateRequest
	// ErrBadRequest: a request the router cannot route as given (no tokens, a bad pin, a bad override).
	ErrBadRequest = sched.ErrBadRequest
	// ErrShuttingDown: the router stopped while the request waited.
	ErrShuttingDown = errors.New("router: shutting down")
	// ErrNotReady: fewer workers than --router-min-initial-workers joined while the request waited.
	ErrNotReady = sched.ErrNotReady
	// ErrQueueRejected: the request's policy class has its queue at a limit (HTTP 529).
	ErrQueueRejected = sched.ErrQueueRejected
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
	// LoraName and CacheNamespace change the block-hash seed (docs/router.md, hashing). CacheNamespace is
	// the cache_salt the request's engine hashes its blocks with; the workers' salted blocks are re-keyed
	// with the salt their events carry, so only requests of the same namespace match them.
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
	// Sequences is the request's n: sequences sharing one prefill, each decoding (0 or 1: one).
	Sequences int
	// ReturnCosts asks for every candidate's overlap and cost (nvext return_routing).
	ReturnCosts bool
	// CostsTop, with ReturnCosts, keeps the cheapest candidate of each of the CostsTop cheapest workers
	// that are not busy (sched.Request.CostsTop); 0 keeps them all.
	CostsTop int
	// Exclude lists workers not to route to (they failed this request before; migration).
	Exclude []uint64
	// Only, when not empty, lists the only workers the request may go to (a gateway's endpoint subset;
	// sched.Request.Only).
	Only []uint64
	// Session is the request's X-Dynamo-Session-ID ("" none), for session affinity.
	Session string
	// PolicyClass is the request's x-dynamo-meta-policy-class ("" none): an explicit policy class, or a
	// policy family combined with the request's uncached-ISL bucket (--router-policy-config).
	PolicyClass string
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

// scheduler is the concurrent shell around the scheduler machine (scoring/sched): request goroutines
// hash their prompts and query the index in parallel, then take one short lock for the machine's step
// (select, charge, queue). A request the machine parks waits on its own channel; whichever call releases
// it (a first token, a free, a worker joining) hands it its decision.
type scheduler struct {
	index   *indexer.Indexer
	clock   clock.Clock
	metrics *Metrics

	// cfg mirrors the machine's configuration for lock-free reads on the request path.
	cfg atomic.Pointer[scoring.Config]

	mu      sync.Mutex // guards m and waiters
	m       *sched.Machine
	waiters map[string]chan sched.Released

	// evictedAt is when the index's evictions were last taken (ns).
	evictedAt atomic.Int64
	// marks is eventHealth's buffer (the tick's goroutine alone uses it).
	marks []sched.EventMark
}

// indexAdapter lets the machine read the sharded index and write its predicted blocks into it.
type indexAdapter struct{ ix *indexer.Indexer }

func (a indexAdapter) FindMatches(local []uint64, out []prefix.Score) []prefix.Score {
	return a.ix.FindMatches(local, out)
}

func (a indexAdapter) Match(local []uint64, m *prefix.Matches) { a.ix.Match(local, m) }

func (a indexAdapter) Store(w scoring.WorkerKey, parent uint64, hasParent bool, blocks []prefix.Block) {
	_ = a.ix.Apply(&indexer.Apply{WorkerID: w.WorkerID, Ops: []indexer.Op{{Kind: indexer.OpStore, DPRank: w.DPRank,
		Parent: parent, HasParent: hasParent, Blocks: blocks}}})
}

func (a indexAdapter) Remove(w scoring.WorkerKey, hashes []uint64) {
	_ = a.ix.Apply(&indexer.Apply{WorkerID: w.WorkerID, Ops: []indexer.Op{{Kind: indexer.OpRemove, DPRank: w.DPRank, Hashes: hashes}}})
}

func newScheduler(cfg scoring.Config, index *indexer.Indexer, clk clock.Clock, seed *uint64, m *Metrics,
	selector scoring.Selector, observe func(sched.LoadEvent), profile *policy.Profile) (*scheduler, error) {
	mc, err := sched.New(cfg, indexAdapter{index}, sched.Options{Seed: seed, Selector: selector, Observer: observe, Start: clk.Now(),
		Policy: profile})
	if err != nil {
		return nil, err
	}
	s := &scheduler{index: index, clock: clk, metrics: m, m: mc, waiters: make(map[string]chan sched.Released)}
	s.cfg.Store(mc.Config())
	index.LogEvictions(mc.KeepsAges())
	return s, nil
}

// now reads the router's clock.
func (s *scheduler) now() time.Time { return s.clock.Now() }

// stopwatch times a decision's stages from now on.
func (s *scheduler) stopwatch() stopwatch {
	_, wall := s.clock.(clock.Wall)
	return stopwatch{start: s.clock.Now(), c: s.clock, wall: wall}
}

// stopwatch times a decision's stages from start. With the system clock a boundary reads only the
// monotonic clock (time.Since: 31 ns on this project's 2-core VM against 56 ns for time.Now, which reads
// the wall clock too), and the clock's time at a boundary is start plus the elapsed; an injected clock is
// read at every boundary.
type stopwatch struct {
	start time.Time
	c     clock.Clock
	wall  bool
}

// elapsed is the time since start.
func (w stopwatch) elapsed() time.Duration {
	if w.wall {
		return time.Since(w.start)
	}
	return w.c.Now().Sub(w.start)
}

// config returns the current router configuration.
func (s *scheduler) config() *scoring.Config { return s.cfg.Load() }

// deliver hands released requests their outcome; callers hold mu.
func (s *scheduler) deliver(rel []sched.Released) {
	for _, r := range rel {
		if ch, ok := s.waiters[r.ID]; ok {
			delete(s.waiters, r.ID)
			ch <- r // buffered: never blocks
		}
	}
	if len(rel) > 0 {
		s.metrics.setPending(s.m.QueueLen())
	}
}

// setConfig swaps the configuration (busy thresholds at run time).
func (s *scheduler) setConfig(cfg scoring.Config) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rel, err := s.m.SetConfig(s.now(), cfg)
	if err != nil {
		return err
	}
	s.cfg.Store(s.m.Config())
	s.index.LogEvictions(s.m.KeepsAges())
	s.deliver(rel)
	return nil
}

// addWorker makes a worker's ranks routable.
func (s *scheduler) addWorker(spec registry.Spec) {
	sp := spec
	w := sched.Worker{ID: spec.ID, DPRanks: spec.DPRanks(), TotalKVBlocks: spec.TotalKVBlocks,
		MaxNumBatchedTokens: spec.MaxNumBatchedTokens, Tag: &sp}
	if spec.Device == registry.DeviceCPU {
		w.Device = scoring.DeviceCPU
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deliver(s.m.AddWorker(s.now(), w))
}

// removeWorker drops a worker's ranks; its active requests are forgotten (their lifecycle calls will
// answer unknown).
func (s *scheduler) removeWorker(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deliver(s.m.RemoveWorker(s.now(), id))
}

// routeScratch is the per-decision scratch of the request side (hashes and overlap scores), pooled so
// the hot path does not allocate.
type routeScratch struct {
	local   []uint64
	chain   []uint64 // the prefix chain of local (scoring.ChainHashes): the blocks' keys in load tracking
	matches prefix.Matches
}

var scratchPool = sync.Pool{New: func() any { return &routeScratch{} }}

// route decides where req goes and charges that worker: hash → match (outside the lock) → the machine's
// step (candidates, queue, select, commit). It waits while the machine holds the request (queue, minimum
// workers), until ctx is done.
func (s *scheduler) route(ctx context.Context, req *RouteRequest, blockSize int) (RouteResult, error) {
	if req.ID == "" {
		return RouteResult{}, fmt.Errorf("%w: missing request id", ErrBadRequest)
	}
	sc := scratchPool.Get().(*routeScratch)
	defer scratchPool.Put(sc)

	sw := s.stopwatch()
	var dh time.Duration // hashing done: the overlap query starts
	isl := req.ISL
	if req.Local != nil {
		sc.local = append(sc.local[:0], req.Local...)
		d1 := sw.elapsed()
		s.metrics.observeStage(stageBlockHashing, d1)
		sc.chain = scoring.ChainHashes(sc.chain[:0], sc.local)
		dh = sw.elapsed()
		s.metrics.observeStage(stageSeqHashing, dh-d1)
	} else {
		// One pass computes both (the chain step overlaps the block hashes); it is recorded as block
		// hashing, and the sequence-hashing stage times only the chain over given local hashes.
		sc.local, sc.chain = scoring.PromptHashes(sc.local[:0], sc.chain[:0], req.Tokens, blockSize, scoring.DeriveSeed(req.LoraName, req.CacheNamespace))
		isl = len(req.Tokens)
		dh = sw.elapsed()
		s.metrics.observeStage(stageBlockHashing, dh)
	}

	sc.matches.Reset()
	if s.config().NeedsIndexer() {
		s.index.Match(sc.local, &sc.matches)
	}
	df := sw.elapsed()
	tf := sw.start.Add(df) // the machine's time: the clock's reading at this boundary
	s.metrics.observeStage(stageFindMatches, df-dh)

	mreq := sched.Request{ID: req.ID, Local: sc.local, Chain: sc.chain, ISL: isl, Matches: &sc.matches, Matched: true,
		Priority: req.Priority, Strict: req.Strict, Pin: req.Pin, PinRank: req.PinRank, Override: req.Override,
		OSL: req.ExpectedOutputTokens, Sequences: req.Sequences, ReturnCosts: req.ReturnCosts, CostsTop: req.CostsTop, Exclude: req.Exclude, Only: req.Only, Session: req.Session,
		PolicyClass: req.PolicyClass}
	var wait chan sched.Released
	evicted := s.takeEvicted(tf)
	s.mu.Lock()
	if len(evicted) > 0 {
		s.m.Evicted(evicted)
	}
	d, queued, err := s.m.Route(tf, &mreq)
	if queued {
		wait = make(chan sched.Released, 1)
		s.waiters[req.ID] = wait
		s.metrics.setPending(s.m.QueueLen())
	}
	s.mu.Unlock()
	dsel := sw.elapsed()
	s.metrics.observeStage(stageScheduling, dsel-df)
	total := dsel // nothing happens between the step and the answer, unless the request waits
	if queued {
		select {
		case r := <-wait:
			d, err = r.Decision, r.Err
		case <-ctx.Done():
			return RouteResult{}, s.cancel(req.ID, wait, ctx.Err())
		}
		total = sw.elapsed()
	}
	if err != nil {
		if errors.Is(err, ErrQueueRejected) {
			s.metrics.countRejected(err)
		}
		return RouteResult{}, err
	}
	s.metrics.observeStage(stageTotal, total)
	if d.Blocks > 0 {
		s.metrics.observeHitRate(float64(d.OverlapBlocks) / float64(d.Blocks))
	}
	res := RouteResult{Worker: d.Worker, OverlapBlocks: d.OverlapBlocks, CachedTokens: d.CachedTokens, Cost: d.Cost,
		ISL: d.ISL, Blocks: d.Blocks, Candidates: d.Candidates, Queued: d.Queued}
	if sp, ok := d.Tag.(*registry.Spec); ok {
		res.Spec = *sp
	}
	return res, nil
}

// cancel withdraws a waiting request whose caller gave up; if a release raced the cancellation, the
// request was already charged and is freed again.
func (s *scheduler) cancel(id string, wait chan sched.Released, cause error) error {
	s.mu.Lock()
	withdrawn := s.m.Cancel(id)
	if withdrawn {
		delete(s.waiters, id)
		s.metrics.setPending(s.m.QueueLen())
	}
	s.mu.Unlock()
	if !withdrawn {
		if r := <-wait; r.Err == nil { // sent under mu before Cancel could run
			_ = s.free(id, 0)
		}
	}
	return cause
}

// prefillDone marks the first token of a request: its prefill charge leaves the worker's load.
func (s *scheduler) prefillDone(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rel, err := s.m.PrefillDone(s.now(), id)
	s.deliver(rel)
	return err
}

// free ends a request (completion, error, cancel) that generated tokens (0: not counted).
func (s *scheduler) free(id string, tokens int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if tokens > 0 {
		s.m.RecordOutput(id, tokens)
	}
	rel, err := s.m.Free(s.now(), id)
	s.deliver(rel)
	return err
}

// recordOutput reports a request's generated tokens so far (output-block tracking).
func (s *scheduler) recordOutput(id string, tokens int) {
	if !s.config().TrackOutputBlocks {
		return
	}
	s.mu.Lock()
	s.m.RecordOutput(id, tokens)
	s.mu.Unlock()
}

// tick runs the machine's time-driven work.
func (s *scheduler) tick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deliver(s.m.Tick(s.now()))
}

// eventHealth runs per-worker degradation (see sched.Machine.EventHealth) with the mirrors' last batch
// times, and returns the workers to switch. The lock is held to take the marks and to apply the
// decisions, not while each worker's last batch is looked up and judged (JudgeEvents).
func (s *scheduler) eventHealth(stale time.Duration, fleet *worker.Fleet) (toApprox, toEvents []uint64) {
	s.mu.Lock()
	s.marks = s.m.EventMarks(s.marks)
	now := s.now()
	s.mu.Unlock()
	if len(s.marks) == 0 {
		return nil, nil
	}
	sched.JudgeEvents(now, stale, s.marks, func(id uint64) (time.Time, bool) {
		m, ok := fleet.Get(id)
		if !ok || !m.Spec.PublishesEvents() {
			return time.Time{}, false
		}
		return m.LastBatch(), true
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.ApplyEvents(s.marks)
}

// setHealthy takes a worker's ranks out of (or back into) the candidate set. It reports whether the
// state changed.
func (s *scheduler) setHealthy(id uint64, healthy bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed, rel := s.m.SetHealthy(s.now(), id, healthy)
	s.deliver(rel)
	return changed
}

// setKVUsage records a worker rank's reported KV blocks in use.
func (s *scheduler) setKVUsage(k scoring.WorkerKey, used uint64) {
	s.mu.Lock()
	s.m.SetKVUsage(k, used)
	s.mu.Unlock()
}

// setCachedBlocks records the index's count of a worker rank's cached blocks.
func (s *scheduler) setCachedBlocks(k scoring.WorkerKey, blocks uint64) {
	s.mu.Lock()
	s.m.SetCachedBlocks(k, blocks)
	s.mu.Unlock()
}

// takeEvicted takes the index's log of the engines' evictions (age.go) when the kvroute preset keeps
// eviction ages and sched.EvictedEvery has passed since the last take, else nil. It runs before the
// decision takes the scheduler's lock: the take locks each shard as the index's control reads do, at
// most once per EvictedEvery, and Machine.Evicted does not depend on the order two takes apply in.
func (s *scheduler) takeEvicted(now time.Time) []prefix.Evicted {
	last, at := s.evictedAt.Load(), now.UnixNano()
	if !sched.KeepsAges(s.config()) || at-last < int64(sched.EvictedEvery) || !s.evictedAt.CompareAndSwap(last, at) {
		return nil
	}
	return s.index.TakeEvicted(nil)
}

// setCapacity records a worker's KV capacity and token budget learned from the worker itself.
func (s *scheduler) setCapacity(id uint64, totalKVBlocks, maxBatched int) {
	s.mu.Lock()
	s.m.SetCapacity(id, totalKVBlocks, maxBatched)
	s.mu.Unlock()
}

// active is the number of routed requests not yet freed.
func (s *scheduler) active() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.Active()
}

// classes returns every policy class's queue.
func (s *scheduler) classes() []sched.ClassQueue {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.Classes(nil)
}

// failWaiting answers every waiting request with err.
func (s *scheduler) failWaiting(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deliver(s.m.CancelAll(s.now(), err))
}

// waiting is the number of requests the machine holds.
func (s *scheduler) waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.Waiting()
}

// loads returns every target's load.
func (s *scheduler) loads() []sched.TargetLoad {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.Loads(nil)
}

// prefillCarried is the healthy targets' prefill tokens summed, and their number.
func (s *scheduler) prefillCarried() (uint64, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.PrefillCarried()
}

// calibration is the machine's prefill fit (α, β, γ in use, observations).
func (s *scheduler) calibration() (alpha, beta, gamma float64, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.Calibration()
}

// decodeCalibration is the machine's decode fit (Router.DecodeCalibration).
func (s *scheduler) decodeCalibration() (a, b float64, n int, meanOut float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.DecodeCalibration()
}

// replicaPart is how many targets replica sync reads per hold of the lock, and how many requests it
// frees: with 8,192 targets carrying 65,536 requests of this router's own and as many of a peer's, an
// active list or a peer's list read whole held it 10–12 ms (BenchmarkActiveList, BenchmarkReconcile in
// scoring/sched), 256 targets (16 requests each) about 0.35 ms.
const replicaPart = 256

// activeList hands emit the machine's active list in parts of replicaPart targets, each under the lock
// (Router.ActiveLists): each part is exact for its targets and in order with the load events. A worker
// leaving between two parts moves the targets after it down, so a few may be in no part this time: a
// peer then leaves their requests alone until the next list.
func (s *scheduler) activeList(emit func(sched.ActiveList)) {
	for from := 0; ; from += replicaPart {
		s.mu.Lock()
		l := s.m.ActiveList(from, replicaPart)
		if len(l.Workers) > 0 {
			emit(l)
		}
		s.mu.Unlock()
		if len(l.Workers) < replicaPart {
			return
		}
	}
}

// reconcile frees another router's requests its active list lacks (Router.ReconcileRemote). The lock is
// held, in parts, to collect that router's requests on the workers the list covers and to free the
// unlisted ones, not while they are checked against the list (sched.Machine.Reconcile); the list is
// indexed only when this core charges that router something there. That router's events are applied
// by the goroutine that reads its lists, so between the parts its requests only leave (the sweep of a
// router gone silent, on the list ticker's goroutine, only frees).
func (s *scheduler) reconcile(routerID string, l sched.ActiveList) int {
	workers := l.Workers
	if l.All {
		s.mu.Lock()
		workers = s.m.Targets(nil)
		s.mu.Unlock()
	}
	var ids []string
	for lo := 0; lo < len(workers); lo += replicaPart {
		s.mu.Lock()
		ids = s.m.Charged(routerID, workers[lo:min(lo+replicaPart, len(workers))], ids)
		s.mu.Unlock()
	}
	if len(ids) == 0 { // none of those workers is this core's, or that router has nothing on them
		return 0
	}
	ids = l.Index().Unlisted(routerID, ids)
	n := 0
	for lo := 0; lo < len(ids); lo += replicaPart {
		s.mu.Lock()
		rel, k := s.m.FreeRemote(s.now(), ids[lo:min(lo+replicaPart, len(ids))])
		s.deliver(rel)
		s.mu.Unlock()
		n += k
	}
	return n
}

// applyRemote applies another router's load event.
func (s *scheduler) applyRemote(routerID string, ev LoadEvent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rel, err := s.m.ApplyRemote(s.now(), routerID, ev)
	s.deliver(rel)
	if errors.Is(err, sched.ErrUnknownWorker) {
		return fmt.Errorf("%w: %d rank %d", worker.ErrUnknown, ev.Worker.WorkerID, ev.Worker.DPRank)
	}
	return err
}

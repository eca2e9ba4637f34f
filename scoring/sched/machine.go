package sched

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/load"
	"github.com/kvroute/kvroute/scoring/policy"
	"github.com/kvroute/kvroute/scoring/prefix"
)

// Errors of the request path, as sentinels the HTTP edge maps to statuses.
var (
	// ErrUnknownRequest: prefill_done or free for an id that is not active (never routed, already freed,
	// or expired).
	ErrUnknownRequest = errors.New("router: unknown request id")
	// ErrDuplicateRequest: Route with an id that is already active or waiting.
	ErrDuplicateRequest = errors.New("router: request id already active")
	// ErrBadRequest: a request the router cannot route as given (no id, a bad override, a bad pin).
	ErrBadRequest = errors.New("router: bad route request")
	// ErrNotReady: fewer workers than --router-min-initial-workers have joined, and the request waited
	// the machine's patience for them.
	ErrNotReady = errors.New("router: waiting for the minimum number of initial workers")
	// ErrCancelled: a waiting request was withdrawn by its caller.
	ErrCancelled = errors.New("router: request cancelled while waiting")
)

// Index is the primary KV index as the machine uses it: overlap queries, and in approximate mode (and for
// a worker whose events stopped) the blocks the machine predicts from its own decisions. The machine never
// writes a worker's engine-reported blocks; those reach the index from the worker's event stream.
type Index interface {
	FindMatches(local []uint64, out []prefix.Score) []prefix.Score
	// Store records blocks (engine hash = prefix chain) under parent for worker w.
	Store(w scoring.WorkerKey, parent uint64, hasParent bool, blocks []prefix.Block)
	// Remove drops blocks of worker w by engine hash.
	Remove(w scoring.WorkerKey, hashes []uint64)
}

// Worker is one backend worker as the scheduler sees it: its identity, data-parallel ranks and the
// capacity its registration declared (zero: unknown, learned later with SetCapacity).
type Worker struct {
	ID uint64
	// DPRanks is the number of data-parallel ranks (targets), at least 1.
	DPRanks             int
	TotalKVBlocks       int
	MaxNumBatchedTokens int
	Device              scoring.Device
	// Tag is the caller's data about the worker, returned with every decision for it (the router keeps
	// the worker's registration there, so a decision needs no second lookup).
	Tag any
}

// Options configures a Machine beyond the router configuration.
type Options struct {
	// Seed makes every random choice reproducible; nil draws from math/rand/v2's global source.
	Seed *uint64
	// Selector replaces the configured mode's selection (peer-router baselines in benchmarks).
	Selector scoring.Selector
	// Observer sees every load change the machine makes for a local request (replica sync). It runs
	// inside the machine's step and must not block or call back into the machine.
	Observer func(LoadEvent)
	// MinWorkersPatience is how long a request waits for --router-min-initial-workers before it fails
	// with ErrNotReady. Default 30 s.
	MinWorkersPatience time.Duration
	// Start is the machine's epoch (queue arrival offsets are measured from it).
	Start time.Time
	// Policy is the policy-class profile of --router-policy-config for the router's model (scoring/policy);
	// nil is the single synthetic class of --router-queue-threshold and --router-queue-policy.
	Policy *policy.Profile
}

// Machine is the scheduler: every target's load, the queue, the approximate and predicted side indexes,
// session bindings. It is a plain state machine: not safe for concurrent use (its owner serializes the
// calls), it never reads a clock (each call takes now), never blocks and never starts a goroutine. What
// the caller must carry out comes back as return values: a decision, the requests released from the
// queue by a call, the worker transitions of event health.
type Machine struct {
	cfg     *scoring.Config
	index   Index
	matcher Matcher // index, when it answers in groups too
	// slotVictim is the last slot map replaced when maxSlotMaps were kept (groups.go).
	slotVictim int
	rng        scoring.RNG
	selector   scoring.Selector
	observe    func(LoadEvent)

	list []*target // routable (worker, rank) targets, in join order
	// workers counts the workers the list holds (a worker's ranks are adjacent targets).
	workers int
	lines   []line // lines[i] is list[i]'s load, dense for the candidate loop
	tmpl    []candTmpl
	pos     posTable
	// unhealthy counts unhealthy targets, so the common case skips the per-target filter; sick holds
	// them, so a filtered decision marks them without a pass over every target (eligibility).
	unhealthy int
	sick      map[*target]struct{}
	// over marks, by target position, the targets over a busy threshold (busy.go), and overN counts
	// them: kept where a target's load, KV usage or capacity or the thresholds change, so a decision
	// with busy thresholds marks the busy targets without asking each one.
	over  []uint64
	overN int
	rr    uint64

	active map[string]*target

	pq       policyQueue
	waitByID map[string]*waiting
	// gate holds requests waiting for --router-min-initial-workers, in arrival order; seenWorkers is the
	// number of distinct workers ever added (the gate opens for good once it reaches the minimum).
	gate        []*waiting
	seenWorkers int
	gateOpen    bool
	patience    time.Duration

	approx *scoring.Approx
	pred   *predicted
	sess   *sessions

	// cal learns the kvroute cost's slowdown per active block from prefill completions; obs holds the
	// routed requests it waits on.
	cal *scoring.Calibrator
	obs map[string]calObs
	// dcal learns the decode step against the context decoded beside a request, dreq holds the active
	// requests' parts of it, ctxs every target's decoded context by index (decode.go), and outMean and
	// gapMean the fleet's recent mean output length and gap between tokens.
	dcal             *scoring.DecodeFit
	dreq             map[string]decodeReq
	ctxs             []float64
	outMean, gapMean forgetMean
	// pfg is every target's prefill tokens routed, each weighted e^((at − pfT0)/prefillRateTau) (the
	// recent prefill rate, decode.go).
	pfg  []float64
	pfT0 int64
	// evictedAt is every target's age.evictedAt by index, and evicting counts the targets whose engine
	// has evicted (age.go): a decision's age charges read them densely.
	evictedAt []int64
	evicting  int
	// prefilling is Σ lines[i].prefilling, the fleet's requests routed and not yet at their first token
	// (kept by publish): the kvroute cost's load.
	prefilling int64
	// pfIdle counts the targets with no queued prefill (drain.go).
	pfIdle int
	// roomy counts the spacious targets: more than half of their KV capacity free (room.go).
	roomy int

	sc scratch
}

// target is one (worker, dp rank) the machine routes to, with its load tracker.
type target struct {
	key     scoring.WorkerKey
	w       *Worker
	t       *load.Tracker
	i       int // index in Machine.list (and lines)
	healthy bool
	// learned capacity, when the worker's registration gave none
	learnedKV, learnedBatched uint64
	kvUsed                    uint64
	kvKnown                   bool
	// pendingSince is when a request was first routed here after the worker's last KV event batch (0:
	// none since); approx is set while the worker's events have stopped and its blocks are predicted from
	// routing history instead (per-worker degradation).
	pendingSince int64
	approx       bool
	// pf is the local requests whose prefill is charged here, in routing order, and pfSince when the
	// first of them became the head (drain.go).
	pf      []pfReq
	pfSince int64
	// cached is how many KV blocks the engines' events have the target holding (SetCachedBlocks),
	// cachedKnown whether it was reported.
	cached      uint64
	cachedKnown bool
	spacious    bool    // counted in Machine.roomy
	over        bool    // over a busy threshold: marked in Machine.over (busy.go)
	pool        []uint8 // its standing in each policy class's pool (pool.go)
	ctx         float64 // the context blocks of the requests decoding here, each counted whole (decode.go)
	pfg         float64 // Machine.pfg's entry
	age         lruAge  // the engine's eviction order (age.go)
}

// line is the load of a target that every decision reads, kept in one dense slice so the candidate loop
// over a fleet streams through adjacent memory.
type line struct {
	prefill    uint64
	decode     float64
	unique     uint32
	active     uint32
	prefilling uint32
	// room is 1 + the blocks of the target's KV capacity its engines' events leave free (room.go), 0
	// while its cached blocks or its capacity are unknown.
	room uint32
}

// totalKV is the target's KV capacity in blocks: its registration's, else what it reported (0: unknown).
func (t *target) totalKV() uint64 {
	if t.w.TotalKVBlocks > 0 {
		return uint64(t.w.TotalKVBlocks)
	}
	return t.learnedKV
}

// maxBatched is the target's token budget per step: its registration's, else what it reported.
func (t *target) maxBatched() uint64 {
	if t.w.MaxNumBatchedTokens > 0 {
		return uint64(t.w.MaxNumBatchedTokens)
	}
	return t.learnedBatched
}

// candTmpl is a target's static part of a candidate: key, capacity (declared, else reported), device.
// The candidate loop reads it densely, never the target behind it.
type candTmpl struct {
	worker              scoring.WorkerKey
	totalKV, maxBatched uint64
	device              scoring.Device
}

// New returns an empty machine for cfg (resolved and validated here) reading index.
func New(cfg scoring.Config, index Index, opt Options) (*Machine, error) {
	cfg = cfg.Resolved()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Machine{cfg: &cfg, index: index, selector: opt.Selector, observe: opt.Observer,
		active: make(map[string]*target), waitByID: make(map[string]*waiting),
		approx: scoring.NewApprox(scoring.ApproxConfigFrom(&cfg)), patience: opt.MinWorkersPatience,
		cal: scoring.NewCalibrator(), obs: make(map[string]calObs),
		dcal: scoring.NewDecodeFit(), dreq: make(map[string]decodeReq),
		pos: newPosTable(0)}
	if err := m.pq.init(&cfg, opt.Policy, opt.Start); err != nil {
		return nil, err
	}
	if m.patience <= 0 {
		m.patience = 30 * time.Second
	}
	if opt.Seed != nil {
		m.rng = rand.New(rand.NewPCG(*opt.Seed, *opt.Seed^0x9e3779b97f4a7c15))
	} else {
		m.rng = globalRNG{}
	}
	m.matcher, _ = index.(Matcher)
	m.gateOpen = cfg.MinInitialWorkers <= 0
	m.pred = newPredicted(cfg.PredictTTL())
	m.sess = newSessions(cfg.SessionAffinityTTL)
	return m, nil
}

// globalRNG uses math/rand/v2's global source (safe for the concurrent callers of a shell).
type globalRNG struct{}

func (globalRNG) Float64() float64 { return rand.Float64() }
func (globalRNG) IntN(n int) int   { return rand.IntN(n) }

// Config returns the current configuration (read-only).
func (m *Machine) Config() *scoring.Config { return m.cfg }

// SetConfig swaps the configuration at run time (busy thresholds, temperature, queue threshold ...); the
// queue may release requests under the new thresholds.
func (m *Machine) SetConfig(now time.Time, cfg scoring.Config) ([]Released, error) {
	cfg = cfg.Resolved()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := m.pq.reconfigure(&cfg); err != nil {
		return nil, err
	}
	m.cfg = &cfg
	m.pred.setTTL(cfg.PredictTTL())
	m.sess.setTTL(cfg.SessionAffinityTTL)
	m.overAll()   // the busy thresholds may have changed
	m.repoolAll() // the classes or the busy thresholds may have changed
	return m.drain(now), nil
}

// AddWorker makes a worker's ranks routable; requests waiting for the minimum fleet may be released. A
// worker already listed is replaced, as if it left first (RemoveWorker: its active requests are
// forgotten).
func (m *Machine) AddWorker(now time.Time, w Worker) []Released {
	if w.DPRanks < 1 {
		w.DPRanks = 1
	}
	if from, to := m.ranks(w.ID); from < to { // joining again: the new registration replaces the old
		m.drop(w.ID, from)
	}
	wp := &w
	lc := load.ConfigFrom(m.cfg)
	from := len(m.list)
	for r := 0; r < w.DPRanks; r++ {
		t := &target{key: scoring.WorkerKey{WorkerID: w.ID, DPRank: uint32(r)}, w: wp, t: load.New(lc), healthy: true}
		m.list = append(m.list, t)
		if w.TotalKVBlocks > 0 {
			m.approx.SetCapacity(t.key, w.TotalKVBlocks)
		}
	}
	m.seenWorkers++
	m.workers++
	m.extend(from)
	return m.drain(now)
}

// RemoveWorker drops a worker's ranks; its active requests are forgotten (their lifecycle calls answer
// ErrUnknownRequest) and its session bindings are dropped.
func (m *Machine) RemoveWorker(now time.Time, id uint64) []Released {
	if from, to := m.ranks(id); from < to {
		m.drop(id, from)
	}
	m.sess.removeWorker(id)
	return m.drain(now)
}

// ranks returns where worker id's targets sit in the list, [from, to) (empty when it has none): a
// worker's ranks join together, rank 0 first, and stay adjacent (drop keeps the order), so rank 0 is
// found by key and the rest follow it. Calls per worker (a capacity report per health check, for each
// worker) then cost its ranks rather than a pass over the fleet.
func (m *Machine) ranks(id uint64) (from, to int) {
	from, ok := m.pos.find(scoring.WorkerKey{WorkerID: id})
	if !ok {
		return 0, 0
	}
	to = from + 1
	for to < len(m.list) && m.list[to].key.WorkerID == id {
		to++
	}
	return from, to
}

// drop takes worker id's targets, the first at index first, out of the list and the dense views. The
// targets after them move down in order, each with its line, template and position, and the fleet's
// counts lose the dropped lines; nothing is rebuilt. Rebuilding every view, and a pass over every active
// request, held the machine 0.63–1.0 ms a leave at 8,192 workers (2.1–2.2 ms with 8 active requests a
// worker); now 46–73 µs (BenchmarkRemoveWorker, docs/benchmarks.md).
func (m *Machine) drop(id uint64, first int) {
	j := first
	for i := first; i < len(m.list); i++ {
		t := m.list[i]
		if t.key.WorkerID == id {
			m.forget(t)
			continue
		}
		m.list[j], m.lines[j], m.tmpl[j], m.ctxs[j], m.pfg[j] = t, m.lines[i], m.tmpl[i], m.ctxs[i], m.pfg[i]
		m.evictedAt[j] = m.evictedAt[i]
		t.i = j
		m.pos.put(t.key, j)
		j++
	}
	clear(m.list[j:])
	m.workers--
	m.list, m.lines, m.tmpl, m.ctxs, m.pfg = m.list[:j], m.lines[:j], m.tmpl[:j], m.ctxs[:j], m.pfg[:j]
	m.evictedAt = m.evictedAt[:j]
	m.overFrom(first)
	m.positionsMoved()
}

// forget removes a target leaving the list from the position table, the side indexes and the fleet's
// counts (what publish, setRoom and SetHealthy added for it), and forgets its active requests: those its
// tracker holds, which are those active maps to it (every change to one is made to the other), so a
// leave costs the worker's requests rather than a pass over every active request.
func (m *Machine) forget(t *target) {
	for id := range t.t.Requests() {
		delete(m.active, id)
		delete(m.obs, id)
		delete(m.dreq, id)
	}
	m.pos.del(t.key)
	m.unpool(t)
	if t.over {
		m.overN--
	}
	m.approx.RemoveWorker(t.key)
	m.pred.removeWorker(t.key)
	l := &m.lines[t.i]
	m.prefilling -= int64(l.prefilling)
	if l.prefill == 0 {
		m.pfIdle--
	}
	if t.spacious {
		m.roomy--
	}
	if t.age.evictedAt > 0 {
		m.evicting--
	}
	if !t.healthy {
		m.unhealthy--
		delete(m.sick, t)
	}
}

// extend adds the dense views of the targets the list holds from index from on, leaving the others'
// as they are (each is kept current where its target changes); extend(0) on empty views builds them
// all (TestFleetChangesKeepViewsAsRebuildWould). A worker joining appends its targets, so a fleet
// registering one worker at a time costs a step per worker, where rebuilding every view per join cost
// the fleet's size: 8,000 workers took 3.5 s, each of the last joins holding the machine 0.9 ms.
func (m *Machine) extend(from int) {
	n := len(m.list)
	if 2*n > len(m.pos.slots) { // at most half full: a larger table, with every position again
		m.pos = newPosTable(n)
		for i, t := range m.list[:from] {
			m.pos.put(t.key, i)
		}
	}
	m.overFrom(from)
	for i, t := range m.list[from:] {
		i += from
		t.i = i
		m.pos.put(t.key, i)
		m.lines = append(m.lines, line{})
		m.tmpl = append(m.tmpl, candTmpl{worker: t.key, totalKV: t.totalKV(), maxBatched: t.maxBatched(), device: t.w.Device})
		m.ctxs = append(m.ctxs, t.ctx)
		m.pfg = append(m.pfg, t.pfg)
		m.evictedAt = append(m.evictedAt, t.age.evictedAt)
		if t.age.evictedAt > 0 {
			m.evicting++
		}
		m.pfIdle++ // publish counts the new line's own prefill in or out
		m.publish(t)
		t.spacious = false
		m.setRoom(t)
	}
	m.positionsMoved()
}

// positionsMoved drops what remembers target positions (a join's new target may own a key they hold as
// absent; a leave moves the later targets down): the overlap memo, the slot maps of the index's keys
// tables and the exclusion bitmap.
func (m *Machine) positionsMoved() {
	m.sc.memo = m.sc.memo[:0]
	m.sc.slots = m.sc.slots[:0]
	m.sc.excl.valid = false
}

// publish copies a target's tracker load into its line.
func (m *Machine) publish(t *target) {
	s := t.t.Snapshot()
	l := &m.lines[t.i]
	m.prefilling += int64(s.PrefillingRequests) - int64(l.prefilling)
	if l.prefill == 0 {
		m.pfIdle--
	}
	if s.ActivePrefillTokens == 0 {
		m.pfIdle++
	}
	l.prefill, l.decode, l.unique = s.ActivePrefillTokens, s.ActiveDecodeBlocks, uint32(s.UniqueBlocks)
	l.active, l.prefilling = uint32(s.ActiveRequests), uint32(s.PrefillingRequests)
	m.reover(t)
	m.repool(t)
}

// find returns the target of k, or nil.
func (m *Machine) find(k scoring.WorkerKey) *target {
	if i, ok := m.pos.find(k); ok {
		return m.list[i]
	}
	return nil
}

// SetHealthy takes a worker's ranks out of the candidate set or puts them back; it reports whether the
// state changed. Bringing a worker back may release waiting requests.
func (m *Machine) SetHealthy(now time.Time, id uint64, healthy bool) (bool, []Released) {
	changed := false
	from, to := m.ranks(id)
	for _, t := range m.list[from:to] {
		if t.healthy == healthy {
			continue
		}
		t.healthy, changed = healthy, true
		if healthy {
			m.unhealthy--
			delete(m.sick, t)
		} else {
			m.unhealthy++
			if m.sick == nil {
				m.sick = make(map[*target]struct{})
			}
			m.sick[t] = struct{}{}
		}
		m.repool(t)
	}
	if changed && healthy {
		return true, m.drain(now)
	}
	return changed, nil
}

// SetKVUsage records a worker rank's own report of KV blocks in use (busy thresholds).
func (m *Machine) SetKVUsage(k scoring.WorkerKey, used uint64) {
	if t := m.find(k); t != nil {
		t.kvUsed, t.kvKnown = used, true
		m.reover(t)
		m.repool(t)
	}
}

// SetCapacity records the KV capacity (blocks per rank) and token budget a worker reports about itself,
// used when its registration gave none. Zero values leave a field as it is.
func (m *Machine) SetCapacity(id uint64, totalKVBlocks, maxBatched int) {
	from, to := m.ranks(id)
	for _, t := range m.list[from:to] {
		if totalKVBlocks > 0 && t.w.TotalKVBlocks == 0 && t.learnedKV != uint64(totalKVBlocks) {
			t.learnedKV = uint64(totalKVBlocks)
			m.approx.SetCapacity(t.key, totalKVBlocks)
		}
		if maxBatched > 0 && t.w.MaxNumBatchedTokens == 0 {
			t.learnedBatched = uint64(maxBatched)
		}
		m.tmpl[t.i].totalKV, m.tmpl[t.i].maxBatched = t.totalKV(), t.maxBatched()
		m.setRoom(t)
		m.reover(t)
		m.repool(t)
	}
}

// PrefillDone marks a request's first token: its prefill charge leaves the worker's load, and the queue
// may release requests.
func (m *Machine) PrefillDone(now time.Time, id string) ([]Released, error) {
	t := m.active[id]
	if t == nil || !t.t.MarkPrefillCompleted(id) {
		return nil, fmt.Errorf("%w: %q", ErrUnknownRequest, id)
	}
	m.publish(t)
	m.pfDone(t, id, now.UnixNano())
	m.observeFirstToken(now, id)
	m.decodeFirst(t, id, now.UnixNano())
	if m.observe != nil {
		m.observe(LoadEvent{Kind: LoadPrefillDone, RequestID: id, Worker: t.key})
	}
	return m.drain(now), nil
}

// Free ends a request (completion, error, cancel); the queue may release requests.
func (m *Machine) Free(now time.Time, id string) ([]Released, error) {
	t := m.active[id]
	if t == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownRequest, id)
	}
	delete(m.active, id)
	delete(m.obs, id)
	m.ageFreed(t, id, now.UnixNano())
	m.decodeFreed(t, id, now.UnixNano(), true)
	t.t.Free(id)
	m.publish(t)
	m.pfDone(t, id, now.UnixNano())
	if m.observe != nil {
		m.observe(LoadEvent{Kind: LoadFree, RequestID: id, Worker: t.key})
	}
	return m.drain(now), nil
}

// RecordOutput reports a request's generated tokens so far (output-block tracking).
func (m *Machine) RecordOutput(id string, tokens int) {
	t := m.active[id]
	if t == nil {
		return
	}
	m.decodeOutput(id, tokens)
	if !m.cfg.TrackOutputBlocks {
		return
	}
	if t.t.RecordOutput(id, tokens) {
		m.publish(t)
	}
}

// Active reports the number of routed requests not yet freed (remote ones included).
func (m *Machine) Active() int { return len(m.active) }

// Waiting reports the number of requests in the queue and at the minimum-workers gate.
func (m *Machine) Waiting() int { return len(m.waitByID) }

// TargetLoad is one target's load, for metrics and status pages.
type TargetLoad struct {
	Worker    scoring.WorkerKey
	Load      load.Snapshot
	Healthy   bool
	Predicted bool // events stopped: blocks predicted from routing history
	// FreeKVBlocks is its KV capacity less the blocks the index has it holding (room.go), -1 while
	// either is unknown.
	FreeKVBlocks int64
	// EvictingFreedAt is when the blocks its engine evicts now were freed (age.go): zero while it has
	// evicted nothing, the Unix epoch while it has evicted only blocks whose release is not recorded.
	EvictingFreedAt time.Time
}

// PrefillCarried returns the prefill tokens the healthy targets carry, summed, and how many targets are
// healthy: what Loads would give summed, read from the dense lines without a TargetLoad per target (the
// disaggregation policy asks per request: at 8,192 targets 7.1–8.1 µs, where the list cost 1.3–1.4 ms
// and 3.2 MB).
func (m *Machine) PrefillCarried() (tokens uint64, healthy int) {
	for i := range m.lines {
		if m.unhealthy == 0 || m.list[i].healthy {
			tokens += m.lines[i].prefill
			healthy++
		}
	}
	return tokens, healthy
}

// Loads appends every target's load to dst, grown once for all of them: appending 8,192 to a nil slice
// took 1.2–1.5 ms and 3.2 MB under the scheduler's lock (per metrics scrape and readiness probe), 0.41–
// 0.46 ms and 0.79 MB grown once (a one-off benchmark).
func (m *Machine) Loads(dst []TargetLoad) []TargetLoad {
	dst = slices.Grow(dst, len(m.list))
	for i, t := range m.list {
		l := &m.lines[i]
		tl := TargetLoad{Worker: t.key, Healthy: t.healthy, Predicted: t.approx, FreeKVBlocks: int64(l.room) - 1,
			Load: load.Snapshot{ActivePrefillTokens: l.prefill, ActiveDecodeBlocks: l.decode, UniqueBlocks: int(l.unique),
				ActiveRequests: int(l.active), PrefillingRequests: int(l.prefilling)}}
		if t.age.evictedAt > 0 {
			tl.EvictingFreedAt = time.Unix(0, t.age.evictedAt)
		}
		dst = append(dst, tl)
	}
	return dst
}

// Tick runs the time-driven work at now: approximate-mode and predicted-index expiry, stale-request
// expiry, session expiry and the minimum-workers patience. It returns the requests it released or
// failed. A worker's requests are swept for stale ones at most every load.Config.CleanupInterval (30 s,
// Dynamo's; a tenth of StaleExpiry when that is shorter), not at every tick: sweeping 65,536 active
// requests at every tick held the machine 5.0–6.2 ms a second at 8,192 workers (BenchmarkTick).
func (m *Machine) Tick(now time.Time) []Released {
	m.expireApprox(now)
	m.pred.expireDue(now)
	m.sess.expire(now)
	freed := false
	for _, t := range m.list {
		ids := t.t.MaybeExpire(now) // each tracker's sweep of its requests at most every CleanupInterval
		if len(ids) == 0 {
			continue
		}
		freed = true
		m.publish(t)
		for _, id := range ids {
			delete(m.active, id)
			delete(m.obs, id)
			m.decodeFreed(t, id, now.UnixNano(), false)
		}
	}
	rel := m.expireGate(now, nil)
	if freed || m.pq.live > 0 {
		rel = append(rel, m.drain(now)...)
	}
	return rel
}

// expireApprox removes approximate-mode blocks whose TTL passed.
func (m *Machine) expireApprox(now time.Time) {
	for _, r := range m.approx.Expire(now) {
		m.index.Remove(r.Worker, r.Hashes)
	}
}

// EventHealth is per-worker degradation at now. A worker that was sent requests but has published no KV
// event batch for stale since (lastBatch: the time of its last batch, zero if none) is switched, alone,
// to approximate prediction: its routed prompts are recorded in the index with the TTL. When its batches
// flow again it goes back to its events. toApprox and toEvents list the workers that changed, for the
// caller to resync and report. It is EventMarks, JudgeEvents and ApplyEvents in one go; a caller that
// holds a lock around the machine runs JudgeEvents outside it.
func (m *Machine) EventHealth(now time.Time, stale time.Duration, lastBatch func(id uint64) (time.Time, bool)) (toApprox, toEvents []uint64) {
	if stale <= 0 || !m.cfg.UseKVEvents {
		return nil, nil
	}
	m.sc.marks = m.EventMarks(m.sc.marks)
	JudgeEvents(now, stale, m.sc.marks, lastBatch)
	return m.ApplyEvents(m.sc.marks)
}

// EventMark is a target EventHealth has to look at: one sent requests since its worker's last batch
// (Since, when the first was routed, Unix ns) or one predicted (Approx), as EventMarks found it, and what
// JudgeEvents decided for it.
type EventMark struct {
	Worker scoring.WorkerKey
	Since  int64
	Approx bool
	act    eventAct
}

// eventAct is what JudgeEvents decided for a mark.
type eventAct uint8

const (
	actCaughtUp eventAct = 1 << iota // the worker's events caught up with its requests: Since cleared
	actApprox                        // predicted from its routing history from now on
	actEvents                        // its events flow again
)

// EventMarks appends to dst a mark for every target with requests pending its worker's events or
// predicted, in target order: the only ones degradation can change. It is the part of EventHealth that
// reads the machine, one plain pass; at 8,192 workers the whole check under the scheduler's lock held it
// 124–204 us a tick (a map lookup per target), most of it now in JudgeEvents, outside.
func (m *Machine) EventMarks(dst []EventMark) []EventMark {
	dst = dst[:0]
	if !m.cfg.UseKVEvents {
		return dst
	}
	for _, t := range m.list {
		if t.pendingSince != 0 || t.approx {
			dst = append(dst, EventMark{Worker: t.key, Since: t.pendingSince, Approx: t.approx})
		}
	}
	return dst
}

// JudgeEvents decides each mark at now from its worker's last batch (lastBatch: false for a worker that
// publishes no events, whose marks are left alone), reading nothing of the machine.
func JudgeEvents(now time.Time, stale time.Duration, marks []EventMark, lastBatch func(id uint64) (time.Time, bool)) {
	for i := range marks {
		mk := &marks[i]
		mk.act = 0
		last, ok := lastBatch(mk.Worker.WorkerID)
		if !ok {
			continue
		}
		since := mk.Since
		if since != 0 && !last.IsZero() && last.UnixNano() >= since {
			since, mk.act = 0, actCaughtUp
		}
		switch {
		case !mk.Approx && since != 0 && now.Sub(time.Unix(0, since)) > stale && (last.IsZero() || now.Sub(last) > stale):
			mk.act |= actApprox
		case mk.Approx && !last.IsZero() && now.Sub(last) < stale && since == 0:
			mk.act |= actEvents
		}
	}
}

// ApplyEvents carries out the judged marks on the targets still as they were marked (a target whose
// pending time or mode changed since, or that left, is judged again at the next check), and returns the
// workers switched to prediction and back to their events, each once.
func (m *Machine) ApplyEvents(marks []EventMark) (toApprox, toEvents []uint64) {
	for i := range marks {
		mk := &marks[i]
		if mk.act == 0 {
			continue
		}
		t := m.find(mk.Worker)
		if t == nil || t.pendingSince != mk.Since || t.approx != mk.Approx {
			continue
		}
		if mk.act&actCaughtUp != 0 {
			t.pendingSince = 0
		}
		switch {
		case mk.act&actApprox != 0:
			t.approx = true
			toApprox = appendOnce(toApprox, t.key.WorkerID)
		case mk.act&actEvents != 0:
			t.approx = false
			toEvents = appendOnce(toEvents, t.key.WorkerID)
		}
	}
	return toApprox, toEvents
}

func appendOnce(s []uint64, v uint64) []uint64 {
	if n := len(s); n > 0 && s[n-1] == v {
		return s
	}
	return append(s, v)
}
